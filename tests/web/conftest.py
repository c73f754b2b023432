"""A real console for the web tests: `create_app` served by uvicorn on a free loopback port,
over the session's private redis-server (emptied for each test), with an operator's and a
reader's token; httpx clients speak to it as a browser or another language would."""

from __future__ import annotations

import contextlib
import html
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
import uvicorn

from kiqbeat.engine import Engine
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from kiqbeat.web.app import create_app
from kiqbeat.web.auth import Auth, Token
from kiqbeat.web.serve import server_config
from kiqbeat.web.throttle import Throttle
from tests.entrypoints.conftest import free_port

# Tokens of the kind the docs say to make (secrets.token_urlsafe(24)): a token of one
# repeated character is refused (auth.MIN_TOKEN_BITS).
OPERATOR_TOKEN = "op-Lq3vX9tRk2Wm8YpB7nZc4HdJ"
READER_TOKEN = "rd-Fs6aQe1GxU5oVi0bNy2TlKwC"


@dataclass
class Served:
    """A running console: its URL, the tokens, and the Redis it serves."""

    url: str
    redis_url: str
    server: uvicorn.Server

    def api(self, token: str | None = OPERATOR_TOKEN) -> httpx.Client:
        """A client of the JSON API (with a bearer token unless None)."""
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    @contextlib.contextmanager
    def browser(self, token: str | None = OPERATOR_TOKEN) -> Iterator[httpx.Client]:
        """A cookie-keeping client, signed in through the form with `token` (unless None)."""
        with httpx.Client(base_url=self.url, timeout=30, follow_redirects=True) as client:
            if token is not None:
                page = client.get("/login")
                done = client.post("/login", data={"token": token, "csrf": csrf_of(page.text),
                                                   "next": "/"})
                assert done.status_code == 200, done.text
            yield client


def csrf_of(html: str) -> str:
    """The CSRF field of the first form on a page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def serve(app: object, **limits: float) -> tuple[uvicorn.Server, threading.Thread, str]:
    """Serve an ASGI app from a thread, configured as `kiqbeat web` configures uvicorn
    (kiqbeat.web.serve); returns once it accepts connections."""
    port = free_port()
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, log_level="warning",
                                          lifespan="on", **limits))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the console did not start")
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


def form_of(page: str, action: str, marker: str = "") -> dict[str, str]:
    """What a browser posts from the page's form to `action` (the first whose HTML holds
    `marker`): its hidden inputs' values and textareas' text, unescaped (the fields a
    person fills in or ticks are the caller's to add)."""
    for form in re.findall(r'<form method="post" action="([^"]*)"[^>]*>(.*?)</form>', page,
                           flags=re.S):
        if not form[0].endswith(action) or marker not in form[1]:
            continue
        fields = {n: html.unescape(v) for n, v in re.findall(
            r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form[1])}
        fields |= {n: html.unescape(v) for n, v in re.findall(
            r'<textarea name="([^"]+)"[^>]*>(.*?)</textarea>', form[1], flags=re.S)}
        return fields
    raise AssertionError(f"no form posting to {action} holding {marker!r}")


Start = Callable[..., Served]


@pytest.fixture
def start_console(redis_url: str) -> Iterator[Start]:
    """Start a console over the test's Redis (tokens, or anonymous)."""
    running: list[tuple[uvicorn.Server, threading.Thread, Engine]] = []

    def start(*, tokens: list[Token] | None = None, anonymous: bool = False,
              url: str = redis_url, sweep: bool = True, throttle: Throttle | None = None,
              **limits: float) -> Served:
        engine = Engine(Settings(redis_url=url))
        auth = Auth([Token("alice", "operator", OPERATOR_TOKEN),
                     Token("bob", "reader", READER_TOKEN)] if tokens is None else tokens,
                    anonymous=anonymous)
        app = create_app(engine, auth, sweep=sweep)
        if throttle is not None:
            app.state.throttle = throttle
        server, thread, base = serve(app, **limits)
        running.append((server, thread, engine))
        return Served(base, url, server)

    yield start
    for server, thread, engine in running:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()


@pytest.fixture
def console(start_console: Start) -> Served:
    """A console with an operator (alice) and a reader (bob)."""
    return start_console()


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    """The store the console serves, as the Python API sees it."""
    client = redis.Redis.from_url(redis_url)
    yield Store(client)
    client.close()

