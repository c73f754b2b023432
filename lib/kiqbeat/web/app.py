"""The console as an ASGI app: `create_app(engine, auth)`, served by `kiqbeat web` or mounted
behind a team's own server (any ASGI server: uvicorn, hypercorn, granian).

    from kiqbeat.engine import Engine
    from kiqbeat.web.app import create_app
    from kiqbeat.web.auth import Auth
    app = create_app(Engine.from_environ(), Auth.from_environ(os.environ))

Every answer carries a strict Content-Security-Policy (no script at all, styles from this
origin only, no framing), `X-Content-Type-Options: nosniff`, `Cache-Control: no-store` and
`Referrer-Policy: same-origin` (with `no-referrer`, Chromium posts forms with
`Origin: null`, which the Origin check refuses: found by the browser tests). A POST, PUT
or DELETE whose Origin header names another origin is refused before any handler runs; an
anonymous console (no tokens, loopback only) refuses a Host header that is not a loopback
name (DNS rebinding).

While the app runs, a thread builds the name index once if the store predates it
(redis/names.py), then walks the histories for the overview's recent pushes (recent.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kiqbeat.engine import Engine
from kiqbeat.errors import KiqbeatError
from kiqbeat.web import api, pages
from kiqbeat.web.auth import NONCE_COOKIE, SESSION_COOKIE, Auth, Session, is_loopback_host
from kiqbeat.web.console import Console
from kiqbeat.web.metrics import metrics_endpoint
from kiqbeat.web.pages import set_nonce
from kiqbeat.web.sessions import Sessions
from kiqbeat.web.throttle import Throttle

CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY",
           "Cache-Control": "no-store"}
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


async def _guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]
                 ) -> Response:
    auth: Auth = request.app.state.auth
    response: Response
    if auth.anonymous and not is_loopback_host(request.headers.get("host", "")):
        response = PlainTextResponse("refused: this console has no tokens and answers only "
                                     "to a loopback Host (127.0.0.1, localhost)",
                                     status_code=403)
    elif request.method in UNSAFE and request.headers.get("origin") not in (
            None, f"{request.url.scheme}://{request.headers.get('host', '')}"):
        response = PlainTextResponse("refused: a request from another origin",
                                     status_code=403)
    else:
        nonce = request.cookies.get(NONCE_COOKIE, "")
        fresh = not auth.nonce_ok(nonce)
        request.state.nonce = auth.new_nonce() if fresh else nonce
        request.state.session = None
        if auth.anonymous:
            request.state.principal = auth.bearer("")  # the anonymous operator
        else:
            session = auth.verify_session(request.cookies.get(SESSION_COOKIE, ""))
            if session is not None and await run_in_threadpool(_alive, request, session):
                request.state.session = session
                request.state.principal = session.principal
            else:
                request.state.principal = None
        response = await call_next(request)
        if fresh and not getattr(request.state, "nonce_rotated", False):
            set_nonce(request, response, request.state.nonce)
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _alive(request: Request, session: Session) -> bool:
    """Whether a verified cookie's session record still exists (a Redis error: no)."""
    sessions: Sessions = request.app.state.sessions
    try:
        return sessions.alive(session)
    except KiqbeatError:
        return False


def _health(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _background(console: Console, stop: threading.Event) -> None:
    """The console's thread: the name index built if need be, then the histories walked."""
    while not stop.is_set():
        try:
            console.build_index()
            break
        except KiqbeatError:
            stop.wait(1.0)  # Redis away: try again
    console.recent.run_until(stop)


def create_app(engine: Engine, auth: Auth, *, root_path: str = "", background: bool = True
               ) -> Starlette:
    """The console and API over `engine`'s store; `root_path` is where it is mounted (links
    are made under it); `background` runs, in a thread while it serves, the name index's
    build (once, on a store that predates it) and the walk of the histories."""
    console = Console(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = threading.Event()
        thread = None
        if background:
            thread = threading.Thread(target=_background, args=(console, stop),
                                      name="kiqbeat-console", daemon=True)
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread is not None:
                thread.join(timeout=5)

    static = StaticFiles(directory=str(resources.files("kiqbeat.web") / "static"))
    routes = [*api.routes(), *pages.routes(),
              Route("/healthz", _health, methods=["GET"]),
              Route("/metrics", metrics_endpoint, methods=["GET"]),
              Mount("/static", static, name="static")]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(BaseHTTPMiddleware, dispatch=_guard)])
    app.state.auth = auth
    app.state.console = console
    app.state.sessions = Sessions(console.client, console.namespace)
    app.state.throttle = Throttle()
    app.state.pages = pages.Pages(console, auth, root_path)
    return app
