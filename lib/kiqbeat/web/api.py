"""The JSON API, version 1 (`/api/v1/...`): schedules created and changed from any language,
validated at write time with the messages `kiqbeat validate` gives.

Every request carries `Authorization: Bearer TOKEN` (a reader's token reads, an operator's
also acts); answers are JSON; errors are `{"error": MESSAGE, "problems": [...]}` with 400
(a malformed request), 401, 403, 404 (no such schedule: ScheduleNotFoundError), 409 (a
document's schedule: OwnedByDocumentError; a name held: ScheduleExistsError), 413, 422 (an
invalid definition: one problem per message, each naming the field) or 503 (Redis): the
store's typed refusals mapped once, in `error_answer`, never by reading a schedule first.
Wrong tokens are throttled (429 with Retry-After: throttle.py).

A schedule is addressed as `/api/v1/schedules/NAME` or `/api/v1/schedules/NAME/ACTION`,
NAME percent-encoded with every `/` in it as `%2F`: the path is split at its first raw `/`
after `schedules/` before anything is decoded (`ScheduleRoutes`), so `x%2Fpause` is the
schedule named "x/pause" and `x/pause` is the action pause of "x", and any name (a newline,
bytes that are not UTF-8) can be reached. The OpenAPI description is served at
/api/v1/openapi.json (openapi.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route, request_response
from starlette.types import Receive, Scope, Send

from kiqbeat.audit import AuditEntry
from kiqbeat.core.instants import option_instant
from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.document import check_definition
from kiqbeat.entrypoints.outcomes import Outcome
from kiqbeat.entrypoints.requests import Request as Asked
from kiqbeat.entrypoints.requests import from_fields
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    OwnedByDocumentError,
    RedisUnavailableError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    json_name,
    shown,
)
from kiqbeat.web.auth import Principal
from kiqbeat.web.bearer import Refusal, authenticate
from kiqbeat.web.console import FILTERS, Console
from kiqbeat.web.openapi import openapi

MAX_BODY_BYTES = 2 * MAX_DEFINITION_BYTES

Handler = Callable[[Request, Principal], Response]


def problem(status: int, message: str, problems: list[str] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer (the API's one form of it, a refused token's too)."""
    return JSONResponse({"error": message, "problems": problems or [message]},
                        status_code=status, headers=headers)


# The store's typed refusals, mapped once: each answer's status (any other ConfigError: 422).
STATUS_OF: tuple[tuple[type[ConfigError], int], ...] = (
    (ScheduleNotFoundError, 404), (ScheduleExistsError, 409), (OwnedByDocumentError, 409))


def error_answer(exc: KiqbeatError) -> JSONResponse:
    """The status and body of an error raised by the console or the store."""
    for kind, status in STATUS_OF:
        if isinstance(exc, kind):
            return problem(status, str(exc))
    if isinstance(exc, ConfigError):
        return problem(422, str(exc), exc.problems)
    if isinstance(exc, RedisUnavailableError):
        return problem(503, str(exc))
    return problem(500, str(exc))


def endpoint(handler: Handler, *, act: bool = False) -> Callable[[Request], Any]:
    """An endpoint: the body read whole and bounded first (Starlette reads it async), then,
    in a thread, the bearer check, an operator's token for `act`, and the sync `handler`,
    the console's errors turned into answers."""

    def checked(request: Request) -> Response:
        principal = authenticate(request)
        if isinstance(principal, Refusal):
            return problem(principal.status, principal.message, headers=principal.headers)
        if act and not principal.operator:
            return problem(403, "this token may read, not act (an operator's token acts)")
        try:
            return handler(request, principal)
        except KiqbeatError as exc:
            return error_answer(exc)

    async def run(request: Request) -> Response:
        length = request.headers.get("content-length") or "0"
        if not re.fullmatch(r"[0-9]{1,18}", length):
            return problem(400, f"Content-Length {shown(length)} is not a number of bytes")
        if int(length) > MAX_BODY_BYTES:
            return problem(413, f"the request body is over {MAX_BODY_BYTES:,} bytes")
        chunks, total = [], 0
        try:
            async for chunk in request.stream():
                total += len(chunk)
                if total > MAX_BODY_BYTES:
                    return problem(413, f"the request body is over {MAX_BODY_BYTES:,} bytes")
                chunks.append(chunk)
        except ClientDisconnect:  # gone, or dropped by the server's read deadline (serve.py)
            return problem(408, "the request body did not arrive in time")
        request.state.body = b"".join(chunks)
        response: Response = await run_in_threadpool(checked, request)
        return response

    return run


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _body(request: Request) -> Any:
    """The JSON body (None when empty; `endpoint` bounded it); ConfigError when it is not
    JSON."""
    raw = request.state.body
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"the request body is not JSON ({str(exc)[:120]})") from None


def _object_body(request: Request) -> dict[str, Any]:
    """An action's JSON body: an object of fields, or none at all ({}). A whole number
    written as a float (`2.0`, an integer to JSON Schema) is read as the integer."""
    if not request.state.body.strip():
        return {}
    body = _body(request)
    if not isinstance(body, dict):
        raise ConfigError(f"the body must be a JSON object of fields, got {shown(body)}")
    return {k: int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 63
            else v for k, v in body.items()}


def _note(request: Request, body: Any) -> Any:
    """The request's note: the body's "note", else the X-Kiqbeat-Note header; checked by the
    request model (not text, {}, 0, null, or over MAX_AUDIT_NOTE_CHARS: 422, never cut)."""
    if isinstance(body, dict) and "note" in body:
        return body["note"]
    return request.headers.get("x-kiqbeat-note", "")


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "50")
    # Digits only, at most 3 of them (int() of 5,000 digits raises a ValueError of its own).
    if not re.fullmatch(r"[0-9]{1,3}", text) or not 1 <= int(text) <= 200:
        raise ConfigError(f"limit {shown(text)} must be a whole number from 1 to 200")
    return int(text)


def list_schedules(request: Request, _: Principal) -> Response:
    q = request.query_params
    page = _console(request).page(**{k: q.get(k, "") for k in FILTERS},
                                  cursor=q.get("cursor", ""), limit=_limit(request))
    return JSONResponse({"items": [r.as_dict() for r in page.rows],
                         "next_cursor": page.next_cursor})


# ---------------------------------------------------------------- a schedule's requests
# Each request under /api/v1/schedules/NAME is read into the request model of the CLI and
# the Lambda (`from_fields`: the same checks), run by their one dispatch
# (`kiqbeat.entrypoints.outcomes.run`, through `Console.execute`), and its outcome rendered
# here as docs/api.md documents.


def _fields_report(request: Request, name: str) -> dict[str, Any]:
    """since/until from the query: ISO 8601, a zone-less one read as UTC (this front end's
    reading), then checked by the model as the CLI's are."""
    q = request.query_params
    return {"name": name} | {k: _instant(q[k], k).isoformat() for k in ("since", "until")
                             if q.get(k)}


def _fields_put(request: Request, name: str) -> dict[str, Any]:
    body = _body(request)
    if not isinstance(body, dict):
        raise ConfigError(f"schedule {shown(name)}: the body must be a JSON object of fields "
                          f"(cron, class, ...), got {shown(body)}")
    return {"name": name, "definition": body, "note": _note(request, None)}


def _fields_action(request: Request, name: str) -> dict[str, Any]:
    """pause, resume, skip, trigger: the body's fields, a null `until` (until resumed) or
    `args` (the schedule's own) left out as not given; the path's name; the note. The
    schedule is the path's and the actor the token's, never the body's."""
    body = _object_body(request)
    if set(body) & {"name", "actor"}:
        raise ConfigError("the schedule is the one the path names and the actor the token's: "
                          "name and actor are not fields of this body")
    return {k: v for k, v in body.items() if not (v is None and k in ("until", "args"))} | {
        "name": name, "note": _note(request, body)}


def _fields_pause(request: Request, name: str) -> dict[str, Any]:
    fields = _fields_action(request, name)
    if fields.get("until") == "":
        raise ConfigError("until '' must be an ISO 8601 instant with an offset, after now (or "
                          "null: until resumed)")
    return fields


def _fields_backfill(request: Request, name: str) -> dict[str, Any]:
    body = _object_body(request)
    if set(body) & {"names", "all", "actor"}:
        raise ConfigError("the schedule is the one the path names: names, all and actor are "
                          "not fields of this body")
    return {**body, "names": [name], "note": _note(request, body)}


def _detail(request: Request, asked: Asked, done: Outcome) -> Response:
    detail = _console(request).detail(done.value)
    return JSONResponse(detail.row.as_dict() | {
        "fires": detail.fires, "history": [p.as_dict() for p in detail.history],
        "missed": [m.as_dict() for m in detail.missed],
        "audit": [_entry(a) for a in detail.audit]})


def _put(request: Request, asked: Asked, done: Outcome) -> Response:
    row = _console(request).get(asked.name)
    return JSONResponse(row.as_dict(), status_code=201 if done.result["created"] else 200)


def _paused(request: Request, asked: Asked, done: Outcome) -> Response:
    return JSONResponse({**json_name(asked.name), "paused": asked.kind == "pause",
                         "changed": done.value})


# kind -> (its fields from the HTTP request, its answer from the outcome): every documented
# body as it was (report, trigger and backfill answer the outcome's JSON form, as the CLI's
# --json and the Lambda do).
FRONT: dict[str, tuple[Callable[[Request, str], dict[str, Any]],
                       Callable[[Request, Asked, Outcome], Response]]] = {
    "get": (lambda _, name: {"name": name}, _detail),
    "report": (_fields_report, lambda _, __, done: JSONResponse(done.result)),
    "put": (_fields_put, _put),
    "remove": (lambda request, name: {"name": name, "note": _note(request, None)},
               lambda *_: Response(status_code=204)),  # none removed: 404 (Console.execute)
    "pause": (_fields_pause, _paused),
    "resume": (_fields_action, _paused),
    "skip": (_fields_action, lambda _, asked, done: JSONResponse(
        {**json_name(asked.name), "pending_skips": done.value})),
    "trigger": (_fields_action, lambda _, __, done: JSONResponse(done.result,
                                                                 status_code=201)),
    "backfill": (_fields_backfill, lambda _, __, done: JSONResponse(done.result)),
}


def act(kind: str) -> Handler:
    """The handler of one request kind: read into the model, run by the one dispatch,
    rendered."""
    fields, render = FRONT[kind]

    def answer(request: Request, principal: Principal) -> Response:
        asked = from_fields(kind, fields(request, str(request.path_params["name"])))
        return render(request, asked, _console(request).execute(principal.actor, asked))

    return answer


def missed(request: Request, principal: Principal) -> Response:
    """The "missed" request of the CLI and the Lambda, run by their dispatch: a `name` with
    neither a schedule nor a record is 404; a record that is not one (written by hand) is
    left out and named in "problems", and the others are listed."""
    names = request.query_params.getlist("name")
    done = _console(request).execute(principal.actor, from_fields(
        "missed", {"names": names} if names else {}))
    return JSONResponse(done.result | {"problems": done.problems})


def status(request: Request, _: Principal) -> Response:
    return JSONResponse(_console(request).overview().as_dict())


def audit(request: Request, _: Principal) -> Response:
    name = request.query_params.get("name")
    return JSONResponse({"audit": [_entry(a) for a in
                                   _console(request).audit(name, _limit(request))]})


def _entry(entry: AuditEntry) -> dict[str, Any]:
    """An audit entry as JSON: a name that is not UTF-8 as `json_name` gives it."""
    return entry.as_dict() | json_name(entry.name)


def validate(request: Request, _: Principal) -> Response:
    """One definition read as `kiqbeat validate` reads it (`check_definition`): 200 with
    its problems, warnings and kiqbeat definition, the problems included (nothing is
    written, so a reader's token may ask); 422 for a malformed request."""
    body = _body(request)
    if not isinstance(body, dict) or not isinstance(body.get("definition"), dict):
        raise ConfigError("the body must be a JSON object with 'definition', a JSON object "
                          f"(and optionally format, name, app_zone, now), got {shown(body)}")
    unknown = sorted(set(body) - {"definition", "format", "name", "app_zone", "now"})
    if unknown:
        raise ConfigError(f"unknown field {shown(unknown[0])} in the body (definition, "
                          "format, name, app_zone, now)")
    definition = body["definition"]
    for field in ("format", "name", "app_zone", "now"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise ConfigError(f"{field} {shown(body[field])} must be a string (or null)")
    fmt = "kiqbeat" if body.get("format") is None else body["format"]
    own = definition.get("name")
    name = body.get("name") or (own if isinstance(own, str) else "") or "schedule"
    app_zone = body.get("app_zone")
    checked = check_definition(name, definition, fmt, app_zone=app_zone,
                               now=_instant(body.get("now")))
    return JSONResponse({"problems": checked.problems, "warnings": checked.warnings,
                         "definition": checked.definition})


def _instant(value: object, field: str = "now") -> datetime:
    """The request's `field` (ISO 8601; a zone-less one is UTC), else the present."""
    if value is None:
        return datetime.now(UTC)
    return option_instant(value, field, naive_is_utc=True)


def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi())


SCHEDULES = "/api/v1/schedules/"
# (action, method) -> (the request's kind, acts): "" is the schedule itself.
ACTIONS: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "GET"): ("get", False), ("", "PUT"): ("put", True),
    ("", "DELETE"): ("remove", True), ("report", "GET"): ("report", False),
    **{(verb, "POST"): (verb, True) for verb in (
        "pause", "resume", "skip", "trigger", "backfill")}}


def schedule_address(scope: Scope) -> tuple[str, str]:
    """(name, action) of a request under /api/v1/schedules/: the raw path (before any
    percent-decoding) split at its first `/` after the prefix; the name then decoded, any
    byte kept (surrogateescape). A server that gives no raw_path: the decoded path is used,
    and a name holding `/` cannot be told from an action."""
    raw = scope.get("raw_path")
    path = raw if isinstance(raw, bytes) and raw else str(scope["path"]).encode(
        errors="surrogateescape")
    rest = path[path.rfind(SCHEDULES.encode()) + len(SCHEDULES):]
    encoded, _, action = rest.partition(b"/")
    name = unquote_to_bytes(encoded).decode(errors="surrogateescape")
    return name, action.decode("ascii", errors="replace")


class ScheduleRoutes(BaseRoute):
    """Every request under /api/v1/schedules/, routed by `schedule_address` (Starlette's
    path routes decode first, and their patterns match no newline)."""

    def __init__(self) -> None:
        self.apps = {key: request_response(endpoint(act(kind), act=acts))
                     for key, (kind, acts) in ACTIONS.items()}

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root):]  # as Starlette's own routes see it
        if scope["type"] == "http" and path.startswith(SCHEDULES):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        name, action = schedule_address(scope)
        app = self.apps.get((action, scope["method"]))
        if app is None or not name:
            allowed = sorted(m for a, m in ACTIONS if a == action)
            if not name:
                answer = problem(404, "no schedule named in the path (/api/v1/schedules/NAME, "
                                      "NAME percent-encoded with / as %2F)")
            elif allowed:
                answer = problem(405, f"{scope['method']} is not an action on "
                                      f"/api/v1/schedules/NAME{'/' + action if action else ''}"
                                      f" (allowed: {', '.join(allowed)})",
                                 headers={"Allow": ", ".join(allowed)})
            else:
                answer = problem(404, f"no action {shown(action)} (pause, resume, skip, "
                                      "trigger, backfill); a name holding / is "
                                      "percent-encoded as %2F")
            await answer(scope, receive, send)
            return
        scope["path_params"] = {"name": name}
        await app(scope, receive, send)


def routes() -> list[BaseRoute]:
    """The API's routes."""
    base = "/api/v1"
    return [Route(f"{base}/openapi.json", openapi_json, methods=["GET"]),
            Route(f"{base}/schedules", endpoint(list_schedules), methods=["GET"]),
            Route(f"{base}/missed", endpoint(missed), methods=["GET"]),
            Route(f"{base}/status", endpoint(status), methods=["GET"]),
            Route(f"{base}/audit", endpoint(audit), methods=["GET"]),
            Route(f"{base}/validate", endpoint(validate), methods=["POST"]),
            ScheduleRoutes()]
