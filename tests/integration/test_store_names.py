"""Every public name of the Python store API keeps working, whatever module holds it: each
method docs/api.md names ("The Python API") and every other public attribute of `Store` is
called here on a real Redis, and the names `kiqbeat.store` and `kiqbeat.operator` export
import."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import redis

import kiqbeat.operator
import kiqbeat.store
from kiqbeat.core.ticks import TickReport
from kiqbeat.errors import ScheduleNotFoundError
from kiqbeat.store import (
    Backfill,
    CalendarChange,
    ImportResult,
    MissedRange,
    ScheduleStatus,
    Status,
    Store,
    Triggered,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
DIGEST = {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "DigestWorker", "args": [42],
          "except": ["holidays"]}
PLAIN = {"cron": "0 9 * * *", "class": "DigestWorker"}


def documented() -> set[str]:
    """The Store methods and parts docs/api.md's Python API section names."""
    text = DOCS.read_text()
    section = text[text.index("### Schedules at runtime"):text.index("### Invocations")]
    return (set(re.findall(r"`(?:store\.)?([a-z_]+)\(", section))
            | set(re.findall(r"`store\.([a-z_]+)`", section)))


# Each public name, called (or read) on a store holding "digest:42" (paused by then).
CALLS: dict[str, Callable[[Store], Any]] = {
    "put_calendar": lambda s: s.put_calendar("holidays", ["2026-12-25"]),
    "calendar": lambda s: s.calendar("holidays"),
    "calendars": lambda s: s.calendars(),
    "calendars_text": lambda s: s.calendars_text(),
    "check": lambda s: s.check("digest:42", DIGEST),
    "add": lambda s: s.add("digest:42", DIGEST),
    "put": lambda s: s.put("digest:42", DIGEST),
    "update": lambda s: s.update("digest:42", {**DIGEST, "args": [43]}),
    "owner": lambda s: s.owner("digest:42"),
    "get": lambda s: s.get("digest:42"),
    "rows": lambda s: s.rows(["digest:42"]),
    "list": lambda s: s.list(),
    "status": lambda s: s.status(),
    "pause": lambda s: s.pause("digest:42", note="INC-9",
                               until=datetime.now(UTC) + timedelta(days=1)),
    "pauses": lambda s: s.pauses(["digest:42"]),
    "resume": lambda s: s.resume("digest:42"),
    "skip": lambda s: s.skip("digest:42", 2),
    "trigger": lambda s: s.trigger("digest:42", [7]),
    "history": lambda s: s.history("digest:42"),
    "report": lambda s: s.report("digest:42"),
    "missed": lambda s: s.missed(),
    "backfill": lambda s: s.backfill(["digest:42"], dry_run=True),
    "export": lambda s: list(s.export()),
    "import_definitions": lambda s: s.import_definitions([("other", PLAIN)]),
    "reindex": lambda s: s.reindex(),
    "rescore_unplannable": lambda s: s.rescore_unplannable(),
    "resharded": lambda s: s.resharded(1),
    "acting": lambda s: s.acting("alice", note="INC-42"),
    "no_schedule": lambda s: s.no_schedule(["nobody"]),
    "remove": lambda s: s.remove("other"),
    "remove_calendar": lambda s: s.remove_calendar("unused"),
    # The parts and the context.
    "schedules": lambda s: s.schedules, "calendar_book": lambda s: s.calendar_book,
    "bulk": lambda s: s.bulk, "reads": lambda s: s.reads,
    "operations": lambda s: s.operations, "backfills": lambda s: s.backfills,
    "ctx": lambda s: s.ctx, "side": lambda s: s.side, "client": lambda s: s.client,
    "namespace": lambda s: s.namespace, "shards": lambda s: s.shards,
    "window_s": lambda s: s.window_s, "keep_history": lambda s: s.keep_history,
    "actor": lambda s: s.actor, "note": lambda s: s.note,
}


def test_every_documented_and_public_name_of_the_store_is_called_here() -> None:
    public = {n for n in dir(Store) if not n.startswith("_")}
    assert documented() - set(CALLS) == set()
    assert public - set(CALLS) == set()
    assert documented() <= public | {"schedules", "calendar_book", "bulk", "reads",
                                     "operations", "backfills"}


def test_every_public_name_of_the_store_works_on_a_real_redis(client: redis.Redis) -> None:
    store = Store(client, actor="bob")
    got = {name: call(store) for name, call in CALLS.items()}
    assert isinstance(got["put_calendar"], CalendarChange)
    assert got["calendar"] == (date(2026, 12, 25),) and "holidays" in got["calendars"]
    assert got["put"] is False and got["update"] is True and got["owner"] == ("", False)
    row = got["get"]
    assert isinstance(row, ScheduleStatus) and row.definition is not None
    assert row.definition["args"] == [43] and row.definition["calendars"] == {
        "holidays": ["2026-12-25"]}
    assert got["rows"] == [row] and isinstance(got["status"], Status)
    assert got["pause"] is True and set(got["pauses"]) == {"digest:42"}
    assert got["resume"] is True and got["skip"] == 2
    assert isinstance(got["trigger"], Triggered) and [p.kind for p in got["history"]] == [
        "manual"]
    assert isinstance(got["report"], TickReport) and got["missed"] == []
    assert isinstance(got["backfill"], Backfill) and got["backfill"].pushed == 0
    assert [name for name, _ in got["export"]] == ["digest:42"]
    assert isinstance(got["import_definitions"], ImportResult)
    assert got["import_definitions"].written == 1 and got["remove"] is True
    assert got["remove_calendar"] is False
    assert isinstance(got["resharded"], Store) and isinstance(got["acting"], Store)
    assert (got["acting"].actor, got["acting"].note, store.actor) == ("alice", "INC-42", "bob")
    assert isinstance(got["no_schedule"], ScheduleNotFoundError)
    assert (got["client"], got["namespace"], got["shards"]) == (client, "", 1)


def test_each_method_of_the_store_shows_its_signature_and_docstring_on_the_class() -> None:
    """What help(Store), inspect and a user's `mock.create_autospec(Store)` read: each
    method is a plain function of the class, with the part's signature and docstring."""
    methods = [n for n in dir(Store) if not n.startswith("_")
               and inspect.isfunction(inspect.getattr_static(Store, n))]
    assert {"put", "pause", "status", "backfill", "put_calendar", "reindex"} <= set(methods)
    for name in methods:
        method = getattr(Store, name)
        assert method.__name__ == name and method.__doc__, name
        assert next(iter(inspect.signature(method).parameters)) == "self", name
    spec = mock.create_autospec(Store, instance=True)
    spec.put("digest:42", PLAIN)
    assert spec.put.call_args == mock.call("digest:42", PLAIN)
    try:
        spec.put("digest:42", PLAIN, forse=True)
    except TypeError:
        pass
    else:
        raise AssertionError("the autospec took a keyword put does not have")


def test_the_names_the_store_and_the_operator_module_exported_still_import(
    client: redis.Redis,
) -> None:
    for module in (kiqbeat.store, kiqbeat.operator):
        assert [n for n in module.__all__ if not hasattr(module, n)] == []
    assert MissedRange is kiqbeat.operator.MissedRange
    operator = kiqbeat.operator.Operator(client, namespace="ns")
    assert isinstance(operator, Store) and operator.status().counts.schedules == 0
