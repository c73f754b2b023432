"""kiqbeat beside sidekiq-cron and sidekiq-scheduler: what it never writes, and what it refuses.

`found` below runs the engine, whose first round trip reads what the check needs
(HMGET/HGETALL `schedules`, EXISTS per name), against keys left
the way the real tools leave them: sidekiq-cron's by sidekiq-cron itself (Debian's
ruby-sidekiq-cron), sidekiq-scheduler's with the same commands its RedisManager sends.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis

from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys
from kiqbeat.redis import scheduler_ui as ui
from tests.support.engine import load_config_file
from tests.support.tools import missing

from .harness import Sidekiq

FIXTURES = Path(__file__).parent / "fixtures"


def found(client: redis.Redis, config: Config) -> list[str]:
    """What the engine refuses to run beside: its ConfigError's problems, or [] when it ran.

    A fresh client each time: the engine checks once per client and config.
    """
    kwargs = client.connection_pool.connection_kwargs
    fresh = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs.get("db", 0))
    try:
        run(fresh, config)
    except ConfigError as exc:
        assert exc.source == "beside other schedulers"
        return exc.problems
    finally:
        fresh.close()
    return []


def sidekiq_scheduler_pushed(client: redis.Redis, name: str, at_s: int) -> None:
    """What sidekiq-scheduler's register_job_instance sends for each push it makes."""
    key = f"sidekiq-scheduler:pushed:{name}"
    client.zadd(key, {str(at_s): at_s})
    client.expire(key, 24 * 60 * 60)


def ruby_cron(sidekiq: Sidekiq, code: str) -> str:
    done = subprocess.run(["ruby", "-e", 'require "sidekiq"; require "sidekiq/cron/job"; ' + code],
                          env=sidekiq.env(), capture_output=True, text=True, timeout=30,
                          check=False)
    if "cannot load such file -- sidekiq/cron" in done.stderr:
        missing("ruby-sidekiq-cron is not installed (scripts/setup installs it)")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_kiqbeat_never_writes_sidekiq_cron_keys(redis_client: redis.Redis) -> None:
    # A sidekiq-cron file, converted, run twice a minute apart: jobs pushed, nothing else.
    config = load_config_file(FIXTURES / "sidekiq_cron_list.yml")
    seconds, _ = redis_client.time()
    now = datetime.fromtimestamp(seconds, tz=UTC)
    run(redis_client, config, now=now - timedelta(seconds=90))
    report = run(redis_client, config, now=now)
    assert report.pushed >= 1
    keys = sorted(redis_client.keys("*"))
    assert not [k for k in keys if k.startswith("cron_job")], keys
    assert {k for k in keys if not k.startswith("kiqbeat:")} <= {
        "queues", "queue:critical", "queue:default", "schedule"}


def test_sidekiq_cron_sees_no_job_of_kiqbeats(sidekiq: Sidekiq) -> None:
    config = load_config_file(FIXTURES / "sidekiq_cron.yml")
    sidekiq.push_one_minute((FIXTURES / "sidekiq_cron.yml").read_text())
    # sidekiq-cron's poller enqueues what Sidekiq::Cron::Job.all returns: nothing of ours.
    names = ruby_cron(sidekiq, "puts Sidekiq::Cron::Job.all.map(&:name).to_json")
    assert not set(json.loads(names)) & {s.name for s in config.schedules}
    assert found(sidekiq.client, config) == []


def test_a_job_sidekiq_cron_also_schedules_is_refused(sidekiq: Sidekiq) -> None:
    ruby_cron(sidekiq, 'Sidekiq::Cron::Job.create(name: "coexist_cron_dup", cron: "* * * * *", '
                       'class: "RecordingWorker", queue: "cron_parked") or abort("not created")')
    try:
        config = load_config_text("""
schedules:
  coexist_cron_dup: {cron: "* * * * *", class: RecordingWorker}
  coexist_cron_other: {cron: "* * * * *", class: RecordingWorker}
""")
        (problem,) = found(sidekiq.client, config)
        assert "'coexist_cron_dup'" in problem and "sidekiq-cron" in problem
        assert "Sidekiq::Cron::Job.destroy" in problem
    finally:
        ruby_cron(sidekiq, 'Sidekiq::Cron::Job.destroy("coexist_cron_dup")')


def test_beside_a_live_sidekiq_scheduler_only_shared_names_are_refused(
    redis_client: redis.Redis,
) -> None:
    config = load_config_text("""
schedules:
  report: {cron: "0 * * * *", class: ReportWorker}
  digest: {cron: "0 8 * * *", class: DigestWorker}
""")
    # sidekiq-scheduler runs its own jobs under other names: safe.
    redis_client.hset("schedules", "cleanup", json.dumps({"cron": "0 3 * * *",
                                                          "class": "CleanupWorker"}))
    redis_client.zadd("schedules_changed", {"cleanup": 1.0})
    sidekiq_scheduler_pushed(redis_client, "cleanup", 1_790_000_000)
    assert found(redis_client, config) == []

    # It also has `report` in its schedule, and pushed `digest` today: both refused.
    redis_client.hset("schedules", "report", json.dumps({"cron": "0 * * * *",
                                                         "class": "ReportWorker"}))
    sidekiq_scheduler_pushed(redis_client, "digest", 1_790_000_000)
    problems = found(redis_client, config)
    assert len(problems) == 2
    assert "'report'" in problems[0] and "HDEL schedules report" in problems[0]
    assert "'digest'" in problems[1] and "DEL sidekiq-scheduler:pushed:digest" in problems[1]
    assert redis_client.ttl("sidekiq-scheduler:pushed:digest") > 0


def test_the_tab_mode_needs_the_schedules_hash_to_itself(redis_client: redis.Redis) -> None:
    config = load_config_text("""
sidekiq_scheduler_ui: true
schedules:
  report: {cron: "0 * * * *", class: ReportWorker}
""")
    assert found(redis_client, config) == []  # the engine writes its entries for the tab
    assert "report" in redis_client.hgetall(keys.schedules_key(""))
    # Its own entries, even of schedules since removed, are not someone else's.
    redis_client.hset("schedules", "old_kiqbeat_job", json.dumps({"class": "X", "kiqbeat": True}))
    assert found(redis_client, config) == []
    redis_client.hset("schedules", "cleanup", json.dumps({"cron": "0 3 * * *",
                                                          "class": "CleanupWorker"}))
    (problem,) = found(redis_client, config)
    assert "sidekiq_scheduler_ui" in problem and "'cleanup'" in problem
    assert "DEL schedules schedules_changed" in problem


def exq_scheduler_persisted(client: redis.Redis, name: str, spec: dict[str, object]) -> None:
    """What exq-scheduler's Storage.persist_schedule writes at start for each configured job
    (activesphere/exq-scheduler lib/exq_scheduler/storage.ex): HSET `<exq ns>:schedules` and
    `<exq ns>:sidekiq-scheduler:states`, the keys sidekiq-scheduler's tab reads."""
    client.hset("exq:schedules", name, json.dumps(spec | {"name": name, "enabled": True,
                                                          "include_metadata": False}))
    client.hset("exq:sidekiq-scheduler:states", name, json.dumps({"enabled": True}))


def test_a_job_exq_scheduler_also_runs_is_refused_naming_exq_scheduler(
    redis_client: redis.Redis,
) -> None:
    config = load_config_text("""
namespace: "exq:"
schedules:
  report: {cron: "0 * * * *", class: MyApp.ReportWorker}
  digest: {cron: "0 8 * * *", class: MyApp.DigestWorker}
""")
    exq_scheduler_persisted(redis_client, "cleanup", {"cron": "0 3 * * *",
                                                      "class": "MyApp.CleanupWorker"})
    assert found(redis_client, config) == []  # its other jobs are no concern
    exq_scheduler_persisted(redis_client, "report", {"cron": "0 * * * *",
                                                     "class": "MyApp.ReportWorker"})
    (problem,) = found(redis_client, config)
    assert "'report'" in problem and "exq-scheduler" in problem
    assert "sidekiq-scheduler" not in problem.replace("sidekiq-scheduler:", "")
    assert "HDEL exq:schedules report" in problem


def test_the_tab_mode_beside_exq_scheduler_names_exq_scheduler(redis_client: redis.Redis) -> None:
    config = load_config_text("""
namespace: "exq:"
sidekiq_scheduler_ui: true
schedules:
  report: {cron: "0 * * * *", class: MyApp.ReportWorker}
""")
    exq_scheduler_persisted(redis_client, "cleanup", {"cron": "0 3 * * *",
                                                      "class": "MyApp.CleanupWorker"})
    (problem,) = found(redis_client, config)
    assert "'cleanup'" in problem and "exq-scheduler" in problem
    assert "sidekiq-scheduler" not in problem.replace("sidekiq-scheduler:", "")
    assert "DEL exq:schedules" in problem and "schedules_changed" not in problem


def test_outside_exqs_namespace_the_refusal_still_names_sidekiq_scheduler() -> None:
    config = load_config_text("""
namespace: "myapp:"
schedules:
  report: {cron: "0 * * * *", class: ReportWorker}
""")
    (problem,) = ui.coexistence_problems(
        config, specs={"report": json.dumps({"class": "ReportWorker"})}, pushed_recently={},
        cron_jobs={})
    assert "sidekiq-scheduler's schedule" in problem and "exq-scheduler" not in problem
    assert "HDEL myapp:schedules report" in problem
