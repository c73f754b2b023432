"""Every operator command bounded (issue 17): `kiqbeat backfill` honours --deadline and
signals and says what it pushed, asks before a large push or one from before first-seen,
counts exactly in a dry run; `run-once --now` far back needs --replay; shard counts are
bounded and recorded only by `reindex`. Checked against Redis itself (distinct jids, the
record), not against the command's own report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.payload import jid_ms
from kiqbeat.engine import run
from kiqbeat.redis.connection import connect
from kiqbeat.settings import Settings
from tests.support.cli import Kiqbeat
from tests.support.clock import redis_now
from tests.support.engine import load_config_file
from tests.support.marks import stored_mark

DOCUMENT = """
missed_jobs_window: 1m
schedules:
  pulse: {every: 1s, class: PulseWorker, queue: pulse}
"""
MISSED = "kiqbeat:missed"


@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "schedules.yaml"
    path.write_text(DOCUMENT)
    return path


@pytest.fixture
def kiqbeat(kiqbeat: Kiqbeat, document: Path, monkeypatch: pytest.MonkeyPatch) -> Kiqbeat:
    """`kiqbeat ARGS...` in this process with DOCUMENT as KIQBEAT_CONFIG."""
    monkeypatch.setenv("KIQBEAT_CONFIG", str(document))
    return kiqbeat


def owe(client: redis.Redis, url: str, document: Path, seconds: int) -> list[int]:
    """Invocations `seconds` + 60 s apart (Python API replays): the ticks, epoch ms, that
    the record then names, read from the record itself."""
    config = load_config_file(document)
    now = redis_now(client)
    with connect(url) as own:
        run(own, config, now=now - timedelta(seconds=seconds + 60))
        run(own, config, now=now)
    client.delete("queue:pulse")  # the last minute, pushed: the queue holds backfills only
    (line,) = str(client.hget(MISSED, "pulse")).splitlines()
    after, through, _ = line.split()
    return [s * 1000 for s in range(int(after) // 1000 + 1, int(through) // 1000 + 1)]


def queued(client: redis.Redis) -> Counter[str]:
    """Each jid in the pulse queue, with how many times it is there."""
    return Counter(json.loads(raw)["jid"] for raw in client.lrange("queue:pulse", 0, -1))


def tick_jids(ticks: list[int]) -> set[str]:
    return {jid_ms("pulse", t) for t in ticks}


def test_a_backfill_past_its_deadline_stops_says_what_it_pushed_and_a_rerun_does_the_rest(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, redis_url: str, document: Path,
) -> None:
    owed = owe(redis_client, redis_url, document, 1_000)
    cut = kiqbeat("backfill", "pulse", "--deadline", "0.001", "--json")
    assert cut.code == 3, cut.err
    done = cut.json()
    pushed = queued(redis_client)
    assert 0 < len(pushed) < len(owed) and set(pushed.values()) == {1}
    assert done["pushed"] == len(pushed) and done["stopped"] == "deadline"
    newest = max(t for t in owed if jid_ms("pulse", t) in pushed)
    assert done["last"]["jid"] == jid_ms("pulse", newest)
    assert "stopped at the deadline" in cut.err and "the last: pulse tick" in cut.err
    rest = kiqbeat("backfill", "pulse")
    assert rest.code == 0, rest.err
    assert queued(redis_client) == Counter(tick_jids(owed))


def test_sigint_stops_a_real_backfill_cleanly_and_a_rerun_pushes_the_rest_once(
    redis_client: redis.Redis, redis_url: str, document: Path,
) -> None:
    owed = owe(redis_client, redis_url, document, 2 * 86_400)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIQBEAT_", "REDIS"))}
    argv = [sys.executable, "-m", "kiqbeat", "backfill", "pulse", "--yes", "--json",
            "--config", str(document), "--redis-url", redis_url]
    record = redis_client.hget(MISSED, "pulse")
    proc = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while redis_client.hget(MISSED, "pulse") == record and proc.poll() is None:
        assert time.monotonic() < deadline, "the backfill pushed nothing in 60 s"
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "stopped by a signal" in err
    stopped = json.loads(out)
    pushed = queued(redis_client)
    assert stopped["stopped"] == "signal" and stopped["pushed"] == len(pushed) < len(owed)
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert queued(redis_client) == Counter(tick_jids(owed))  # each tick once, none missing


def test_a_backfill_above_the_confirm_count_asks_first_and_max_jobs_pushes_that_many(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, redis_url: str, document: Path,
) -> None:
    owed = owe(redis_client, redis_url, document, 10_100)
    assert len(owed) > 10_000
    record = redis_client.hget(MISSED, "pulse")
    asked = kiqbeat("backfill", "pulse")
    assert asked.code == 1
    assert f"would push {len(owed):,} jobs" in asked.err and "more than 10,000" in asked.err
    assert "--yes" in asked.err and "--max-jobs N" in asked.err
    assert redis_client.llen("queue:pulse") == 0 and redis_client.hget(MISSED, "pulse") == record
    some = kiqbeat("backfill", "pulse", "--max-jobs", "500", "--json")
    assert some.code == 3 and some.json()["stopped"] == "max_jobs"
    assert queued(redis_client) == Counter(tick_jids(owed[:500]))  # the oldest 500, once
    rest = kiqbeat("backfill", "pulse", "--yes")
    assert rest.code == 0, rest.err
    assert queued(redis_client) == Counter(tick_jids(owed))


def test_a_dry_run_counts_exactly_and_says_plus_only_beyond_its_bound(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, redis_url: str, document: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owed = owe(redis_client, redis_url, document, 2 * 86_400)  # more than 100,000 in one range
    dry = kiqbeat("backfill", "pulse", "--dry-run")
    assert dry.code == 0
    assert f"would push {len(owed):,} tick(s)" in dry.out and f"{len(owed):,}+" not in dry.out
    assert "needs --yes" in dry.out
    monkeypatch.setattr("kiqbeat.store.backfill_plan.MAX_COUNTED_TICKS", 1_000)
    capped = kiqbeat("backfill", "pulse", "--dry-run", "--json").json()
    assert (capped["planned"], capped["capped"]) == (1_000, True)
    assert "would push 1,000+ tick(s)" in kiqbeat("backfill", "pulse", "--dry-run").out
    assert redis_client.llen("queue:pulse") == 0


def test_a_backfill_from_before_first_seen_needs_yes(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, redis_url: str, document: Path,
) -> None:
    owe(redis_client, redis_url, document, 100)
    seen = getattr(stored_mark(redis_client, "pulse"), "first_seen_ms", 0) or 0
    # A record from before this version clipped at first-seen: an hour before it.
    redis_client.hset(MISSED, "pulse", f"{seen - 3_600_000} {seen} window")
    asked = kiqbeat("backfill", "pulse")
    assert asked.code == 1 and "before their schedule was first seen" in asked.err
    assert redis_client.llen("queue:pulse") == 0
    assert kiqbeat("backfill", "pulse", "--yes").code == 0
    assert len(queued(redis_client)) == 3_600


def test_now_further_back_than_the_window_is_refused_without_replay(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    back = (redis_now(redis_client) - timedelta(hours=2)).isoformat()
    refused = kiqbeat("run-once", "--now", back)
    assert refused.code == 1 and "--replay" in refused.err and "KIQBEAT_ALLOW_REPLAY" in refused.err
    assert redis_client.dbsize() == 0  # nothing registered, nothing recorded
    assert kiqbeat("run-once", "--now", back, "--replay").code == 0


def test_replay_and_actor_variables_are_checked_as_every_knob_is(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    back = (redis_now(redis_client) - timedelta(hours=2)).isoformat()
    monkeypatch.setenv("KIQBEAT_ALLOW_REPLAY", "maybe")
    refused = kiqbeat("run-once", "--now", back)
    assert refused.code == 1 and "KIQBEAT_ALLOW_REPLAY: 'maybe' must be true or false" in (
        refused.err)
    assert redis_client.dbsize() == 0
    monkeypatch.setenv("KIQBEAT_ALLOW_REPLAY", " Yes ")
    assert kiqbeat("run-once", "--now", back).code == 0  # as --replay
    monkeypatch.setenv("KIQBEAT_ACTOR", "a" * 201)  # a request's actor has at most 200
    long = kiqbeat("schedules", "pause", "x")
    assert long.code == 1 and "KIQBEAT_ACTOR: " in long.err and "200 characters" in long.err
    assert "a" * 201 not in long.err
    assert not redis_client.exists("kiqbeat:audit")


@pytest.mark.parametrize("flag", ["--history", "--shard-count"])
def test_a_whole_number_knob_of_thousands_of_digits_is_refused_by_name_not_a_traceback(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, flag: str,
) -> None:
    """Python refuses int() of more than 4,300 digits with a ValueError of its own: the knob's
    reader bounds the digits first, so the message names the flag, clipped."""
    refused = kiqbeat("run-once", flag, "9" * 5000)
    assert refused.code == 1 and f"{flag}: '999" in refused.err
    assert "Traceback" not in refused.err and len(refused.err) < 400
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("value", ["5", " 5 ", "0000000005", "0" * 5000 + "5"])
def test_a_whole_number_knob_reads_leading_zeros_as_the_number_they_write(value: str) -> None:
    """Bounding the digits (above) counts the number's, not its leading zeros'."""
    knobs = Settings.load({"KIQBEAT_HISTORY": value, "KIQBEAT_SHARD_COUNT": value})
    assert (knobs.history, knobs.shard_count) == (5, 5)


def test_a_shard_count_above_the_bound_is_refused_and_nothing_is_written(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    refused = kiqbeat("run-once", "--shard", "0/100000000")
    assert refused.code == 1 and "at most 1,024 shards" in refused.err
    assert "Traceback" not in refused.err and redis_client.dbsize() == 0


def test_a_first_sharded_invocation_records_nothing_and_asks_for_a_reindex(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    refused = kiqbeat("run-once", "--shard", "0/4")
    assert refused.code == 1
    assert "run `kiqbeat schedules reindex --shard 0/4` once" in refused.err
    assert redis_client.dbsize() == 0  # no count recorded, the document not applied
    assert kiqbeat("schedules", "reindex", "--shard", "0/4").code == 0
    assert kiqbeat("run-once", "--shard", "0/4").code == 0


@pytest.mark.parametrize(("args", "shown"), [
    ("[" * 60_000 + "]" * 60_000, "nests deeper than the 100 levels"),
    ("[" * 150 + "]" * 150, "nests deeper than the 100 levels"),
    ("[" + "1," * 60_000, "is not JSON"),
], ids=["60000-deep", "150-deep", "120KB-malformed"])
def test_trigger_args_too_deep_or_malformed_are_a_short_clear_error(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, args: str, shown: str,
) -> None:
    assert kiqbeat("run-once").code == 0  # pulse in the store
    refused = kiqbeat("trigger", "pulse", "--args", args)
    assert refused.code == 1 and shown in refused.err, refused.err[:500]
    assert "Traceback" not in refused.err and len(refused.err) < 1_000
    assert redis_client.llen("queue:pulse") == 0
