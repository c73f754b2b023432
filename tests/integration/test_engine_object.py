"""The Engine object: what it keeps between invocations, and what it reports each time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis

from kiqbeat.engine import Engine
from kiqbeat.redis import progress
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from tests.support.clock import redis_now
from tests.support.engine import config
from tests.support.marks import marked_names, stored_mark, write_marks

EVERY_SECOND = """
missed_jobs_window: 60s
wait_replicas: 1
wait_timeout: 0.1s
schedules:
  pulse:
    cron: "* * * * * *"
    class: PulseWorker
"""


def seed_mark(client: redis.Redis, name: str, seconds_ago: float) -> None:
    """A watermark (and first-seen) as if the last invocation ran `seconds_ago` (no
    sleeping): no tick at or before first-seen is ever pushed, so first-seen moves too."""
    mark = redis_now(client) - timedelta(seconds=seconds_ago)
    at = int(mark.timestamp() * 1000)
    write_marks(client, "", {name: progress.Mark(at, at)})
    client.zadd("kiqbeat:due", {name: 0})  # and "plan me", as its index entry would say


def test_each_invocations_own_warnings_are_reported_every_time_config_warnings_once(
    redis_client: redis.Redis,
) -> None:
    cfg = config(EVERY_SECOND)
    engine = Engine(client=redis_client)
    reports = []
    for _ in range(3):
        seed_mark(redis_client, "pulse", 3)  # ticks to push, so WAIT runs and falls short
        reports.append(engine.run(cfg))
    short = [[w for w in r.warnings if "replicas acknowledged" in w] for r in reports]
    assert all(len(s) == 1 for s in short), short  # no replica here: short every time
    window = [[w for w in r.warnings if w.startswith("missed_jobs_window is")] for r in reports]
    assert [len(w) for w in window] == [1, 0, 0]  # the document's warning, once
    assert all(r.unreplicated == r.pushed > 0 for r in reports)


def test_an_engine_runs_its_startup_checks_once_per_client(redis_client: redis.Redis) -> None:
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        engine = Engine(client=redis_client)
        cfg = config(EVERY_SECOND.replace("wait_replicas: 1", "wait_replicas: 0"))
        first, second = engine.run(cfg), engine.run(cfg)
        # A fresh engine on the same client reports it again: it has not told anyone yet.
        third = Engine(client=redis_client).run(cfg)
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")
    evicting = [sum("maxmemory-policy" in w for w in r.warnings) for r in (first, second, third)]
    assert evicting == [1, 0, 1]


def test_an_engine_reads_its_document_and_redis_from_settings(
    tmp_path: object, redis_url: str, redis_client: redis.Redis,
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "schedule.yaml"
    path.write_text(EVERY_SECOND.replace("wait_replicas: 1", "wait_replicas: 0"))
    engine = Engine(Settings.load({"KIQBEAT_CONFIG": str(path), "KIQBEAT_REDIS_URL": redis_url,
                                   "KIQBEAT_MISSED_JOBS_WINDOW": "2m"}))
    assert engine.config().missed_jobs_window_s == 120
    assert engine.run().new_schedules == 1
    assert stored_mark(redis_client, "pulse") is not None
    engine.close()


def test_one_invocation_sends_a_bounded_number_of_bytes_and_the_next_goes_on(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kiqbeat.redis import pushes

    monkeypatch.setattr(pushes, "MAX_BYTES_PER_INVOCATION", 150_000)
    cfg = config("missed_jobs_window: 1h\nschedules:\n  big:\n    cron: '* * * * * *'\n"
                 "    class: BigWorker\n    args: ['" + "x" * 60_000 + "']\n")
    engine = Engine(client=redis_client)
    engine.run(cfg)
    seed_mark(redis_client, "big", 10)  # ten ticks of 60 KB (a definition is at most 64 KiB)
    first = engine.run(cfg)
    assert 3 <= first.pushed < 10
    assert any("the most one may" in w for w in first.warnings)
    second = engine.run(cfg)
    assert first.pushed + second.pushed >= 10
    jids = [json.loads(raw)["jid"] for raw in redis_client.lrange("queue:default", 0, -1)]
    assert len(jids) == len(set(jids)) == first.pushed + second.pushed


def test_shards_split_the_store_and_never_plan_the_same_schedule(
    redis_client: redis.Redis,
) -> None:
    """With N shards, each schedule's index entry lives in one shard's index, so shards
    plan disjoint sets whose union is the whole store; the first shard applies a changed
    document, for all."""
    from kiqbeat.settings import Settings

    names = [f"s{i}" for i in range(12)]
    doc = "missed_jobs_window: 1h\nschedules:\n" + "".join(
        f"  {n}: {{cron: '* * * * *', class: A}}\n" for n in names)
    full = config(doc)
    Store(redis_client, shards=3).reindex()  # once: invocations never record the count
    planned = []
    for i in range(3):
        engine = Engine(Settings(shard=(i, 3)), client=redis_client)
        planned.append(engine.run(full).new_schedules)
    assert sum(planned) == len(names) and all(planned), planned
    assert marked_names(redis_client) == set(names)
    assert sum(redis_client.zcard(f"kiqbeat:due:{i}/3") for i in range(3)) == len(names)
    fewer = config(doc.replace("  s0: {cron: '* * * * *', class: A}\n", ""))
    Engine(Settings(shard=(1, 3)), client=redis_client).run(fewer)
    assert stored_mark(redis_client, "s0") is not None, "the first shard applies it"
    Engine(Settings(shard=(0, 3)), client=redis_client).run(fewer)
    assert stored_mark(redis_client, "s0") is None
    assert sum(redis_client.zcard(f"kiqbeat:due:{i}/3") for i in range(3)) == len(names) - 1


def test_a_warm_engine_keeps_parsed_only_the_schedules_due_again_soon(
    redis_client: redis.Redis,
) -> None:
    # Core/plan.py's KEEP_WARM_MS: an every-minute schedule is planned from what the engine
    # kept; an hourly or daily one (a large store's due set rotates through them) is read
    # again through the content-keyed checks, and nothing of it is kept meanwhile.
    engine = Engine(client=redis_client)
    store = engine.store()
    store.import_definitions(
        [(f"minutely{k}", {"class": "W", "cron": "* * * * *", "args": [k]}) for k in range(3)]
        + [(f"hourly{k}", {"class": "W", "cron": "0 * * * *", "args": [k]}) for k in range(3)])
    now = redis_now(redis_client).replace(minute=0, second=1, microsecond=0)
    engine.run(now=now - timedelta(minutes=30))  # registers them all
    report = engine.run(now=now)
    assert report.pushed == 3 * 30 + 3  # the minutely ones' 30 ticks, the hourly ones' one
    kept = engine.devices.parsed_names()
    assert kept == {"minutely0", "minutely1", "minutely2"}
    assert {s.name for s, *_ in engine.devices.memo().templates._heads.values()} == kept


def test_a_kept_parse_is_not_reused_under_another_missed_jobs_window() -> None:
    """devices.py `parse`: a definition kept parsed under one window is checked again under
    another (its lookahead must fit the window), whichever caller changes the window."""
    from kiqbeat.core.schedule import Schedule
    from kiqbeat.devices import Devices

    devices = Devices()
    definition = json.dumps({"class": "W", "cron": "* * * * *", "lookahead": "30m"},
                            separators=(",", ":"), sort_keys=True).encode()
    now_ms = 1_777_626_005_000  # 2026-05-01 09:00:05 UTC: the kept parse is due again soon
    fits, _ = devices.parse("ahead", definition, 3600.0, now_ms)
    assert isinstance(fits, Schedule) and devices.parsed_names() == {"ahead"}
    refused, _ = devices.parse("ahead", definition, 60.0, now_ms)
    assert isinstance(refused, str) and "lookahead" in refused
    again, _ = devices.parse("ahead", definition, 3600.0, now_ms)
    assert isinstance(again, Schedule)
