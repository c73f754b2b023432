"""The console's pages: server-rendered HTML that works without JavaScript.

Every value from the store is escaped twice over: the `v` filter (`kiqbeat.errors.escaped`,
the CLI's escaping) turns control, bidi and other invisible characters into `\\u202e`-style
text (a name cannot reorder or hide what follows it), then Jinja2's autoescape escapes
markup. That escaped text is for display only: a form carries the schedule's name
losslessly, percent-encoded in its `key` field (`form_name` reads it back), so an action
always hits the schedule shown, never one literally named as its escaped form. A schedule
is addressed by a query parameter (`/schedule?name=...`), never by a path segment, so that
any name works. Actions are POST forms carrying the CSRF field (auth.py); after one, the
browser is sent back to the schedule's page (303) with a fixed message.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from kiqbeat.core.limits import MAX_AUDIT_ENTRIES, MAX_DEFINITION_BYTES, MAX_PENDING_SKIPS
from kiqbeat.core.records import REASONS
from kiqbeat.entrypoints.outcomes import Outcome
from kiqbeat.entrypoints.requests import from_fields
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    ScheduleNotFoundError,
    escaped,
    foreign_json,
    shown,
)
from kiqbeat.web.auth import NONCE_COOKIE, SESSION_COOKIE, SESSION_S, Auth, Principal, Session
from kiqbeat.web.bearer import Refusal, admit
from kiqbeat.web.console import FILTERS, STATES, STRIP_TICKS, Console, definition_of
from kiqbeat.web.sessions import Sessions

FLASH = {"paused": "Paused.", "resumed": "Resumed.", "unchanged": "Nothing to change.",
         "skipped": "Its next tick(s) will be skipped.",
         "triggered": "Pushed one job now.", "saved": "Saved; the next invocation plans it.",
         "created": "Created; the next invocation plans it.", "deleted": "Deleted.",
         "signed-in": "Signed in."}


def visible(value: object) -> str:
    """`value` as text for display, escaped as the CLI escapes it (`kiqbeat.errors.escaped`)."""
    return escaped("" if value is None else str(value))


def quoted(value: object) -> str:
    """A name percent-encoded for a query string (every reserved character, `/` too)."""
    return quote(str(value).encode(errors="surrogateescape"), safe="")


def form_name(fields: dict[str, str]) -> str:
    """The schedule a posted form names: its `key` field (`quoted` by the page, lossless:
    any character, any byte) or else its `name` field as typed."""
    if "key" in fields:
        return unquote(fields["key"], errors="surrogateescape")
    return fields.get("name", "")


def _environment() -> Environment:
    folder = resources.files("kiqbeat.web") / "templates"
    env = Environment(loader=FileSystemLoader(str(folder)),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["v"] = visible
    env.filters["q"] = quoted
    return env


TEMPLATES = _environment()


class Pages:
    """Renders pages for one app (its root path, auth and console)."""

    def __init__(self, console: Console, auth: Auth, root: str = "") -> None:
        self.console, self.auth, self.root = console, auth, root.rstrip("/")

    def render(self, request: Request, template: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        """A page with what every page needs (the principal, the CSRF field, the flash)."""
        nonce = request.state.nonce
        flash = FLASH.get(request.query_params.get("done", ""), "")
        html = TEMPLATES.get_template(template).render(
            root=self.root, principal=request.state.principal, anonymous=self.auth.anonymous,
            csrf=self.auth.csrf_field(nonce), flash=flash, states=STATES, reasons=REASONS,
            **context)
        return HTMLResponse(html, status_code=status)

    def problems(self, request: Request, title: str, problems: list[str], status: int,
                 back: str = "") -> HTMLResponse:
        """An error page listing `problems` (escaped like every value)."""
        return self.render(request, "error.html", status, title=title, problems=problems,
                           back=back or f"{self.root}/")

    def go(self, path: str, **query: str) -> RedirectResponse:
        """A 303 to one of the console's pages."""
        text = "&".join(f"{k}={quoted(v)}" for k, v in query.items())
        return RedirectResponse(f"{self.root}{path}" + (f"?{text}" if text else ""),
                                status_code=303)


def set_nonce(request: Request, response: Response, nonce: str) -> None:
    """Give the browser the CSRF nonce cookie `nonce`."""
    response.set_cookie(NONCE_COOKIE, nonce, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")


def _rotate_nonce(request: Request, response: Response) -> None:
    """A new CSRF nonce at sign-in and sign-out: a field seen before is worth nothing."""
    set_nonce(request, response, Auth.new_nonce())
    request.state.nonce_rotated = True


# A posted form's bounds: (fields, bytes a part); the sign-in and sign-out forms' are small.
FORM_LIMITS = (20, 256 * 1024)
SIGN_IN_FORM_LIMITS = (5, 4096)


def page(handler: Callable[[Request, Pages, Principal], Response], *, act: bool = False,
         signed_in: bool = True, limits: tuple[int, int] = FORM_LIMITS
         ) -> Callable[[Request], Any]:
    """An HTML endpoint: signed in (else to /login; the sign-in and sign-out pages alone are
    not), an operator for `act`, a POST's form read within `limits` and its CSRF field
    checked, the console's errors shown as a page."""

    async def run(request: Request) -> Response:
        pages: Pages = request.app.state.pages
        principal = request.state.principal  # None: not signed in
        if principal is None and signed_in:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return pages.go("/login", next=target)
        if act and not principal.operator:
            return pages.problems(request, "Not allowed", [
                "this token may read, not act (an operator's token acts)"], 403)
        if request.method == "POST":
            most_fields, most_bytes = limits
            try:
                data = await request.form(max_files=0, max_fields=most_fields,
                                          max_part_size=most_bytes)
            except ClientDisconnect:  # gone, or dropped by the server's read deadline
                return pages.problems(request, "Too slow", ["the form did not arrive in "
                                                            "time"], 408)
            fields = {k: v for k, v in data.items() if isinstance(v, str)}
            if not pages.auth.csrf_ok(request.state.nonce, fields.get("csrf", "")):
                return pages.problems(request, "Form refused", [
                    "the form's CSRF field is missing or does not match this browser "
                    "(reload the page and try again)"], 403)
            request.state.fields = fields
        try:
            response: Response = await run_in_threadpool(handler, request, pages, principal)
            return response
        except ScheduleNotFoundError as exc:
            return pages.problems(request, "No such schedule", exc.problems, 404)
        except ConfigError as exc:
            return pages.problems(request, "Refused", exc.problems, 422)
        except KiqbeatError as exc:
            return pages.problems(request, "Failed", [str(exc)], 503)

    return run


def _fields(request: Request) -> dict[str, str]:
    fields: dict[str, str] = request.state.fields
    return fields


def overview(request: Request, pages: Pages, _: Principal) -> Response:
    return pages.render(request, "overview.html", o=pages.console.overview())


def schedules(request: Request, pages: Pages, _: Principal) -> Response:
    q = request.query_params
    f = {k: q.get(k, "") for k in FILTERS}
    result = pages.console.page(**f, cursor=q.get("cursor", ""), limit=50)
    next_url = ""
    if result.next_cursor:
        next_url = f"{pages.root}/schedules?" + urlencode(
            {**{k: v for k, v in f.items() if v}, "cursor": result.next_cursor})
    return pages.render(request, "schedules.html", page=result, f=f, next_url=next_url)


def schedule(request: Request, pages: Pages, principal: Principal) -> Response:
    name = request.query_params.get("name", "")
    d = pages.console.detail(ask(pages, principal, "get", {"name": name}).value)
    size = d.row.status.oversized_bytes
    definition = (foreign_json(d.row.status.definition, indent=2) if size is None else
                  f"(not read: {size:,} bytes, over the limit of {MAX_DEFINITION_BYTES:,}; "
                  "set aside)")
    return pages.render(request, "schedule.html", d=d, definition=definition,
                        max_skips=MAX_PENDING_SKIPS, strip_ticks=STRIP_TICKS,
                        entries=d.audit)


def audit(request: Request, pages: Pages, _: Principal) -> Response:
    name = request.query_params.get("name") or None
    return pages.render(request, "audit.html", name=name, kept=MAX_AUDIT_ENTRIES,
                        entries=pages.console.audit(name, 200))


def new(request: Request, pages: Pages, _: Principal) -> Response:
    text = "cron: \"0 9 * * *\"\nclass: MyWorker\nqueue: default\nargs: []\n"
    return pages.render(request, "edit.html", editing=False, name="", text=text, problems=[])


def edit(request: Request, pages: Pages, _: Principal) -> Response:
    name = request.query_params.get("name", "")
    row = pages.console.get(name)
    if row.status.source:
        return pages.problems(request, "Read-only here", [
            f"schedule {shown(name)} belongs to the document {shown(row.status.source, 200)}: "
            "change it there"], 409, back=f"{pages.root}/schedule?name={quoted(name)}")
    text = foreign_json(row.status.definition, indent=2)
    return pages.render(request, "edit.html", editing=True, name=name, text=text, problems=[])


def ask(pages: Pages, principal: Principal, kind: str, fields: dict[str, Any]) -> Outcome:
    """A form's request: its text read and checked by the request model of the CLI and the
    Lambda, as a command line's (a skip count, a trigger's args: the same messages), run by
    their one dispatch (`Console.execute`); the outcome is the page's to render."""
    return pages.console.execute(principal.actor, from_fields(kind, fields, text=True))


def save(request: Request, pages: Pages, principal: Principal) -> Response:
    fields = _fields(request)
    name, text = form_name(fields), fields.get("definition", "")
    editing = bool(fields.get("editing"))
    try:
        if not name:
            raise ConfigError("a schedule needs a name")
        done = ask(pages, principal, "put", {"name": name, "note": fields.get("note", ""),
                                             "definition": definition_of(text, name)})
    except ScheduleNotFoundError:
        raise
    except ConfigError as exc:
        return pages.render(request, "edit.html", 422, editing=editing, name=name, text=text,
                            problems=exc.problems)
    return pages.go("/schedule", name=name, done="created" if done.result["created"]
                    else "saved")


# A form's action -> the request kind it asks for, and the flash when it changed something
# (else "unchanged").
ACTIONS = {"pause": ("pause", "paused"), "resume": ("resume", "resumed"),
           "skip": ("skip", "skipped"), "trigger": ("trigger", "triggered"),
           "delete": ("remove", "deleted")}


def act(request: Request, pages: Pages, principal: Principal) -> Response:
    fields = _fields(request)
    name, action = form_name(fields), fields.get("action", "")
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {shown(action)}")
    asked: dict[str, Any] = {"name": name, "note": fields.get("note", "")}
    if action == "pause" and (until := fields.get("until", "").strip()):
        asked["until"] = until
    elif action == "skip":
        asked["count"] = fields.get("count", "").strip() or "1"
    elif action == "trigger" and (text := fields.get("args", "").strip()):
        asked["args"] = text
    elif action == "delete" and fields.get("confirm") != "1":
        raise ConfigError("tick 'really delete' to delete the schedule")
    kind, flash = ACTIONS[action]
    done = ask(pages, principal, kind, asked)
    if kind == "remove":  # none removed: refused as no such schedule (Console.execute)
        return pages.go("/schedules", done=flash)
    return pages.go("/schedule", name=name, done=flash if done.value is not False
                    else "unchanged")


def backfill(request: Request, pages: Pages, principal: Principal) -> Response:
    """The form (GET); posted, a dry run (the count, and how many ticks are from before
    first-seen), or, confirmed from the dry run's page (which posts `yes`: the operator saw
    the count), the push."""
    posted = request.method == "POST"
    fields = _fields(request) if posted else {}
    name = form_name(fields) if posted else request.query_params.get("name", "")
    since_text, until_text = fields.get("since", "").strip(), fields.get("until", "").strip()
    latest_only, confirm = bool(fields.get("latest_only")), fields.get("confirm") == "1"
    result = None
    if posted:
        raw: dict[str, Any] = {"names": [name], "latest_only": latest_only,
                               "dry_run": not confirm, "yes": fields.get("yes") == "1",
                               "note": fields.get("note", "")}
        raw |= {k: v for k, v in (("since", since_text), ("until", until_text)) if v}
        result = ask(pages, principal, "backfill", raw).value
    else:
        pages.console.get(name)  # no such schedule: 404
    return pages.render(request, "backfill.html", name=name, result=result, dry=not confirm,
                        missed=pages.console.store().missed([name]), since=since_text,
                        until=until_text, latest_only=latest_only)


def login(request: Request, pages: Pages, _: Principal | None) -> Response:
    """The sign-in form (GET) and its check (POST): a session cookie for a valid token."""
    auth = pages.auth
    if request.method == "GET":
        if auth.anonymous:
            return pages.go("/")
        return pages.render(request, "login.html", next=request.query_params.get("next", ""),
                            error="")
    fields = _fields(request)
    target = fields.get("next", "")
    principal = admit(request, fields.get("token", ""))
    if isinstance(principal, Refusal):
        wait_s = principal.retry_after_s
        answer = pages.render(request, "login.html", principal.status, next=target, error=(
            f"Too many wrong tokens from this address: try again in {wait_s} s." if wait_s
            else "That token is not valid."))
        answer.headers.update(principal.headers)
        return answer
    sessions: Sessions = request.app.state.sessions
    session_id = sessions.open(principal)
    # Only a path of this console: never another site (an open redirect).
    safe = target if target.startswith("/") and not target.startswith("//") and \
        "\\" not in target else f"{pages.root}/"
    response = RedirectResponse(safe, status_code=303)
    response.set_cookie(SESSION_COOKIE, auth.session(principal, session_id),
                        max_age=SESSION_S, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    _rotate_nonce(request, response)
    return response


def logout(request: Request, pages: Pages, _: Principal | None) -> Response:
    """Sign out (a CSRF-checked form): the session's record is deleted (its cookie, even
    copied, is refused from now on), the cookie cleared and the CSRF nonce replaced."""
    session: Session | None = request.state.session
    if session is not None:
        sessions: Sessions = request.app.state.sessions
        sessions.close(session.id)
    response = pages.go("/login")
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    _rotate_nonce(request, response)
    return response


def routes() -> list[Route]:
    """The pages' routes."""
    return [Route("/", page(overview), methods=["GET"]),
            Route("/schedules", page(schedules), methods=["GET"]),
            Route("/schedule", page(schedule), methods=["GET"]),
            Route("/audit", page(audit), methods=["GET"]),
            Route("/new", page(new, act=True), methods=["GET"]),
            Route("/edit", page(edit, act=True), methods=["GET"]),
            Route("/save", page(save, act=True), methods=["POST"]),
            Route("/act", page(act, act=True), methods=["POST"]),
            Route("/backfill", page(backfill, act=True), methods=["GET", "POST"]),
            Route("/login", page(login, signed_in=False, limits=SIGN_IN_FORM_LIMITS),
                  methods=["GET", "POST"]),
            Route("/logout", page(logout, signed_in=False, limits=SIGN_IN_FORM_LIMITS),
                  methods=["POST"])]
