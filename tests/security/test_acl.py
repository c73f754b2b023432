"""The least-privilege Redis ACL users of docs/deploy.md: enough for every code path, and
nothing is spare — for both ways of running kiqbeat's Lua.

- scripts (Redis 6.2+): EVALSHA, and SCRIPT LOAD after a restart or SCRIPT FLUSH;
- functions (Redis 7): FCALL of the library an administrator loaded; no script permission,
  so the user cannot run Lua of its own (a busy loop would block every Sidekiq client).

Both need the commands the Lua runs, which Redis checks against the same user (TYPE, HGET,
HSET, LPUSH, SADD, ZADD; HGETALL and HDEL when removed schedules are forgotten) and
HLEN (counting stored marks on a new config). The Lua touches only keys passed in KEYS, so
key patterns are checked before it starts. The operator's commands (`missed`, `backfill`,
`trigger`, `history`) need XADD besides, for the audit trail (XREVRANGE reads it).
Optional: INFO (startup warnings) and EXISTS/HMGET on sidekiq-scheduler's and
sidekiq-cron's keys (the same-name check); without them kiqbeat warns and carries on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.limits import MAX_PENDING_SKIPS
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError, RedisRefusedError
from kiqbeat.redis import progress, scripts
from kiqbeat.redis.connection import connect
from kiqbeat.settings import Settings
from tests.support.cli import kiqbeat_cli
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config
from tests.support.invariants import assert_clean, check, jobs_in_redis, recorded_ticks
from tests.support.marks import stored_mark
from tests.support.receiver import receiving
from tests.support.servers import NO_PERMISSIONS, load_functions

# The line this suite verifies (Redis 7: %R~ grants read-only access to the neighbours' keys).
KEY_PATTERNS = ("~kiqbeat:*", "~queue:*", "~queues", "~schedule")
NEIGHBOUR_PATTERNS = ("%R~schedules", "%R~sidekiq-scheduler:pushed:*", "%R~cron_job:*")
LUA = {"scripts": ("+evalsha", "+script|load"), "functions": ("+fcall",)}
REQUIRED = ("+time", "+hmget", "+type", "+hget", "+hset", "+hdel", "+hexists",
            "+lpush", "+sadd", "+srem", "+zadd", "+zrem", "+zscore", "+zrangebyscore", "+get",
            "+set",
            "+hstrlen", "+hincrby", "+lpos", "+hlen",
            # the name index's buckets, which the write script keeps (redis/lua/names.lua)
            "+zrevrangebylex", "+del")
# `kiqbeat status` (and the store API's reads) besides (and HLEN above, which invocations
# use too: whether the skips, set-aside and paused hashes hold anything).
FOR_STATUS = ("+zcard", "+zcount", "+zrange", "+hscan", "+hkeys")
# The audit trail of operators' actions (`pause`, `trigger`, `backfill`, ...; `kiqbeat audit`).
FOR_AUDIT = ("+xadd", "+xrevrange")
# Alert delivery: the outbox stream's consumer groups (alerts/delivery.py), and the gauges.
FOR_ALERTS = ("+xinfo", "+xgroup", "+xreadgroup", "+xautoclaim", "+xack", "+xpending",
              "+xrange", "+xlen", "+zmscore")
OPTIONAL = ("+exists", "+info")
# Folding the workers' outcomes inbox (kiqbeat.outcomes): without them kiqbeat warns.
FOR_OUTCOMES = ("+llen", "+rpop")
MODES = tuple(LUA)


def acl_rules(mode: str = "scripts", without: str | None = None) -> list[str]:
    """The least-privilege rules of one mode, optionally without one of them."""
    rules = ["on", ">PASSWORD", "resetkeys", "resetchannels", *KEY_PATTERNS,
             *NEIGHBOUR_PATTERNS, "-@all", *LUA[mode], *REQUIRED, *FOR_STATUS, *FOR_AUDIT,
             *FOR_ALERTS, *OPTIONAL, *FOR_OUTCOMES]
    return [r for r in rules if r != without]


DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def test_the_documented_acls_are_the_ones_tested_here() -> None:
    """docs/deploy.md's two `ACL SETUSER` lines grant exactly what this suite verifies."""
    blocks = [b.split("```", 1)[0] for b in DEPLOY_DOC.read_text().split(
        "ACL SETUSER kiqbeat ")[1:]]
    assert [sorted(b.split()) for b in blocks[:2]] == [
        sorted(acl_rules("functions")), sorted(acl_rules("scripts"))]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, admin: redis.Redis) -> str:
    """Each test runs with scripts and with the function library (loaded by the admin)."""
    if request.param == "functions":
        load_functions(admin, scripts.library())
    return str(request.param)


def run(client: redis.Redis, cfg: Config, *, now: datetime, mode: str = "scripts") -> Report:
    """One invocation as a new engine in `mode`."""
    return Engine(Settings(redis_functions=mode == "functions"), client=client).run(cfg, now=now)
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
        client.function_flush()
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


STORE_KEYS = ("kiqbeat:schedules", "kiqbeat:due", "kiqbeat:documents", "kiqbeat:document:",
              "kiqbeat:shards", "kiqbeat:names", "kiqbeat:name_ranges", "kiqbeat:disabled")


def _pushing(snapshot: dict[str, bytes | None]) -> dict[str, bytes | None]:
    """The keys jobs and watermarks live in (everything but the store's definitions)."""
    return {k: v for k, v in snapshot.items() if not k.startswith(STORE_KEYS)}


def _instants(admin: redis.Redis) -> tuple[datetime, datetime]:
    t0 = minute_floor(redis_now(admin)) - timedelta(minutes=10)
    return t0, t0 + timedelta(minutes=3)


def test_least_privilege_user_runs_once_and_reads_status(
    acl_server: RedisServer, admin: redis.Redis, tmp_path: Path, mode: str
) -> None:
    """With exactly the documented ACL, invocations push every tick, with no warning."""
    _set_user(admin, acl_rules(mode))
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, cfg, now=t0, mode=mode), run(client, cfg, now=t1, mode=mode)]
    assert [r.warnings for r in reports] == [[], []]
    assert reports[1].pushed > 0
    assert_clean(check(admin, cfg, after=t0, until=t1, scenario="least-privilege ACL", runs=2))
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULES)
    for command in ("status", "run-once"):
        done = kiqbeat_cli(command, "--config", str(schedule), "--redis-url",
                           _user_url(acl_server), "--redis-functions", str(mode == "functions"))
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "warning" not in done.stderr, done.stderr


def test_the_functions_user_cannot_run_lua_of_its_own(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    """Scripts' +evalsha +script|load let a user run any Lua (a busy loop blocks Redis for
    every Sidekiq client); the functions user has neither."""
    _set_user(admin, acl_rules("functions"))
    with connect(_user_url(acl_server)) as client:
        for attempt in (lambda: client.script_load("while true do end"),
                        lambda: client.eval("while true do end", 0),
                        lambda: client.function_load("#!lua name=x\nredis.register_function("
                                                     "'x', function() end)")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()


def test_removed_schedules_are_forgotten_under_the_documented_acl(
    acl_server: RedisServer, admin: redis.Redis, mode: str
) -> None:
    """Bounded state holds under the ACL: a schedule gone from the document is forgotten
    (definition, index entry, watermark, first-seen) by the invocation meeting the change."""
    _set_user(admin, acl_rules(mode))
    t0, t1 = _instants(admin)
    extra = '  gone:\n    cron: "* * * * *"\n    class: GoneWorker\n'
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, config(SCHEDULES + extra), now=t0, mode=mode),
                   run(client, config(SCHEDULES), now=t1, mode=mode)]
    assert [r.warnings for r in reports] == [[], []]
    assert admin.hexists("kiqbeat:schedules", "minutely")
    assert not admin.hexists("kiqbeat:schedules", "gone")
    assert stored_mark(admin, "gone") is None
    assert admin.zscore("kiqbeat:due", "gone") is None


def test_wait_and_the_scheduler_tab_work_with_their_documented_grants(
    acl_server: RedisServer, admin: redis.Redis, mode: str
) -> None:
    """`wait_replicas` needs +wait; `sidekiq_scheduler_ui` needs its keys and +hgetall."""
    rules = [*acl_rules(mode), "+wait", "+hgetall", "~schedules", "~sidekiq-scheduler:*"]
    _set_user(admin, rules)
    cfg = config("sidekiq_scheduler_ui: true\nwait_replicas: 1\nwait_timeout: 0.1s\n"
                 + SCHEDULES.replace("missed_jobs_window: 1d\n", "missed_jobs_window: 1d\n"))
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, cfg, now=t0, mode=mode), run(client, cfg, now=t1, mode=mode)]
    warnings = [w for r in reports for w in r.warnings]
    # No replica exists: WAIT ran (it was allowed) and fell short; nothing else went wrong.
    assert warnings and all("replicas acknowledged" in w for w in warnings), warnings
    assert admin.hexists("sidekiq-scheduler:last_times", "minutely")
    assert admin.hexists("schedules", "minutely")


@pytest.mark.parametrize("optional", [*OPTIONAL, *NEIGHBOUR_PATTERNS])
def test_without_an_optional_permission_kiqbeat_warns_and_pushes(
    acl_server: RedisServer, admin: redis.Redis, optional: str, mode: str
) -> None:
    """INFO and the neighbours' keys only feed warnings: without them kiqbeat says so and works."""
    _set_user(admin, acl_rules(mode, without=optional))
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        reports = [run(client, cfg, now=t0, mode=mode), run(client, cfg, now=t1, mode=mode)]
    warnings = [w for r in reports for w in r.warnings]
    assert any("skipped" in w for w in warnings), warnings
    assert_clean(check(admin, cfg, after=t0, until=t1, scenario="optional ACL", runs=2))


def _invoke_until_refused(
    client: redis.Redis, admin: redis.Redis, instants: tuple[datetime, ...], mode: str
) -> tuple[RedisRefusedError, dict[str, bytes | None], dict[str, bytes | None]]:
    """Invoke at each instant until one is refused; Redis's keys before and after that one."""
    cfg = config(SCHEDULES)
    for now in instants:
        before = _snapshot(admin)
        try:
            report: Report = run(client, cfg, now=now, mode=mode)
        except RedisRefusedError as exc:
            return exc, before, _snapshot(admin)
        assert report.warnings == [], report.warnings
    raise AssertionError("every invocation succeeded without a required permission")


@pytest.mark.parametrize("permission", [*REQUIRED, *KEY_PATTERNS, "+evalsha", "+fcall"])
def test_each_required_permission_is_needed_and_its_absence_pushes_nothing(
    acl_server: RedisServer, admin: redis.Redis, permission: str, mode: str
) -> None:
    """Without any one required permission, an invocation fails clearly and changes nothing.

    After the permission is granted again, the next invocation catches up exactly once.
    """
    if permission in LUA["scripts"] + LUA["functions"] and permission not in LUA[mode]:
        pytest.skip(f"{permission} is not part of the {mode} ACL")
    _set_user(admin, acl_rules(mode, without=permission))
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        refused, before, after = _invoke_until_refused(client, admin, (t0, t1), mode)
    message = str(refused)
    print(f"without {permission}: {message}")
    assert f"127.0.0.1:{acl_server.port}" in message and "refused" in message
    # The server's own refusal (worded by Redis or Valkey), or kiqbeat's script's.
    assert NO_PERMISSIONS.search(message) or any(text in message for text in ("can't run",
                                                                              "may not run"))
    # Applying the document to the store is a step of its own, done before the refusal:
    # only the jobs and the state they move with must be untouched.
    assert _pushing(after) == _pushing(before), "the refused invocation pushed or moved marks"
    _set_user(admin, acl_rules(mode))
    cfg = config(SCHEDULES)
    with connect(_user_url(acl_server)) as client:
        run(client, cfg, now=t0, mode=mode)  # no-op if already seen; first-seen otherwise
        run(client, cfg, now=t1, mode=mode)
    outcome = check(admin, cfg, after=t0, until=t1, scenario=f"ACL without {permission}", runs=3)
    assert_clean(outcome)
    assert len(jobs_in_redis(admin)) == outcome.pushed


# Commands a push call runs after its first write: revoked while a warm engine runs.
WRITTEN_LATE = ("+lpush", "+hset", "+zadd", "+sadd", "+hincrby", "+hdel", "+zrem", "~queue:*")


@pytest.mark.parametrize("permission", WRITTEN_LATE)
def test_a_grant_revoked_while_an_engine_runs_refuses_the_push_call_whole(
    acl_server: RedisServer, admin: redis.Redis, permission: str, mode: str
) -> None:
    """A warm engine has pushed before (docs/store.md "Pre-flight"); a grant revoked
    since (an administrator's ACL SETUSER, a failover to a server with another ACL) refuses
    the next push call before its first write: no mark moves without its job, and once the
    grant is back every tick is pushed once."""
    _set_user(admin, acl_rules(mode))
    t0, t1 = _instants(admin)
    cfg = config(SCHEDULES)
    with connect(_user_url(acl_server)) as client:
        engine = Engine(Settings(redis_functions=mode == "functions"), client=client)
        engine.run(cfg, now=t0)  # first seen: this engine has run a push call
        _set_user(admin, acl_rules(mode, without=permission))
        before = _snapshot(admin)
        with pytest.raises(RedisRefusedError):
            engine.run(cfg, now=t1)
        assert _pushing(_snapshot(admin)) == _pushing(before), "marks moved without their jobs"
        _set_user(admin, acl_rules(mode))
        engine.run(cfg, now=t1)
    outcome = check(admin, cfg, after=t0, until=t1, scenario=f"{permission} revoked", runs=3)
    assert_clean(outcome)
    assert len(jobs_in_redis(admin)) == outcome.pushed > 0


OUTAGE = SCHEDULES.replace("missed_jobs_window: 1d", "missed_jobs_window: 1h")


def test_missed_backfill_trigger_and_history_work_under_the_documented_acl(
    acl_server: RedisServer, admin: redis.Redis, tmp_path: Path, mode: str
) -> None:
    """With exactly the documented ACL, an outage longer than the window is recorded,
    listed, backfilled (every tick once), a schedule is run now and its history read —
    through the API and the commands, with no warning; removal forgets the records."""
    _set_user(admin, acl_rules(mode))
    cfg = config(OUTAGE)
    t0 = minute_floor(redis_now(admin)) - timedelta(hours=5)
    t1 = t0 + timedelta(hours=3)
    with connect(_user_url(acl_server)) as client:
        engine = Engine(Settings(redis_functions=mode == "functions"), client=client)
        reports = [engine.run(cfg, now=t0), engine.run(cfg, now=t1)]
        assert reports[1].missed_recorded > 0
        owed = recorded_ticks(admin, cfg)
        store = engine.store(cfg)
        assert {m.name for m in store.missed()} == {"minutely", "ahead"}
        assert store.backfill(["minutely"]).pushed == 120
        manual = store.trigger("minutely")
        assert [p.kind for p in store.history("minutely")][:2] == ["manual", "backfill"]
    assert [r.warnings for r in reports] == [[], []]
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(OUTAGE)
    flags = ("--config", str(schedule), "--redis-url", _user_url(acl_server),
             "--redis-functions", str(mode == "functions"))
    for command in (("missed",), ("backfill", "--all"), ("trigger", "ahead"),
                    ("history", "ahead"), ("missed", "minutely")):
        done = kiqbeat_cli(*command, *flags)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "warning" not in done.stderr, done.stderr
    assert admin.hlen("kiqbeat:missed") == 0
    ticks = check(admin, cfg, after=t0, until=t1, scenario="backfill under the ACL", runs=2,
                  backfilled=owed)
    assert_clean(ticks)
    assert (ticks.backfilled, ticks.manual) == (len(owed), 2)
    assert manual.jid in {j["jid"] for j in jobs_in_redis(admin)}
    with connect(_user_url(acl_server)) as client:
        Engine(Settings(redis_functions=mode == "functions"), client=client).run(
            config("schedules: {}"), now=t1)
    assert not progress.read_histories(admin, "", ["minutely"])
    assert admin.hlen("kiqbeat:schedules") == 0


def test_skip_pause_and_resume_work_under_the_documented_acl(
    acl_server: RedisServer, admin: redis.Redis, mode: str
) -> None:
    """`schedules skip` (one script, no WATCH/MULTI/EXEC), pause and resume need nothing
    beyond the documented lines; the invocation then takes the skips."""
    _set_user(admin, acl_rules(mode))
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        engine = Engine(Settings(redis_functions=mode == "functions"), client=client)
        engine.run(cfg, now=t0)
        store = engine.store(cfg)
        assert store.skip("minutely", 2) == 2
        assert store.skip("minutely") == 3
        with pytest.raises(ConfigError, match="no schedule"):
            store.skip("nobody")
        with pytest.raises(ConfigError, match="pending"):
            store.skip("minutely", MAX_PENDING_SKIPS)
        assert admin.hget("kiqbeat:skips", "minutely") == "3"
        assert store.pause("ahead", note="acl") and store.resume("ahead")
        report = engine.run(cfg, now=t1)
    assert report.warnings == []
    assert admin.hget("kiqbeat:skips", "minutely") is None  # all three taken
    assert [p.kind for p in store.history("minutely")][-3:] == ["skipped"] * 3


def test_least_privilege_user_decides_and_delivers_an_alert(
    acl_server: RedisServer, admin: redis.Redis, mode: str
) -> None:
    """With exactly the documented ACL, a silent schedule's event is decided and delivered."""
    _set_user(admin, acl_rules(mode))
    cfg = config("""
schedules:
  unread: {cron: "* * * * *", class: U, queue: nobody_reads, expect_success_within: 2m}
""")
    t0 = minute_floor(redis_now(admin)) - timedelta(minutes=8)
    with receiving() as receiver, connect(_user_url(acl_server)) as client:
        engine = Engine(Settings(redis_functions=mode == "functions",
                                 alert_webhook=receiver.url), client=client)
        reports = [engine.run(cfg, now=t0 + timedelta(minutes=m, seconds=5)) for m in range(6)]
        assert [w for r in reports for w in r.warnings] == []
        assert [b["event"] for b in receiver.wait_for(1)] == ["silent"]


@pytest.mark.parametrize("permission", [None, *FOR_OUTCOMES])
def test_the_documented_acl_folds_the_outcomes_and_without_it_kiqbeat_warns_and_pushes(
    acl_server: RedisServer, admin: redis.Redis, permission: str | None, mode: str
) -> None:
    _set_user(admin, acl_rules(mode, without=permission))
    cfg = config(SCHEDULES)
    t0, t1 = _instants(admin)
    with connect(_user_url(acl_server)) as client:
        run(client, cfg, now=t0, mode=mode)
        admin.lpush("kiqbeat:outcomes:inbox", '{"s":"minutely","t":1,"e":"started","a":1}')
        report = run(client, cfg, now=t1, mode=mode)
    assert report.pushed > 0
    if permission is None:
        assert report.outcomes_folded == 1 and report.warnings == []
    else:
        assert report.outcomes_folded == 0
        assert any("outcomes" in w and "not folded" in w for w in report.warnings), (
            report.warnings)


def test_a_held_job_for_a_queue_the_user_may_not_touch_sets_only_its_schedule_aside(
    acl_server: RedisServer, admin: redis.Redis, mode: str
) -> None:
    """A held record written by hand (`kiqbeat:held`, docs/store.md) naming a well-formed
    queue outside the user's key patterns costs only its schedule: the push call's other
    schedules are pushed, once each, and the schedule is set aside, named, with why."""
    rules = [r for r in acl_rules(mode) if r != "~queue:*"] + ["~queue:default", "~queue:plain"]
    _set_user(admin, rules)
    cfg = config("""
schedules:
  slow: {cron: "* * * * *", class: A, overlap: buffer_one}
  plain: {cron: "* * * * *", class: B, queue: plain}
""")
    t0 = minute_floor(redis_now(admin)) - timedelta(minutes=8)
    ticks = [t0 + timedelta(minutes=m) for m in (1, 2)]
    with connect(_user_url(acl_server)) as client:
        run(client, cfg, now=t0, mode=mode)
        admin.hset("kiqbeat:held", "slow",
                   f"{to_ms(ticks[0])} 0 6\nsecret" + '{"class":"A","jid":"x"}')
        reports = [run(client, cfg, now=tick + timedelta(seconds=5), mode=mode)
                   for tick in ticks]
    assert [json.loads(raw)["jid"] for raw in reversed(admin.lrange("queue:plain", 0, -1))] == [
        jid("plain", tick) for tick in ticks]
    assert admin.llen("queue:default") == admin.llen("queue:secret") == 0
    reason = admin.hget("kiqbeat:rejected", "slow")
    assert reason is not None and "'secret'" in reason and "queue:secret" in reason
    assert [w for w in reports[0].warnings if "'slow'" in w and "'secret'" in w] != []
    assert admin.hget("kiqbeat:held", "slow") is not None  # left for the operator
