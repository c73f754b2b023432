"""The OpenAPI 3.1 description of the JSON API (served at /api/v1/openapi.json).

Checked by schemathesis against a real console (tests/web/test_conformance.py): every
status an operation can answer is listed, and every constraint JSON Schema can express is
stated; what it cannot (a cron's syntax, a zone's name, `since` before `until`, a cursor
this console gave) is answered 422 (docs/api.md, "Conformance").
"""

from __future__ import annotations

from typing import Any

from kiqbeat.core.limits import BACKFILL_CONFIRM_JOBS, MAX_AUDIT_NOTE_CHARS, MAX_PENDING_SKIPS
from kiqbeat.core.records import REASONS
from kiqbeat.web.console import STATES

_NOTE = {"type": "string", "maxLength": MAX_AUDIT_NOTE_CHARS}  # every action's audit note
_ERROR = {"description": "an error", "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/Error"}}}}


# Every operation may answer these: no or a wrong token (401), too many wrong tokens from
# the address (429, Retry-After), Redis unreachable (503).
_ALWAYS = ("401", "429", "503")
# An operation with a body: a malformed Content-Length (400), a body that did not arrive
# within the read deadline (408), over 128 KiB (413), not JSON or invalid (422).
_BODY = ("400", "408", "413", "422")
_QUERY: dict[str, dict[str, Any]] = {
    "prefix": {"type": "string"}, "queue": {"type": "string"}, "source": {"type": "string"},
    "state": {"type": "string", "enum": ["", *STATES],
              "description": "empty: every state"},
    "cursor": {"type": "string", "pattern": "^([ns][A-Za-z0-9_-]*)?$",
               "description": "a next_cursor this console gave"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
    "name": {"type": "string"},
    "since": {"type": "string", "anyOf": [{"format": "date-time"}, {"enum": [""]}],
              "description": "the span's start (ISO 8601; empty or absent: as kiqbeat report)"},
    "until": {"type": "string", "anyOf": [{"format": "date-time"}, {"enum": [""]}],
              "description": "the span's end (ISO 8601; empty or absent: as kiqbeat report)"}}


def _op(summary: str, *, ok: str = "200", body: str | None = None, required: bool = False,
        errors: tuple[str, ...] = ("404",), query: tuple[str, ...] = ()) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {ok: {"description": "done"}}}
    for code in sorted({*errors, *_ALWAYS, *(_BODY if body else ())}):
        op["responses"][code] = _ERROR
    if body:
        op["requestBody"] = {"required": required, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    if query:
        op["parameters"] = [{"name": q, "in": "query", "required": False,
                             "schema": _QUERY[q]} for q in query]
    return op


_NAME = [{"name": "name", "in": "path", "required": True,
          "schema": {"type": "string", "minLength": 1},
          "description": "the schedule's name, percent-encoded with / as %2F: the path is split "
                         "at its first raw / after schedules/ (NAME/ACTION) before it is "
                         "decoded"}]


def openapi() -> dict[str, Any]:
    """The description, as a JSON-ready mapping."""
    acting = ("403", "404", "422")
    paths: dict[str, Any] = {
        "/api/v1/schedules": {"get": _op(
            "a page of schedules, by name prefix and filters; next_cursor continues",
            errors=("422",), query=("prefix", "state", "queue", "source", "cursor",
                                    "limit"))},
        "/api/v1/schedules/{name}": {
            "parameters": _NAME,
            "get": _op("one schedule: definition, state, next 20 fire times, history, "
                       "missed ranges, audit"),
            "put": _op("create (201) or replace (200) an API-owned schedule; an invalid "
                       "definition is answered 422 with `kiqbeat validate`'s messages",
                       body="Definition", required=True, errors=("403", "409", "422")),
            "delete": _op("delete an API-owned schedule", ok="204",
                          errors=("403", "404", "409", "422"))},
        "/api/v1/schedules/{name}/report": {"parameters": _NAME, "get": _op(
            "every tick of (since, until] with its one outcome (kiqbeat report --json)",
            errors=("404", "422"), query=("since", "until"))},
        "/api/v1/schedules/{name}/pause": {"parameters": _NAME, "post": _op(
            "pause (push nothing until resumed, or until `until`)", body="Pause",
            errors=acting)},
        "/api/v1/schedules/{name}/resume": {"parameters": _NAME, "post": _op(
            "resume", body="Note", errors=acting)},
        "/api/v1/schedules/{name}/skip": {"parameters": _NAME, "post": _op(
            "skip the next `count` ticks (default 1): not pushed, in history as skipped",
            body="Skip", errors=acting)},
        "/api/v1/schedules/{name}/trigger": {"parameters": _NAME, "post": _op(
            "push one job now (a manual run), optionally with other args", ok="201",
            body="Trigger", errors=acting)},
        "/api/v1/schedules/{name}/backfill": {"parameters": _NAME, "post": _op(
            "push the recorded missed ticks in [since, until] once each (dry_run: count "
            "them, and those from before first-seen); without yes, refused (422, nothing "
            f"pushed) above {BACKFILL_CONFIRM_JOBS:,} jobs unless max_jobs is given, and "
            "whenever a tick is from before the schedule was first seen",
            body="Backfill", errors=acting)},
        "/api/v1/missed": {"get": _op("recorded missed ranges (kiqbeat missed --json), and "
                                      "the records that are not one, in problems",
                                      errors=("404", "422"), query=("name",))},
        "/api/v1/status": {"get": _op("counts by state, most overdue, set aside, recent "
                                      "pushes, the document's state", errors=())},
        "/api/v1/audit": {"get": _op("the audit trail, newest first", errors=("422",),
                                     query=("name", "limit"))},
        "/api/v1/validate": {"post": _op(
            "read one definition as `kiqbeat validate` reads it and answer its problems, "
            "warnings and kiqbeat definition (Checked); writes nothing, so a reader's token "
            "may ask", body="Validate", required=True, errors=("422",))},
    }
    paths["/api/v1/validate"]["post"]["responses"]["200"]["content"] = {
        "application/json": {"schema": {"$ref": "#/components/schemas/Checked"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "kiqbeat console API", "version": "1",
                 "description": "Schedules of a kiqbeat store, read and changed with "
                                "validation at write time."},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error", "problems"], "properties": {
                    "error": {"type": "string"},
                    "problems": {"type": "array", "items": {"type": "string"}}}},
                "Definition": {"type": "object", "description": "a schedule in a document's "
                               "schedule form: cron or every, class, queue, args, tz, ...",
                               "additionalProperties": True},
                "Validate": {"type": "object", "required": ["definition"], "properties": {
                    "definition": {"type": "object", "description": "a schedule in a "
                                   "document's schedule form, or (format sidekiq-cron) one "
                                   "job hash as sidekiq-cron stores it in Redis",
                                   "additionalProperties": True},
                    "format": {"enum": ["kiqbeat", "sidekiq-cron", None],
                               "default": "kiqbeat"},
                    "name": {"type": ["string", "null"], "description": "the schedule's name "
                             "(default, also for null or empty: the definition's name, else "
                             "'schedule')"},
                    "app_zone": {"type": ["string", "null"], "description": "the zone the "
                                 "tool read zone-less crons in (sidekiq-cron: the Sidekiq "
                                 "servers' zone), as --app-zone"},
                    "now": {"type": ["string", "null"], "format": "date-time",
                            "description": "start of the 12 months searched for "
                            "daylight-saving differences (default: now)"}},
                    "additionalProperties": False},
                "Checked": {"type": "object", "required": ["problems", "warnings",
                                                           "definition"], "properties": {
                    "problems": {"type": "array", "items": {"type": "string"}},
                    "warnings": {"type": "array", "items": {"type": "string"}},
                    "definition": {"type": ["object", "null"]}}},
                "Pause": {"type": "object", "properties": {
                    "until": {"type": ["string", "null"], "format": "date-time",
                              "description": "after now, with an offset: it resumes by "
                              "itself after it"},
                    "note": _NOTE}, "additionalProperties": False},
                "Note": {"type": "object", "properties": {"note": _NOTE},
                         "additionalProperties": False},
                "Skip": {"type": "object", "properties": {
                    "count": {"type": "integer", "minimum": 1,
                              "maximum": MAX_PENDING_SKIPS}, "note": _NOTE},
                    "additionalProperties": False},
                "Trigger": {"type": "object", "properties": {
                    "args": {"type": ["array", "null"], "description": "the job's "
                             "arguments (null or absent: the schedule's own)"}, "note": _NOTE},
                    "additionalProperties": False},
                "Backfill": {"type": "object", "properties": {
                    "since": {"type": "string", "format": "date-time"},
                    "until": {"type": "string", "format": "date-time"},
                    "latest_only": {"type": "boolean"}, "dry_run": {"type": "boolean"},
                    "yes": {"type": "boolean", "description": "push above "
                            f"{BACKFILL_CONFIRM_JOBS:,} jobs, and ticks from before first-seen "
                            "(the CLI's --yes)"},
                    "reasons": {"type": "array", "items": {"enum": list(REASONS)},
                                "minItems": 1,
                                "description": "only ranges recorded for these; default: all "
                                "but overlap (the CLI's --reason)"},
                    "max_jobs": {"type": "integer", "minimum": 1, "description": "push at "
                                 "most this many, the oldest first; run it again for the next "
                                 "(the CLI's --max-jobs)"},
                    "note": _NOTE}, "additionalProperties": False}}},
    }
