"""A least-privilege Redis ACL user: enough for run-once and status, and nothing is spare.

kiqbeat's commands: TIME and HMGET (clock, watermarks), EVALSHA of push.lua (SCRIPT LOAD
after a restart or SCRIPT FLUSH; redis-py's Script never sends EVAL), and the commands the
script runs, which Redis checks against the same user (TYPE, HGET, HSET, HSETNX, LPUSH,
SADD, ZADD). push.lua touches only keys passed in KEYS, so key patterns are checked before
the script starts. Optional: INFO (startup warnings) and EXISTS/HMGET on sidekiq-scheduler's
and sidekiq-cron's keys (the same-name check); without them kiqbeat warns and carries on.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.report import Report
from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import run
from kiqbeat.errors import RedisRefusedError
from kiqbeat.redis.connection import connect
from tests.faults.harness import assert_clean, check, jobs_in_redis
from tests.integration.helpers import config, minute_floor, redis_now

from .conftest import kiqbeat_cli

# The line this suite verifies (Redis 7: %R~ grants read-only access to the neighbours' keys).
KEY_PATTERNS = ("~kiqbeat:*", "~queue:*", "~queues", "~schedule")
NEIGHBOUR_PATTERNS = ("%R~schedules", "%R~sidekiq-scheduler:pushed:*", "%R~cron_job:*")
REQUIRED = ("+time", "+hmget", "+evalsha", "+script|load",
            "+type", "+hget", "+hset", "+hsetnx", "+lpush", "+sadd", "+zadd")
OPTIONAL = ("+exists", "+info")


def acl_rules(without: str | None = None) -> list[str]:
    """The least-privilege rules, optionally without one of them."""
    rules = ["on", ">PASSWORD", "resetkeys", "resetchannels", *KEY_PATTERNS,
             *NEIGHBOUR_PATTERNS, "-@all", *REQUIRED, *OPTIONAL]
    return [r for r in rules if r != without]


LEAST_PRIVILEGE = " ".join(acl_rules())
DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def test_the_documented_acl_is_the_one_tested_here() -> None:
    """docs/deploy.md's `ACL SETUSER` line grants exactly what this suite verifies."""
    text = DEPLOY_DOC.read_text()
    block = text.split("ACL SETUSER kiqbeat ", 1)[1].split("```", 1)[0]
    assert sorted(block.split()) == sorted(acl_rules())
PASSWORD = "acl-test-pw"

SCHEDULES = """
missed_jobs_window: 1d
schedules:
  minutely:
    cron: "* * * * *"
    class: MinuteWorker
  ahead:
    every: 10s
    lookahead: 30s
    class: AheadWorker
"""

# push.lua writes before it reaches these commands: denied, they leave the step half-done.
@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """One private redis-server for this module; each test resets it."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    """The default (all-powerful) user on an empty server with no cached scripts."""
    with redis.Redis.from_url(acl_server.url, decode_responses=True) as client:
        client.flushall()
        client.script_flush()
        client.acl_deluser("kiqbeat")
        yield client


def _set_user(admin: redis.Redis, rules: list[str]) -> None:
    admin.acl_deluser("kiqbeat")
    rules = [f">{PASSWORD}" if r == ">PASSWORD" else r for r in rules]
    admin.execute_command("ACL", "SETUSER", "kiqbeat", *rules)


def _user_url(server: RedisServer) -> str:
    return f"redis://kiqbeat:{PASSWORD}@127.0.0.1:{server.port}/0"


def _snapshot(admin: redis.Redis) -> dict[str, bytes | None]:
    with redis.Redis.from_url(f"redis://127.0.0.1:{admin.connection_pool.connection_kwargs['port']}"
                              ) as raw:
        return {key.decode(): raw.dump(key) for key in raw.keys("*")}


def _instants(admin: redis.Redis) -> tuple[datetime, datetime]:
    t0 = minute_floor(redis_now(admin)) - timedelta(minutes=10)
    return t0, t0 + timedelta(minutes=3)


def test_least_privilege_user_runs_once_and_reads_status(
    acl_server: RedisServer, admin: redis.Redis, tmp_path: Path
) -> None:
    """With exactly the documented ACL, invocations push every tick, with no warning."""
    _set_user(admin, acl_rules())
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, cfg, now=t0), run(client, cfg, now=t1)]
    assert [r.warnings for r in reports] == [[], []]
    assert reports[1].pushed > 0
    assert_clean(check(admin, cfg, after=t0, until=t1, scenario="least-privilege ACL", runs=2))
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULES)
    for command in ("status", "run-once"):
        done = kiqbeat_cli(command, "--config", str(schedule), "--redis-url",
                           _user_url(acl_server))
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "warning" not in done.stderr, done.stderr


@pytest.mark.parametrize("optional", [*OPTIONAL, *NEIGHBOUR_PATTERNS])
def test_without_an_optional_permission_kiqbeat_warns_and_pushes(
    acl_server: RedisServer, admin: redis.Redis, optional: str
) -> None:
    """INFO and the neighbours' keys only feed warnings: without them kiqbeat says so and works."""
    _set_user(admin, acl_rules(without=optional))
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, cfg, now=t0), run(client, cfg, now=t1)]
    warnings = [w for r in reports for w in r.warnings]
    assert any("skipped" in w for w in warnings), warnings
    assert_clean(check(admin, cfg, after=t0, until=t1, scenario="optional ACL", runs=2))


def _invoke_until_refused(
    client: redis.Redis, admin: redis.Redis, instants: tuple[datetime, ...]
) -> tuple[RedisRefusedError, dict[str, bytes | None], dict[str, bytes | None]]:
    """Invoke at each instant until one is refused; Redis's keys before and after that one."""
    cfg = config(SCHEDULES)
    for now in instants:
        before = _snapshot(admin)
        try:
            report: Report = run(client, cfg, now=now)
        except RedisRefusedError as exc:
            return exc, before, _snapshot(admin)
        assert report.warnings == [], report.warnings
    raise AssertionError("every invocation succeeded without a required permission")


@pytest.mark.parametrize("permission", [*REQUIRED, *KEY_PATTERNS])
def test_each_required_permission_is_needed_and_its_absence_pushes_nothing(
    acl_server: RedisServer, admin: redis.Redis, permission: str
) -> None:
    """Without any one required permission, an invocation fails clearly and changes nothing.

    After the permission is granted again, the next invocation catches up exactly once.
    """
    _set_user(admin, acl_rules(without=permission))
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        refused, before, after = _invoke_until_refused(client, admin, (t0, t1))
    message = str(refused)
    print(f"without {permission}: {message}")
    assert f"127.0.0.1:{acl_server.port}" in message and "refused" in message
    assert any(text in message for text in ("no permissions", "can't run", "may not run"))
    assert after == before, "the refused invocation changed Redis"
    _set_user(admin, acl_rules())
    cfg = config(SCHEDULES)
    with connect(_user_url(acl_server)) as client:
        run(client, cfg, now=t0)  # no-op if already seen; first-seen otherwise
        run(client, cfg, now=t1)
    outcome = check(admin, cfg, after=t0, until=t1, scenario=f"ACL without {permission}", runs=3)
    assert_clean(outcome)
    assert len(jobs_in_redis(admin)) == outcome.pushed
