"""The push call's checks (push.lua's first pass): the keys' types and grants are
checked in every call before its first write (docs/store.md "Pre-flight")."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
import redis

from kiqbeat.engine import run
from kiqbeat.errors import StateError
from kiqbeat.redis import keys, progress, scripts
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config, marks, pushed_jobs

EVERY_MINUTE = """
missed_jobs_window: 1h
schedules:
  report: {cron: "* * * * *", class: ReportWorker}
  audit: {cron: "* * * * *", class: AuditWorker}
"""


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the script calls an invocation sends, by script name."""
    calls: dict[str, int] = {}
    start = scripts.Caller.start

    def counted(self: scripts.Caller, lua: scripts.Lua, *args: Any, **kwargs: Any) -> Any:
        calls[lua.name] = calls.get(lua.name, 0) + 1
        return start(self, lua, *args, **kwargs)

    monkeypatch.setattr(scripts.Caller, "start", counted)
    return calls


def test_a_wrong_typed_key_is_refused_naming_it_and_nothing_is_pushed(
    client: redis.Redis,
) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    before = marks(client, cfg)
    client.set(keys.missed(""), "not a hash")
    with pytest.raises(StateError, match=r"kiqbeat:missed holds a string, expected a hash"):
        run(client, cfg, now=t0 + timedelta(minutes=5))
    assert marks(client, cfg) == before and pushed_jobs(client) == []
    client.delete(keys.missed(""))
    report = run(client, cfg, now=t0 + timedelta(minutes=5))
    assert report.pushed == 10 and len({j["jid"] for j in pushed_jobs(client)}) == 10


def _store(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key and its DUMP: the whole store, to compare."""
    return {key: client.dump(key) for key in client.scan_iter()}


# Every key a push call uses, as it stands after the invocations below: the queue (Sidekiq's)
# and kiqbeat's own keys, including the victims' progress bucket.
RETYPED = ["queue:default", "queues", "schedule", "kiqbeat:due", "kiqbeat:schedules",
           "kiqbeat:rejected", "kiqbeat:missed", "kiqbeat:runs", "kiqbeat:skips",
           "kiqbeat:last_jobs", "kiqbeat:held", "progress bucket"]


@pytest.mark.parametrize("key", RETYPED)
def test_a_retyped_key_refuses_the_call_whole(client: redis.Redis, key: str) -> None:
    """docs/store.md "Pre-flight": a key retyped by hand fails the invocation before the push
    call's first write (nothing of it written: no mark moved without its job), naming the
    key, and once it is put back every tick is pushed once."""
    cfg = config(EVERY_MINUTE.replace("class: ReportWorker", "class: ReportWorker, max_runs: 99"))
    t0 = minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(minutes=1))  # the queue and the queues set exist
    if key == "progress bucket":
        key = keys.progress_bucket("", progress.bucket("report"))
    kept = client.dump(key)
    before = _store(client)
    client.delete(key)
    client.rpush(key, "not", "this") if key != "queue:default" else client.set(key, "x")
    with pytest.raises(StateError, match=r"wrong type|holds a"):
        run(client, cfg, now=t0 + timedelta(minutes=5))
    after = _store(client)
    after.pop(key.encode())
    before.pop(key.encode(), None)
    assert after == before, "the refused call wrote something"
    with pytest.raises(StateError, match=re.escape(key) + " holds a"):
        run(client, cfg, now=t0 + timedelta(minutes=5))
    client.delete(key)
    if kept is not None:
        client.restore(key, 0, kept)
    run(client, cfg, now=t0 + timedelta(minutes=5))
    jids = [job["jid"] for job in pushed_jobs(client)]
    assert len(jids) == len(set(jids)) == 10, jids
