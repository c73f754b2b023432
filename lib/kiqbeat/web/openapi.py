"""The OpenAPI 3.1 description of the JSON API (served at /api/v1/openapi.json)."""

from __future__ import annotations

from typing import Any

from kiqbeat.core.limits import BACKFILL_CONFIRM_JOBS, MAX_AUDIT_NOTE_CHARS, MAX_PENDING_SKIPS
from kiqbeat.core.records import REASONS

_ERROR = {"description": "an error", "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/Error"}}}}


def _op(summary: str, *, ok: str = "200", body: str | None = None,
        errors: tuple[str, ...] = ("401", "404"), query: tuple[str, ...] = ()) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {ok: {"description": "done"}}}
    for code in errors:
        op["responses"][code] = _ERROR
    if body:
        op["requestBody"] = {"content": {"application/json": {"schema": {
            "$ref": f"#/components/schemas/{body}"}}}}
    if query:
        op["parameters"] = [{"name": q, "in": "query", "required": False,
                             "schema": {"type": "string"}} for q in query]
    return op


_NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
          "description": "the schedule's name, percent-encoded (/ as %2F)"}]


def openapi() -> dict[str, Any]:
    """The description, as a JSON-ready mapping."""
    acting = ("401", "403", "404", "422", "503")
    paths: dict[str, Any] = {
        "/api/v1/schedules": {"get": _op(
            "a page of schedules, by name prefix and filters; next_cursor continues",
            errors=("401", "422"), query=("prefix", "state", "queue", "source", "cursor",
                                          "limit"))},
        "/api/v1/schedules/{name}": {
            "parameters": _NAME,
            "get": _op("one schedule: definition, state, next 20 fire times, history, "
                       "missed ranges, audit"),
            "put": _op("create (201) or replace (200) an API-owned schedule; an invalid "
                       "definition is answered 422 with `kiqbeat validate`'s messages",
                       body="Definition", errors=("401", "403", "409", "422", "503")),
            "delete": _op("delete an API-owned schedule", ok="204",
                          errors=("401", "403", "404", "409", "503"))},
        "/api/v1/schedules/{name}/report": {"parameters": _NAME, "get": _op(
            "every tick of (since, until] with its one outcome (kiqbeat report --json)",
            errors=("401", "404", "422"), query=("since", "until"))},
        "/api/v1/schedules/{name}/pause": {"parameters": _NAME, "post": _op(
            "pause (push nothing until resumed)", body="Note", errors=acting)},
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
        "/api/v1/missed": {"get": _op("recorded missed ranges", errors=("401",),
                                      query=("name",))},
        "/api/v1/status": {"get": _op("counts by state, most overdue, set aside, recent "
                                      "pushes, the document's state", errors=("401",))},
        "/api/v1/audit": {"get": _op("the audit trail, newest first", errors=("401",),
                                     query=("name", "limit"))},
        "/api/v1/validate": {"post": _op(
            "read one definition as `kiqbeat validate` reads it and answer its problems, "
            "warnings and kiqbeat definition (Checked); writes nothing, so a reader's token "
            "may ask", body="Validate", errors=("401", "422"))},
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
                    "format": {"type": "string", "enum": ["kiqbeat", "sidekiq-cron"],
                               "default": "kiqbeat"},
                    "name": {"type": "string", "description": "the schedule's name (default: "
                             "the definition's name, else 'schedule')"},
                    "app_zone": {"type": "string", "description": "the zone the tool read "
                                 "zone-less crons in (sidekiq-cron: the Sidekiq servers' "
                                 "zone), as --app-zone"},
                    "now": {"type": "string", "format": "date-time", "description": "start "
                            "of the 12 months searched for daylight-saving differences "
                            "(default: now)"}},
                    "additionalProperties": False},
                "Checked": {"type": "object", "required": ["problems", "warnings",
                                                           "definition"], "properties": {
                    "problems": {"type": "array", "items": {"type": "string"}},
                    "warnings": {"type": "array", "items": {"type": "string"}},
                    "definition": {"type": ["object", "null"]}}},
                "Note": {"type": "object", "properties": {"note": {
                    "type": "string", "maxLength": MAX_AUDIT_NOTE_CHARS}}},
                "Skip": {"type": "object", "properties": {
                    "count": {"type": "integer", "minimum": 1,
                              "maximum": MAX_PENDING_SKIPS}, "note": {
                        "type": "string", "maxLength": MAX_AUDIT_NOTE_CHARS}}},
                "Trigger": {"type": "object", "properties": {
                    "args": {"type": "array"}, "note": {
                        "type": "string", "maxLength": MAX_AUDIT_NOTE_CHARS}}},
                "Backfill": {"type": "object", "properties": {
                    "since": {"type": "string", "format": "date-time"},
                    "until": {"type": "string", "format": "date-time"},
                    "latest_only": {"type": "boolean"}, "dry_run": {"type": "boolean"},
                    "yes": {"type": "boolean", "description": "push above "
                            f"{BACKFILL_CONFIRM_JOBS:,} jobs, and ticks from before first-seen "
                            "(the CLI's --yes)"},
                    "reasons": {"type": "array", "items": {"enum": list(REASONS)},
                                "description": "only ranges recorded for these; default: all "
                                "but overlap (the CLI's --reason)"},
                    "max_jobs": {"type": "integer", "minimum": 1, "description": "push at "
                                 "most this many, the oldest first; run it again for the next "
                                 "(the CLI's --max-jobs)"},
                    "note": {"type": "string", "maxLength": MAX_AUDIT_NOTE_CHARS}},
                    "additionalProperties": False}}},
    }
