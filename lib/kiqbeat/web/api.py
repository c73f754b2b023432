"""The JSON API, version 1 (`/api/v1/...`): schedules created and changed from any language,
validated at write time with the messages `kiqbeat validate` gives.

Every request carries `Authorization: Bearer TOKEN` (a reader's token reads, an operator's
also acts); answers are JSON; errors are `{"error": MESSAGE, "problems": [...]}` with 400
(a malformed request), 401, 403, 404 (no such schedule), 409 (a document's schedule), 413,
422 (an invalid definition: one problem per message, each naming the field) or 503 (Redis).
A schedule's name is the rest of the path, percent-encoded (`/` included: `a%2Fb`).
The OpenAPI description is served at /api/v1/openapi.json (openapi.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kiqbeat.audit import AuditEntry
from kiqbeat.core.instants import option_instant
from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.document import check_definition
from kiqbeat.entrypoints.requests import from_fields
from kiqbeat.errors import ConfigError, KiqbeatError, RedisUnavailableError, json_name, shown
from kiqbeat.web.auth import Principal
from kiqbeat.web.console import Console, NotFoundError, OwnedError, checked_note, pause_until
from kiqbeat.web.openapi import openapi

MAX_BODY_BYTES = 2 * MAX_DEFINITION_BYTES

Handler = Callable[[Request, Principal], Response]


def problem(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    """An error answer."""
    return JSONResponse({"error": message, "problems": problems or [message]},
                        status_code=status)


def error_answer(exc: KiqbeatError) -> JSONResponse:
    """The status and body of an error raised by the console."""
    if isinstance(exc, NotFoundError):
        return problem(404, str(exc))
    if isinstance(exc, OwnedError):
        return problem(409, str(exc))
    if isinstance(exc, ConfigError):
        return problem(422, str(exc), exc.problems)
    if isinstance(exc, RedisUnavailableError):
        return problem(503, str(exc))
    return problem(500, str(exc))


def _principal(request: Request) -> Principal | None:
    auth = request.app.state.auth
    principal: Principal | None = auth.bearer(request.headers.get("authorization", ""))
    return principal


def endpoint(handler: Handler, *, act: bool = False) -> Callable[[Request], Response]:
    """A sync endpoint (Starlette runs it in a thread) with the bearer check and the
    console's errors turned into answers."""

    def run(request: Request) -> Response:
        principal = _principal(request)
        if principal is None:
            return problem(401, "a valid bearer token is required (Authorization: Bearer "
                                "TOKEN)")
        if act and not principal.operator:
            return problem(403, "this token may read, not act (an operator's token acts)")
        try:
            return handler(request, principal)
        except KiqbeatError as exc:
            return error_answer(exc)

    return run


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _name(request: Request) -> str:
    return str(request.path_params["name"])


def _body(request: Request) -> Any:
    """The JSON body (None when empty); ConfigError when it is not JSON or too large."""
    raw = request.state.body
    if len(raw) > MAX_BODY_BYTES:
        raise ConfigError(f"the request body is over {MAX_BODY_BYTES:,} bytes")
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"the request body is not JSON ({str(exc)[:120]})") from None


def _note(request: Request, body: Any) -> str:
    """The request's note (the body's "note", else the X-Kiqbeat-Note header); ConfigError
    (422) when it is not text or over MAX_AUDIT_NOTE_CHARS, as the CLI and the Lambda
    refuse it: never cut."""
    note = body.get("note", "") if isinstance(body, dict) else ""
    return checked_note(note or request.headers.get("x-kiqbeat-note", ""))


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "50")
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 200:
        raise ConfigError(f"limit {shown(text)} must be a whole number from 1 to 200")
    return int(text)


def list_schedules(request: Request, _: Principal) -> Response:
    q = request.query_params
    page = _console(request).page(prefix=q.get("prefix", ""), state=q.get("state", ""),
                                  queue=q.get("queue", ""), source=q.get("source", ""),
                                  cursor=q.get("cursor", ""), limit=_limit(request))
    return JSONResponse({"items": [r.as_dict() for r in page.rows],
                         "next_cursor": page.next_cursor})


def get_schedule(request: Request, _: Principal) -> Response:
    detail = _console(request).detail(_name(request))
    return JSONResponse(detail.row.as_dict() | {
        "fires": detail.fires, "history": [p.as_dict() for p in detail.history],
        "missed": [m.as_dict() for m in detail.missed],
        "audit": [_entry(a) for a in detail.audit]})


def put_schedule(request: Request, principal: Principal) -> Response:
    body = _body(request)
    name = _name(request)
    if not isinstance(body, dict):
        raise ConfigError(f"schedule {shown(name)}: the body must be a JSON object of fields "
                          f"(cron, class, ...), got {shown(body)}")
    note = _note(request, None)
    created = _console(request).put(principal.actor, name, body, note)
    row = _console(request).get(name)
    return JSONResponse(row.as_dict(), status_code=201 if created else 200)


def delete_schedule(request: Request, principal: Principal) -> Response:
    _console(request).remove(principal.actor, _name(request), _note(request, None))
    return Response(status_code=204)


def pause(request: Request, principal: Principal) -> Response:
    body = _body(request)
    until = body.get("until") if isinstance(body, dict) else None
    changed = _console(request).pause(principal.actor, _name(request), _note(request, body),
                                      until=pause_until(until))
    return JSONResponse({**json_name(_name(request)), "paused": True, "changed": changed})


def resume(request: Request, principal: Principal) -> Response:
    body = _body(request)
    changed = _console(request).resume(principal.actor, _name(request), _note(request, body))
    return JSONResponse({**json_name(_name(request)), "paused": False, "changed": changed})


def skip(request: Request, principal: Principal) -> Response:
    body = _body(request)
    count = body.get("count", 1) if isinstance(body, dict) else 1
    pending = _console(request).skip(principal.actor, _name(request), count,
                                     _note(request, body))
    return JSONResponse({**json_name(_name(request)), "pending_skips": pending})


def trigger(request: Request, principal: Principal) -> Response:
    body = _body(request)
    args = body.get("args") if isinstance(body, dict) else None
    if args is not None and not isinstance(args, list):
        raise ConfigError(f"args must be a JSON array (the job's arguments), got {shown(args)}")
    done = _console(request).trigger(principal.actor, _name(request), args,
                                     _note(request, body))
    return JSONResponse(done.as_dict(), status_code=201)


def backfill(request: Request, principal: Principal) -> Response:
    body = _body(request) or {}
    if not isinstance(body, dict):
        raise ConfigError(f"the body must be a JSON object, got {shown(body)}")
    if set(body) & {"names", "all", "actor"}:
        raise ConfigError("the schedule is the one the path names: names, all and actor are "
                          "not fields of this body")
    asked = from_fields("backfill", {**body, "names": [_name(request)],
                                     "note": _note(request, body)})
    result = _console(request).backfill(principal.actor, asked)
    return JSONResponse(result.as_dict() | {"dry_run": asked.dry_run})


def missed(request: Request, _: Principal) -> Response:
    store = _console(request).store()
    names = request.query_params.getlist("name")
    return JSONResponse({"missed": [m.as_dict() for m in store.missed(names)]})


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
    definition, fmt = body["definition"], body.get("format", "kiqbeat")
    name = body.get("name") or definition.get("name") or "schedule"
    app_zone = body.get("app_zone")
    for field, value in (("format", fmt), ("name", name), ("app_zone", app_zone)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{field} {shown(value)} must be a string")
    checked = check_definition(name, definition, fmt, app_zone=app_zone,
                               now=_instant(body.get("now")))
    return JSONResponse({"problems": checked.problems, "warnings": checked.warnings,
                         "definition": checked.definition})


def _instant(value: object) -> datetime:
    """The request's `now` (ISO 8601; a zone-less one is UTC), else the present."""
    if value is None:
        return datetime.now(UTC)
    return option_instant(value, "now", naive_is_utc=True)


def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi())


def _with_body(handler: Callable[[Request], Response]) -> Callable[[Request], Any]:
    """Read the body before the sync handler runs in its thread (Starlette reads it async)."""

    async def run(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        size = int(request.headers.get("content-length") or 0)
        if size > MAX_BODY_BYTES:
            return problem(413, f"the request body is over {MAX_BODY_BYTES:,} bytes")
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                return problem(413, f"the request body is over {MAX_BODY_BYTES:,} bytes")
            chunks.append(chunk)
        request.state.body = b"".join(chunks)
        response: Response = await run_in_threadpool(handler, request)
        return response

    return run


def routes() -> list[Route]:
    """The API's routes (the action routes before the plain ones: a name may end in
    "/pause")."""
    base = "/api/v1"
    acting: list[tuple[str, Handler]] = [("pause", pause), ("resume", resume), ("skip", skip),
                                        ("trigger", trigger), ("backfill", backfill)]
    out = [Route(f"{base}/openapi.json", openapi_json, methods=["GET"]),
           Route(f"{base}/schedules", _with_body(endpoint(list_schedules)), methods=["GET"]),
           Route(f"{base}/missed", _with_body(endpoint(missed)), methods=["GET"]),
           Route(f"{base}/status", _with_body(endpoint(status)), methods=["GET"]),
           Route(f"{base}/audit", _with_body(endpoint(audit)), methods=["GET"]),
           Route(f"{base}/validate", _with_body(endpoint(validate)), methods=["POST"])]
    out += [Route(f"{base}/schedules/{{name:path}}/{verb}",
                  _with_body(endpoint(handler, act=True)), methods=["POST"])
            for verb, handler in acting]
    out += [Route(f"{base}/schedules/{{name:path}}", _with_body(endpoint(get_schedule)),
                  methods=["GET"]),
            Route(f"{base}/schedules/{{name:path}}", _with_body(endpoint(put_schedule,
                                                                           act=True)),
                  methods=["PUT"]),
            Route(f"{base}/schedules/{{name:path}}", _with_body(endpoint(delete_schedule,
                                                                           act=True)),
                  methods=["DELETE"])]
    return out
