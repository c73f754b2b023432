"""Lost and late replies, a full Redis, a wrong-typed key, a denied permission.

A reply lost or late after the write happened is retried (by redis-py or by the next run)
and finds its ticks already pushed. A refusal fails the invocation with a message naming
what was refused, and leaves nothing half-done: watermarks moved iff jobs were pushed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.server import RedisServer
from kiqbeat.redis import keys, progress, scripts
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import load_config_file
from tests.support.invariants import (
    LONG,
    assert_bounded_state,
    assert_clean,
    check,
    jobs_in_redis,
    record,
)
from tests.support.marks import all_marks
from tests.support.proxy import FaultProxy

from .drive import run_cli

SCHEDULES = """
missed_jobs_window: 2h
schedules:
  minutely: {cron: "* * * * *", class: MinuteJob}
  quarter: {cron: "*/15 * * * *", class: QuarterJob, queue: reports}
  ahead: {every: 10s, class: AheadJob, lookahead: 30s}
"""

# The push script's call (the read script is an EVALSHA too).
PUSH_CALL = scripts.PUSH.sha.encode()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of the session's Redis."""
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    fault = FaultProxy(port)
    yield fault
    fault.close()


def _run(path: Path, url: str, now: datetime) -> tuple[int, str, float]:
    rc, _, err, took = run_cli("run-once", "--config", str(path), "--redis-url", url,
                               "--now", now.isoformat())
    return rc, err, took


@pytest.mark.timeout(300 if LONG else 120)
def test_lost_and_late_replies_are_retried_without_duplicates(
    redis_url: str, client: redis.Redis, proxy: FaultProxy,
    config_file: Callable[[str], Path],
) -> None:
    """Each minute, the push reply is lost 1–4 times or held past the timeout: still once."""
    path = config_file(SCHEDULES)
    rng = random.Random(4)
    steps = 30 if LONG else 10
    start = minute_floor(redis_now(client)) - timedelta(minutes=steps + 1)
    rc, err, _ = _run(path, redis_url, start)
    assert rc == 0, err
    seconds, failed = [], 0
    for step in range(1, steps + 1):
        fault = rng.choice(("lost", "late"))
        if fault == "lost":
            proxy.drop_reply_after(PUSH_CALL, times=rng.randint(1, 4))
        else:
            proxy.delay_reply_after(PUSH_CALL, 2.5, times=rng.randint(1, 3))
        rc, err, took = _run(path, proxy.url, start + timedelta(minutes=step, seconds=7))
        seconds.append(took)
        if rc:  # redis-py's retries ran out: the command may have run; the message says so
            failed += 1
            assert "unavailable while pushing jobs" in err, err
    proxy.drop_reply_after(PUSH_CALL, times=0)
    proxy.delay_reply_after(PUSH_CALL, 0, times=0)
    until = start + timedelta(minutes=steps, seconds=7)
    rc, err, _ = _run(path, redis_url, until)  # the next trigger, on a quiet network
    assert rc == 0, err
    outcome = check(client, load_config_file(path), after=start, until=until,
                    scenario="lost and late replies (EVALSHA)", runs=steps + 2,
                    invocation_s=seconds,
                    notes=f"{proxy.dropped} replies dropped after the script ran, "
                          f"{proxy.delayed} held 2.5 s (timeout 2 s); {failed} invocations "
                          "gave up after redis-py's retries and the next one caught up")
    record(outcome)
    assert_clean(outcome)
    assert proxy.dropped and proxy.delayed


def _state(client: redis.Redis) -> tuple[dict[str, progress.Mark], int]:
    """The watermarks and the number of jobs: the pair that must move together."""
    return all_marks(client, ""), len(jobs_in_redis(client))


def _refused_then_recovered(
    admin: redis.Redis, path: Path, url: str, break_it: Callable[[], None],
    fix_it: Callable[[], None], scenario: str, names: tuple[str, ...],
) -> None:
    """Seed, break Redis, invoke (must fail clearly, change nothing), fix, invoke: once.

    `admin` inspects Redis with full rights; `url` is what kiqbeat connects with.
    """
    start = minute_floor(redis_now(admin)) - timedelta(minutes=30)
    rc, err, first_s = _run(path, url, start)
    assert rc == 0, err
    break_it()
    before = _state(admin)
    rc, refusal, failed_s = _run(path, url, start + timedelta(minutes=20))
    after = _state(admin)
    fix_it()
    assert rc != 0
    assert all(name.lower() in refusal.lower() for name in names), refusal
    assert "Traceback" not in refusal, refusal
    assert after == before  # the failed invocation pushed nothing and moved no watermark
    until = start + timedelta(minutes=29)
    rc, err, last_s = _run(path, url, until)
    assert rc == 0, err
    message = refusal.strip().splitlines()[-1][:160]
    outcome = check(admin, load_config_file(path), after=start, until=until, scenario=scenario,
                    runs=3, invocation_s=[first_s, failed_s, last_s],
                    notes=f"refused with exit {rc or 1}: `{message}`; watermarks and jobs "
                          "unchanged; the run after the fix pushed each tick once")
    record(outcome)
    assert_clean(outcome)
    assert_bounded_state(admin, 3)


def test_wrong_typed_queue_key_fails_naming_it_and_pushes_nothing(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """`queue:reports` holding a string: refused, the key named, no queue touched."""
    _refused_then_recovered(
        client, config_file(SCHEDULES), redis_url,
        lambda: client.set("queue:reports", "not a list"),
        lambda: client.delete("queue:reports"),
        "queue key of the wrong type", ("queue:reports", "string"))


def test_a_garbled_watermark_sets_only_its_schedule_aside(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """A watermark that is not a number costs only its schedule (issue 26; it used to fail
    the invocation for every schedule): set aside, named with the key; the others pushed;
    once the record is fixed and the schedule indexed again, each tick is pushed once."""
    path = config_file(SCHEDULES)
    bucket = keys.progress_bucket("", progress.bucket("quarter"))
    start = minute_floor(redis_now(client)) - timedelta(minutes=30)
    rc, err, first_s = _run(path, redis_url, start)
    assert rc == 0, err
    saved = client.hget(bucket, "quarter") or b""
    client.hset(bucket, "quarter", "yesterday")
    rc, warned, garbled_s = _run(path, redis_url, start + timedelta(minutes=20))
    assert rc == 0, warned
    assert "quarter" in warned and bucket in warned and "Traceback" not in warned, warned
    assert bucket.encode() in (client.hget("kiqbeat:rejected", "quarter") or b"")
    client.hset(bucket, "quarter", saved)  # the fix the reason names
    client.zadd("kiqbeat:due", {"quarter": 0})
    until = start + timedelta(minutes=29)
    rc, err, last_s = _run(path, redis_url, until)
    assert rc == 0, err
    outcome = check(client, load_config_file(path), after=start, until=until,
                    scenario="garbled watermark", runs=3,
                    invocation_s=[first_s, garbled_s, last_s],
                    notes="set aside, the others pushed: `" + warned.strip().splitlines()[-1][
                        :160] + "`; after the fix each tick pushed once")
    record(outcome)
    assert_clean(outcome)
    assert_bounded_state(client, 3)


@pytest.fixture
def own_redis(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A private redis-server with the test's extra arguments (`request.param`)."""
    with RedisServer(*getattr(request, "param", ()), directory=tmp_path) as server:
        yield server


@pytest.mark.parametrize("own_redis", [("--maxmemory", "3mb", "--maxmemory-policy",
                                        "noeviction")], indirect=True)
def test_out_of_memory_fails_clearly_and_pushes_nothing(
    own_redis: RedisServer, config_file: Callable[[str], Path]
) -> None:
    """Redis at maxmemory with noeviction: refused with OOM, nothing half-done."""
    with redis.Redis.from_url(own_redis.url) as admin:
        def fill() -> None:
            for i in range(10_000):
                try:
                    admin.set(f"ballast:{i}", b"x" * 64_000)
                except redis.OutOfMemoryError:
                    return
            raise AssertionError("maxmemory never reached")

        def free() -> None:
            for key in admin.scan_iter(match="ballast:*"):
                admin.delete(key)

        _refused_then_recovered(admin, config_file(SCHEDULES), own_redis.url, fill, free,
                                "Redis out of memory (noeviction)", ("maxmemory", "refused"))


ACL_PASSWORD = "faults-pw"
FULL_ACL = ["on", f">{ACL_PASSWORD}", "~*", "+@all"]


@pytest.mark.parametrize(("denied", "names"), [
    ("-evalsha", ("evalsha", "no permissions")),
    # The server's refusal does not say which key (and Redis and Valkey word it apart:
    # "one of the keys", "a key"); kiqbeat says it happened while pushing jobs.
    ("resetkeys ~kiqbeat:* ~queues ~schedule", ("no permissions", "pushing jobs")),
])
def test_acl_user_lacking_a_permission_fails_clearly_and_pushes_nothing(
    own_redis: RedisServer, config_file: Callable[[str], Path], denied: str,
    names: tuple[str, ...],
) -> None:
    """A user without EVALSHA, or without the queue keys: refused by name, nothing pushed."""
    url = own_redis.url.replace("//", f"//kiqbeat:{ACL_PASSWORD}@")
    with redis.Redis.from_url(own_redis.url) as admin:
        admin.acl_setuser("kiqbeat", reset_keys=True, reset_channels=True)
        admin.execute_command("ACL", "SETUSER", "kiqbeat", *FULL_ACL)

        def deny() -> None:
            admin.execute_command("ACL", "SETUSER", "kiqbeat", *denied.split())

        def grant() -> None:
            admin.execute_command("ACL", "SETUSER", "kiqbeat", "resetkeys", *FULL_ACL)

        what = "EVALSHA" if denied == "-evalsha" else "access to queue:* keys"
        _refused_then_recovered(admin, config_file(SCHEDULES), url, deny, grant,
                                f"ACL user without {what}", names)
