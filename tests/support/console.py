"""A real console for tests: `create_app` served by uvicorn on a free loopback port, with an
operator's and a reader's token (`start_console`, a fixture), and what a browser reads off
its pages and posts from its forms.

tests/conftest.py loads this module as a plugin for every test: the console's libraries are
imported when a console is started, not here, so a run without the web tests does not pay
for them.
"""

from __future__ import annotations

import contextlib
import html
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
import redis

from tests.support.ports import free_port

if TYPE_CHECKING:
    import httpx
    import uvicorn

    from kiqbeat.engine import Engine
    from kiqbeat.web.auth import Token
    from kiqbeat.web.throttle import Throttle

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
        import httpx

        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    @contextlib.contextmanager
    def browser(self, token: str | None = OPERATOR_TOKEN) -> Iterator[httpx.Client]:
        """A cookie-keeping client, signed in through the form with `token` (unless None)."""
        import httpx

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
    import uvicorn

    from kiqbeat.web.serve import server_config

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
              url: str = redis_url, background: bool = True, throttle: Throttle | None = None,
              **limits: float) -> Served:
        from kiqbeat.engine import Engine
        from kiqbeat.settings import Settings
        from kiqbeat.web.app import create_app
        from kiqbeat.web.auth import Auth, Token

        engine = Engine(Settings(redis_url=url))
        auth = Auth([Token("alice", "operator", OPERATOR_TOKEN),
                     Token("bob", "reader", READER_TOKEN)] if tokens is None else tokens,
                    anonymous=anonymous)
        app = create_app(engine, auth, background=background)
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


DIGEST = {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "DigestWorker", "args": [42]}


def path(name: str) -> str:
    """The API path of schedule `name`."""
    return "/api/v1/schedules/" + quote(name, safe="")


def document_schedule(client: redis.Redis, name: str) -> None:
    """Store schedule `name` as a document's (read-only through the API and the console)."""
    from kiqbeat.document.validate import encode_definition
    from kiqbeat.redis.definitions import Op
    from kiqbeat.redis.side import RedisSide

    data = encode_definition({"cron": "* * * * *", "class": "W"}, "s3://bucket/kiqbeat.yaml")
    RedisSide(client).write([Op("put", name, data, "s3://bucket/kiqbeat.yaml")], now_ms=None)
