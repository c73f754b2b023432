"""Due index scores written by hand: an entry scored beyond any instant kiqbeat plans (+inf,
1e308: past the year 9999) is never planned, so invocations warn about it, `kiqbeat status`
counts and names it and `kiqbeat schedules reindex` rescores it "plan me"; a negative or
-inf score is planned at once, like "plan me"."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.engine import run
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import pushed_jobs
from tests.support.marks import marked_names

DUE = "kiqbeat:due"
STORE_ONLY = Config(schedules=())
MINUTELY = {"cron": "* * * * *", "class": "MinuteWorker"}
UNPLANNABLE = [float("inf"), 1e308, MAX_PLANNABLE_MS + 1]


def stranded(client: redis.Redis) -> Store:
    """Three minutely schedules whose index entries were rescored by hand beyond 9999, and
    one ("ok") left alone."""
    store = Store(client)
    for name in ("inf", "huge", "just-past", "ok"):
        store.put(name, MINUTELY)
    client.zadd(DUE, dict(zip(["inf", "huge", "just-past"], UNPLANNABLE, strict=True)))
    return store


def test_an_entry_scored_past_the_year_9999_is_never_planned_and_each_invocation_warns(
    client: redis.Redis,
) -> None:
    stranded(client)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=10)
    first = run(client, STORE_ONLY, now=t0)
    assert first.new_schedules == 1  # "ok" alone
    warned = [w for w in first.warnings if "never planned" in w]
    assert warned and "3 entries of the due index kiqbeat:due" in warned[0]
    assert "kiqbeat schedules reindex" in warned[0]
    later = run(client, STORE_ONLY, now=t0 + timedelta(minutes=2, seconds=30))
    assert later.round_trips == 2  # still: one read, one push
    assert {job["jid"] for job in pushed_jobs(client)} and all(
        job["class"] == "MinuteWorker" for job in pushed_jobs(client))
    assert marked_names(client) == {"ok"}


def test_nothing_due_is_still_one_round_trip_with_unplannable_entries(
    client: redis.Redis,
) -> None:
    stranded(client)
    run(client, STORE_ONLY)
    quiet = run(client, STORE_ONLY)
    assert quiet.round_trips == 1 and quiet.pushed == 0


def test_status_counts_and_names_them_and_reindex_rescores_them_to_be_planned(
    client: redis.Redis, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from kiqbeat.entrypoints.cli import main

    store = stranded(client)
    run(client, STORE_ONLY)  # "ok" is met
    client.zadd(DUE, {"\x1b[31mred": float("inf")})  # a name to escape when shown
    status = store.status()
    assert status.counts.unplannable == 4
    assert sorted(status.unplannable) == sorted(["inf", "huge", "just-past", "\x1b[31mred"])
    assert main(["status", "--redis-url", redis_url]) == 0
    out = capsys.readouterr().out
    assert "never planned: 4 index entries scored beyond the year 9999" in out
    assert "'\\x1b[31mred'" in out and "\x1b" not in out
    assert "`kiqbeat schedules reindex`" in out

    assert main(["schedules", "reindex", "--redis-url", redis_url, "--json"]) == 0
    assert '"rescored": 4' in capsys.readouterr().out
    assert store.status().counts.unplannable == 0
    assert client.zscore(DUE, "inf") == 0.0  # "plan me"
    now = redis_now(client)
    planned = run(client, STORE_ONLY, now=now)
    assert planned.new_schedules == 3  # the three stranded ones are met at last
    assert all(0 < (client.zscore(DUE, n) or 0) <= to_ms(now) + 60_000
               for n in ("inf", "huge", "just-past"))


@pytest.mark.parametrize("score", [float("-inf"), -5.0])
def test_a_negative_score_is_planned_at_once_like_plan_me(
    client: redis.Redis, score: float,
) -> None:
    Store(client).put("x", MINUTELY)
    client.zadd(DUE, {"x": score})
    now = redis_now(client)
    report = run(client, STORE_ONLY, now=now)
    assert report.new_schedules == 1
    moved = client.zscore(DUE, "x")
    assert moved is not None and to_ms(now) < moved <= to_ms(now) + 60_000


def test_redis_refuses_a_nan_score_so_none_can_be_stored(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError):
        client.zadd(DUE, {"x": float("nan")})
