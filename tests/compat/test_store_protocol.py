"""The schedule store's protocol for other languages (docs/store.md), spoken by real Ruby.

Ruby (tests/compat/ruby/store_writer.rb: Debian's ruby-redis, plain HSET / HDEL / ZADD in
MULTI) adds, changes, pauses and removes schedules and writes broken ones; kiqbeat
invocations with no document (`run(client, Config(schedules=()), now=...)`, or one Engine per
shard) then push what it wrote. Every expectation is an independent fact: the jids found in
the queues against `kiqbeat.fire_times`, and the keys Redis holds. Invocations replay
instants a few hours back (`now=`), so ticks are exact and nothing waits for the clock.
The docs print the Ruby module verbatim and their redis-cli lines are run here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.imported import ImportOptions
from kiqbeat.engine import Engine, run
from kiqbeat.redis.definitions import shard_of
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from kiqbeat.web.app import create_app
from kiqbeat.web.auth import Auth, Token
from tests.support.clock import redis_now
from tests.support.console import READER_TOKEN, serve
from tests.support.engine import load_config_file, pushed_jobs
from tests.support.marks import stored_mark
from tests.support.name_index import indexed
from tests.support.ports import free_port
from tests.support.servers import NO_PERMISSIONS

from .harness import RUBY_DIR, need, wait_for

STORE_WRITER = RUBY_DIR / "store_writer.rb"
STORE_MODULE = Path(__file__).parents[2] / "clients" / "ruby" / "lib" / "kiqbeat" / "store.rb"
DOCS = Path(__file__).parents[2] / "docs"
MODULE_BEGIN, MODULE_END = "# --- KiqbeatStore: begin ---", "# --- KiqbeatStore: end ---"
NO_DOCUMENT = Config(schedules=())


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A bytes client on the empty database, as the engine is given one."""
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def base(client: redis.Redis) -> datetime:
    """An hour boundary three hours back on the Redis clock: invocations replay from here."""
    return redis_now(client).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def ruby(url: str, *commands: Sequence[Any], shards: int = 1) -> list[Any]:
    """Run store_writer.rb's commands against `url`; their results, in order."""
    done = subprocess.run([need("ruby"), str(STORE_WRITER), json.dumps(commands)],
                          env={**os.environ, "REDIS_URL": url, "KIQBEAT_SHARDS": str(shards)},
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.fail(f"store_writer.rb failed ({done.returncode}): {done.stderr[-2000:]}")
    results: list[Any] = json.loads(done.stdout)
    return results


def invoke(client: redis.Redis, now: datetime) -> Report:
    """One cold kiqbeat invocation at `now`, with no document: the store alone."""
    return run(client, NO_DOCUMENT, now=now)


def jids(name: str, cron: str, after: datetime, until: datetime, tz: str = "UTC") -> set[str]:
    """The jids of the ticks of `cron` in (after, until]."""
    return {jid(name, t) for t in fire_times(cron, tz=tz, after=after, until=until)}


def queued(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every job in every queue by jid; fails if a jid is there twice."""
    jobs = pushed_jobs(client)
    by_jid = {job["jid"]: job for job in jobs}
    assert len(by_jid) == len(jobs), "a job was pushed twice"
    return by_jid


def of(client: redis.Redis, name: str) -> set[str]:
    """The jids of `name`'s jobs in the queues."""
    return {j for j, job in queued(client).items() if job["kiqbeat_name"] == name}


def state(client: redis.Redis, name: str, due_key: str = "kiqbeat:due") -> dict[str, Any]:
    """What kiqbeat keeps about `name`: watermark, first-seen, index entry, set-aside reason."""
    pipe = client.pipeline(transaction=False)
    pipe.zscore(due_key, name)
    pipe.hget("kiqbeat:rejected", name)
    score, why = pipe.execute()
    stored = stored_mark(client, name)
    return {"mark": None if stored is None else stored.mark_ms,
            "first_seen": None if stored is None else stored.first_seen_ms,
            "due": score, "rejected": None if why is None else why.decode()}


def text(value: Any) -> str:
    """A reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def named(definition: dict[str, Any], name: str) -> dict[str, Any]:
    """The definition with its name in the job (payload), so each job tells whose it is."""
    return {**definition, "payload": {"kiqbeat_name": name}}


# ---------------------------------------------------------------------------- adding


def test_schedules_added_from_ruby_push_each_tick_once_with_their_fields(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    digest = {"class": "DigestWorker", "cron": "*/10 * * * *", "tz": "Asia/Kolkata",
              "args": [42, {"full": True}], "queue": "mailers", "retry": 3}
    hourly = {"class": "HourlyWorker", "cron": "0 * * * *"}
    assert ruby(redis_url, ["put", "digest:42", named(digest, "digest:42")],
                ["put", "hourly", named(hourly, "hourly")],
                ["put", "rapport:été", named(hourly, "rapport:été")]) == [True] * 3
    stored = client.hgetall("kiqbeat:schedules")
    assert json.loads(stored[b"digest:42"])["cron"] == "*/10 * * * *"
    assert client.zcard("kiqbeat:due") == 3
    assert [client.zscore("kiqbeat:due", n) for n in ("digest:42", "hourly", "rapport:été")] \
        == [0, 0, 0]

    first = invoke(client, base)
    assert (first.new_schedules, first.pushed, first.set_aside) == (3, 0, 0)
    assert state(client, "digest:42")["first_seen"] == to_ms(base)

    until = base + timedelta(minutes=65)
    report = invoke(client, until)
    assert of(client, "digest:42") == jids("digest:42", "*/10 * * * *", base, until,
                                           tz="Asia/Kolkata")
    assert of(client, "hourly") == jids("hourly", "0 * * * *", base, until) != set()
    assert of(client, "rapport:été") == jids("rapport:été", "0 * * * *", base, until)
    assert report.pushed == len(queued(client)) == 6 + 1 + 1
    job = queued(client)[jid("digest:42", base + timedelta(minutes=10))]
    assert (job["class"], job["args"], job["queue"], job["retry"]) == \
        ("DigestWorker", [42, {"full": True}], "mailers", 3)

    again = invoke(client, until)  # a duplicate trigger
    assert (again.pushed, len(queued(client))) == (0, 8)


# ---------------------------------------------------------------------------- changing


def test_a_cron_changed_from_ruby_applies_only_to_ticks_after_the_watermark(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    name = "rb:change"
    ruby(redis_url, ["put", name, named({"class": "W", "cron": "*/10 * * * *"}, name)])
    invoke(client, base)
    invoke(client, base + timedelta(minutes=25))
    mark = base + timedelta(minutes=20)
    assert state(client, name)["mark"] == to_ms(mark)
    before = of(client, name)
    assert before == jids(name, "*/10 * * * *", base, mark)

    assert ruby(redis_url, ["put", name, named({"class": "W", "cron": "*/15 * * * *"}, name)]) \
        == [True]
    assert state(client, name)["due"] == 0  # "plan me"
    until = base + timedelta(minutes=50)
    invoke(client, until)
    after = of(client, name) - before
    # :30 and :45; not :15 (at or below the watermark), nor the old cron's :40 and :50.
    assert after == jids(name, "*/15 * * * *", mark, until)
    assert jid(name, base + timedelta(minutes=15)) not in of(client, name)
    assert jid(name, base + timedelta(minutes=40)) not in of(client, name)


def test_a_schedule_paused_from_ruby_keeps_its_watermark_moving(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    name, cron = "rb:paused", "*/5 * * * *"
    ruby(redis_url, ["put", name, named({"class": "W", "cron": cron}, name)])
    invoke(client, base)
    invoke(client, base + timedelta(minutes=10))
    assert ruby(redis_url, ["pause", name], ["pause", name]) == [True, False]

    paused = invoke(client, base + timedelta(minutes=20))
    assert (paused.pushed, paused.skipped) == (0, 2)
    assert state(client, name)["mark"] == to_ms(base + timedelta(minutes=20))

    assert ruby(redis_url, ["resume", name]) == [True]
    invoke(client, base + timedelta(minutes=30))
    # Nothing from the pause (:15, :20) once resumed.
    assert of(client, name) == (jids(name, cron, base, base + timedelta(minutes=10))
                                | jids(name, cron, base + timedelta(minutes=20),
                                       base + timedelta(minutes=30)))


# ---------------------------------------------------------------------------- removing


def test_a_schedule_removed_from_ruby_is_forgotten_and_never_pushed_again(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    cron = "*/5 * * * *"
    ruby(redis_url, ["put", "rb:gone", named({"class": "W", "cron": cron}, "rb:gone")],
         ["put", "rb:kept", named({"class": "W", "cron": cron}, "rb:kept")])
    invoke(client, base)
    invoke(client, base + timedelta(minutes=10))
    assert of(client, "rb:gone") == jids("rb:gone", cron, base, base + timedelta(minutes=10))

    assert ruby(redis_url, ["remove", "rb:gone"], ["remove", "rb:gone"]) == [True, False]
    assert state(client, "rb:gone")["due"] == 0  # the index entry says "plan me"
    report = invoke(client, base + timedelta(minutes=30))
    assert (report.pushed, report.set_aside, report.warnings) == (4, 0, [])
    assert state(client, "rb:gone") == {"mark": None, "first_seen": None, "due": None,
                                        "rejected": None}
    assert of(client, "rb:gone") == jids("rb:gone", cron, base, base + timedelta(minutes=10))
    assert of(client, "rb:kept") == jids("rb:kept", cron, base, base + timedelta(minutes=30))

    # Added again, it starts afresh: first seen at the next invocation, nothing before.
    ruby(redis_url, ["put", "rb:gone", named({"class": "W", "cron": cron}, "rb:gone")])
    assert invoke(client, base + timedelta(minutes=40)).new_schedules == 1
    assert state(client, "rb:gone")["first_seen"] == to_ms(base + timedelta(minutes=40))
    invoke(client, base + timedelta(minutes=50))
    assert of(client, "rb:gone") == (
        jids("rb:gone", cron, base, base + timedelta(minutes=10))
        | jids("rb:gone", cron, base + timedelta(minutes=40), base + timedelta(minutes=50)))


# ---------------------------------------------------------------------------- invalid


def test_an_invalid_definition_from_ruby_is_set_aside_and_runs_once_fixed(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    cron = "*/5 * * * *"
    ruby(redis_url, ["put", "rb:ok", named({"class": "W", "cron": cron}, "rb:ok")],
         ["put", "rb:typo", named({"class": "W", "cron": cron, "quue": "low"}, "rb:typo")],
         ["raw", "rb:junk", "{not json"])

    first = invoke(client, base)  # does not raise: the others go on
    assert (first.new_schedules, first.set_aside) == (1, 2)
    assert any("'rb:typo'" in w and "quue" in w for w in first.warnings)
    assert any("'rb:junk'" in w and "not JSON" in w for w in first.warnings)
    typo = state(client, "rb:typo")
    assert typo["due"] is None and "'quue'" in typo["rejected"] and "queue" in typo["rejected"]
    assert "not JSON" in state(client, "rb:junk")["rejected"]

    later = invoke(client, base + timedelta(minutes=10))
    assert (later.pushed, later.set_aside) == (2, 0)
    assert of(client, "rb:typo") == set()

    fixed = named({"class": "W", "cron": cron, "queue": "low"}, "rb:typo")
    assert ruby(redis_url, ["put", "rb:typo", fixed]) == [True]
    assert state(client, "rb:typo")["rejected"] is None
    assert state(client, "rb:typo")["due"] == 0
    assert invoke(client, base + timedelta(minutes=20)).new_schedules == 1
    invoke(client, base + timedelta(minutes=30))
    assert of(client, "rb:typo") == jids("rb:typo", cron, base + timedelta(minutes=20),
                                         base + timedelta(minutes=30))
    assert {queued(client)[j]["queue"] for j in of(client, "rb:typo")} == {"low"}
    assert client.hkeys("kiqbeat:rejected") == [b"rb:junk"]


def test_a_running_schedule_broken_from_ruby_catches_up_once_fixed(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    name, cron = "rb:broken", "*/5 * * * *"
    ruby(redis_url, ["put", name, named({"class": "W", "cron": cron}, name)])
    invoke(client, base)
    invoke(client, base + timedelta(minutes=10))
    ruby(redis_url, ["put", name, named({"class": "W", "cron": "*/5 * * *"}, name)])
    assert invoke(client, base + timedelta(minutes=20)).set_aside == 1
    assert state(client, name)["mark"] == to_ms(base + timedelta(minutes=10))  # kept

    ruby(redis_url, ["put", name, named({"class": "W", "cron": cron}, name)])
    invoke(client, base + timedelta(minutes=30))
    # The ticks of the broken spell (:15 to :30) are pushed, as after downtime.
    assert of(client, name) == jids(name, cron, base, base + timedelta(minutes=30))


# ---------------------------------------------------------------------------- ownership


def test_ruby_leaves_a_documents_schedule_alone_but_may_pause_it(
    client: redis.Redis, redis_url: str, base: datetime, tmp_path: Path,
) -> None:
    path = tmp_path / "schedules.yml"
    path.write_text('schedules:\n  nightly: {cron: "*/5 * * * *", class: NightlyWorker}\n')
    document = load_config_file(path)
    run(client, document, now=base)
    assert json.loads(client.hget("kiqbeat:schedules", "nightly") or b"")["source"] == str(path)

    results = ruby(redis_url, ["put", "nightly", {"class": "Other", "cron": "* * * * *"}],
                   ["remove", "nightly"], ["pause", "nightly"])
    assert results[:2] == [{"error": f'schedule "nightly" belongs to {path}; change it there'}] * 2
    assert results[2] is True
    paused = run(client, document, now=base + timedelta(minutes=10))
    assert (paused.pushed, paused.skipped) == (0, 2)
    assert json.loads(client.hget("kiqbeat:schedules", "nightly") or b"")["source"] == str(path)


# ---------------------------------------------------------------------------- shards


def test_ruby_writes_each_name_to_its_shard_and_each_shard_pushes_only_its_own(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    count, cron = 3, "*/5 * * * *"
    names = [f"rb:shard:{k}" for k in range(9)] + ["rapport:été", "日報"]
    shard = {n: zlib.crc32(n.encode()) % count for n in names}
    assert set(shard.values()) == set(range(count))  # every shard has work
    keys = ruby(redis_url, *[["due_key", n] for n in names], shards=count)
    assert keys == [f"kiqbeat:due:{shard[n]}/{count}" for n in names]
    assert all(shard_of(n, count) == shard[n] for n in names)  # kiqbeat agrees

    # A sharded deployment records its count once, deliberately (docs/deploy.md, "Shards").
    Store(client, shards=count).reindex()
    ruby(redis_url, *[["put", n, named({"class": "W", "cron": cron}, n)] for n in names],
         shards=count)
    assert not client.exists("kiqbeat:due")
    engines = [Engine(Settings(shard=(i, count)), client=client) for i in range(count)]
    for i, engine in enumerate(engines):
        report = engine.run(now=base)
        assert report.new_schedules == sum(1 for n in names if shard[n] == i)

    until = base + timedelta(minutes=10)
    for i, engine in enumerate(engines):
        report = engine.run(now=until)
        assert {j.schedule for j in report.jobs} == {n for n in names if shard[n] == i}
    for n in names:
        assert of(client, n) == jids(n, cron, base, until)

    # Shard 0 invoked again touches no other shard's schedule.
    others = {n: state(client, n)["mark"] for n in names if shard[n] != 0}
    engines[0].run(now=base + timedelta(minutes=20))
    assert {n: state(client, n)["mark"] for n in others} == others


# ---------------------------------------------------------------------------- sidekiq-cron

MAKE_CRON_JOBS = """
require "sidekiq"
require "sidekiq-cron"
Sidekiq.logger.level = Logger::WARN
jobs = [
  {name: "cron_digest", cron: "*/5 * * * *", class: "DigestWorker", args: [42, {"a" => 1}],
   queue: "mailers"},
  {name: "cron_paused", cron: "*/5 * * * *", class: "PausedWorker"},
  {name: "cron_dated", cron: "*/10 * * * * Europe/Paris", class: "DatedWorker",
   date_as_argument: true},
  {name: "cron_words", cron: "every 5 minutes", class: "WordsWorker"},
  {name: "cron_fortnight", cron: "0 9 * * sun%2", class: "FortnightWorker"},
]
jobs.each { |job| Sidekiq::Cron::Job.create(job) || abort("refused: #{job}") }
Sidekiq::Cron::Job.find("cron_paused").disable!
"""
CRON_NAMES = ["cron_digest", "cron_paused", "cron_dated", "cron_words", "cron_fortnight"]


def sidekiq_cron(url: str, script: str) -> str:
    done = subprocess.run([need("ruby"), "-e", script], env={**os.environ, "REDIS_URL": url},
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.fail(f"sidekiq-cron script failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def test_sidekiq_cron_jobs_move_to_the_store_and_leave_sidekiq_cron(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    sidekiq_cron(redis_url, MAKE_CRON_JOBS)
    # kiqbeat's own fields chosen for the move are written into every definition.
    command = json.dumps([["migrate_sidekiq_cron", "Europe/Berlin", 60,
                           {"dst": "fugit"}]])
    with subprocess.Popen([need("ruby"), str(STORE_WRITER), command],
                          env={**os.environ, "REDIS_URL": redis_url},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as migrate:
        wait_for("the migration to write every definition",
                 lambda: client.hlen("kiqbeat:schedules") == len(CRON_NAMES))
        # Until kiqbeat has planned them, sidekiq-cron keeps every job.
        assert client.scard("cron_jobs") == len(CRON_NAMES)
        first = invoke(client, base)
        out, err = migrate.communicate(timeout=60)
    assert migrate.returncode == 0, err[-2000:]
    assert (first.new_schedules, first.set_aside) == (4, 1)
    result = json.loads(out)[0]
    # A phrase is read where a cron is (kept as written); fugit's '%' is refused.
    assert sorted(result["moved"]) == ["cron_dated", "cron_digest", "cron_paused", "cron_words"]
    assert list(result["refused"]) == ["cron_fortnight"]
    assert "fugit's '%' (every Nth week" in result["refused"]["cron_fortnight"]
    # Without a client, fugit's readings were not asked, and the result says so.
    assert (result["warnings"], result["warnings_checked"]) == ({}, False)

    # sidekiq-cron's own API sees only the refused job; nothing of the others is left.
    assert sidekiq_cron(redis_url, 'require "sidekiq-cron"; '
                                   'print Sidekiq::Cron::Job.all.map(&:name).join(",")') \
        == "cron_fortnight"
    assert not client.keys("cron_job:cron_d*") and not client.keys("cron_job:cron_paused*")
    stored = {text(n): json.loads(d) for n, d in client.hgetall("kiqbeat:schedules").items()}
    assert stored == {
        "cron_digest": {"cron": "*/5 * * * *", "tz": "Europe/Berlin", "class": "DigestWorker",
                        "args": [42, {"a": 1}], "queue": "mailers", "dst": "fugit"},
        "cron_paused": {"cron": "*/5 * * * *", "tz": "Europe/Berlin", "class": "PausedWorker",
                        "args": [], "queue": "default", "enabled": False,
                        "dst": "fugit"},
        "cron_dated": {"cron": "*/10 * * * * Europe/Paris", "tz": "Europe/Berlin",
                       "class": "DatedWorker", "args": [], "queue": "default",
                       "include_metadata": True, "dst": "fugit"},
        "cron_words": {"cron": "every 5 minutes", "tz": "Europe/Berlin", "class": "WordsWorker",
                       "args": [], "queue": "default", "dst": "fugit"},
    }

    until = base + timedelta(minutes=20)
    report = invoke(client, until)
    jobs = queued(client)
    assert {j.schedule for j in report.jobs} == {"cron_digest", "cron_dated", "cron_words"}
    assert {j.jid for j in report.jobs if j.schedule == "cron_words"} \
        == jids("cron_words", "*/5 * * * *", base, until)
    assert {j.jid for j in report.jobs if j.schedule == "cron_digest"} \
        == jids("cron_digest", "*/5 * * * *", base, until) \
        == {j for j, job in jobs.items() if job["class"] == "DigestWorker"}
    # date_as_argument became include_metadata: the tick as the last argument.
    ticks = fire_times("*/10 * * * * Europe/Paris", after=base, until=until)
    assert {j: job["args"] for j, job in jobs.items() if job["class"] == "DatedWorker"} \
        == {jid("cron_dated", t): [{"scheduled_at": t.timestamp()}] for t in ticks}


MAKE_NEW_YORK_JOBS = """
require "sidekiq"
require "sidekiq-cron"
Sidekiq.logger.level = Logger::WARN
jobs = [{name: "weekdays", cron: "0 0 */2 * 1-5", class: "WeekdayWorker"},
        {name: "nightly", cron: "30 2 * * *", class: "NightlyWorker", args: [1]}]
jobs.each { |job| Sidekiq::Cron::Job.create(job) || abort("refused: #{job}") }
"""
NEW_YORK_FILE = """
weekdays: {cron: "0 0 */2 * 1-5", class: WeekdayWorker}
nightly: {cron: "30 2 * * *", class: NightlyWorker, args: [1]}
"""


def migration_snippet() -> str:
    """The Ruby block of docs/migration.md's "Moving the jobs sidekiq-cron holds now"."""
    doc = (DOCS / "migration.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Moving the jobs sidekiq-cron holds now"):]
    start = section.index("```ruby\n") + len("```ruby\n")
    return section[start:section.index("\n```", start)]


def test_the_printed_migration_warns_where_fugit_read_a_sidekiq_cron_job_differently(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    sidekiq_cron(redis_url, MAKE_NEW_YORK_JOBS)
    engine = Engine(Settings(redis_url=redis_url))
    server, thread, url = serve(create_app(engine, Auth([Token("ruby", "reader",
                                                               READER_TOKEN)])))
    try:
        with subprocess.Popen([need("ruby"), "-I", str(STORE_MODULE.parents[1]), "-e",
                               migration_snippet()],
                              env={**os.environ, "REDIS_URL": redis_url, "KIQBEAT_URL": url,
                                   "KIQBEAT_TOKEN": READER_TOKEN},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as migrate:
            wait_for("the migration to write both definitions (or stop)",
                     lambda: client.hlen("kiqbeat:schedules") == 2
                     or migrate.poll() is not None, timeout_s=60)
            if migrate.poll() is None:
                invoke(client, base)
            out, err = migrate.communicate(timeout=60)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()
    assert migrate.returncode == 0, err[-2000:]
    result = json.loads(out)
    assert sorted(result["moved"]) == ["nightly", "weekdays"] and result["refused"] == {}
    assert result["warnings_checked"] is True
    # The same warnings, per job, as kiqbeat validate gives on a sidekiq-cron file of them.
    read = load_config_text(NEW_YORK_FILE, options=ImportOptions(
        format="sidekiq-cron", app_zone="America/New_York"), now=datetime.now(UTC))
    for name in ("weekdays", "nightly"):
        own = [w for w in read.warnings if f"schedule '{name}'" in w]
        assert own and [w for w in result["warnings"][name] if f"schedule '{name}'" in w] == own
    assert any("fugit" in w and "'*/2'" in w and "either one" in w
               for w in result["warnings"]["weekdays"])
    assert any("daylight saving" in w and "America/New_York" in w
               and "sidekiq-cron (fugit) does not fire it" in w
               for w in result["warnings"]["nightly"])
    assert any("without a zone" in w and "America/New_York" in w
               for w in result["warnings"]["nightly"])
    assert client.scard("cron_jobs") == 0


def test_the_printed_migration_moves_nothing_when_the_console_cannot_be_asked(
    client: redis.Redis, redis_url: str,
) -> None:
    sidekiq_cron(redis_url, MAKE_NEW_YORK_JOBS)
    done = subprocess.run([need("ruby"), "-I", str(STORE_MODULE.parents[1]), "-e",
                           migration_snippet()],
                          env={**os.environ, "REDIS_URL": redis_url,
                               "KIQBEAT_URL": f"http://127.0.0.1:{free_port()}",
                               "KIQBEAT_TOKEN": READER_TOKEN},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "Connection refused" in done.stderr, done.stderr[-2000:]
    assert not client.exists("kiqbeat:schedules")
    assert sidekiq_cron(redis_url, 'require "sidekiq-cron"; '
                                   'print Sidekiq::Cron::Job.all.map(&:name).sort.join(",")') \
        == "nightly,weekdays"


# ---------------------------------------------------------------------------- the docs


def ruby_module() -> str:
    source = STORE_MODULE.read_text(encoding="utf-8")
    return source[source.index(MODULE_BEGIN):source.index(MODULE_END) + len(MODULE_END)]


def test_docs_print_the_ruby_module_the_tests_run() -> None:
    module = ruby_module()
    assert "module KiqbeatStore" in module
    assert module in (DOCS / "store.md").read_text(encoding="utf-8")


def test_the_redis_cli_lines_of_docs_store_md_add_a_schedule_kiqbeat_runs(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    doc = (DOCS / "store.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(# redis-cli: add.*?)```", doc, re.S)
    assert block, "docs/store.md has no ```sh block starting '# redis-cli: add'"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)],
                          env={**os.environ, "REDIS_URL": redis_url},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    names = [text(n) for n in client.hkeys("kiqbeat:schedules")]
    assert names, "the block wrote no schedule"
    first = invoke(client, base)
    assert (first.new_schedules, first.set_aside) == (len(names), 0), first.warnings


def test_the_writer_acl_of_docs_store_md_lets_ruby_add_pause_and_remove(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    doc = (DOCS / "store.md").read_text(encoding="utf-8")
    line = re.search(r"^ACL SETUSER kiqbeat-writer .*$", doc, re.M)
    assert line, "docs/store.md has no ACL SETUSER kiqbeat-writer line"
    password = "writer-secret-4f1c"
    done = subprocess.run([need("redis-cli"), "-u", redis_url,
                           *line.group(0).replace("PASSWORD", password).split()],
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "OK"), done.stderr
    try:
        url = redis_url.replace("redis://", f"redis://kiqbeat-writer:{password}@", 1)
        definition = named({"class": "W", "cron": "*/5 * * * *"}, "rb:acl")
        assert ruby(url, ["put", "rb:acl", definition], ["pause", "rb:acl"],
                    ["resume", "rb:acl"], ["put", "rb:acl2", definition],
                    ["remove", "rb:acl2"], ["skip", "rb:acl", 2]) == [True] * 5 + [2]
        assert client.zscore("kiqbeat:due", "rb:acl") == 0
        assert invoke(client, base).new_schedules == 1
        with redis.Redis.from_url(url) as writer, \
                pytest.raises(redis.ResponseError, match=NO_PERMISSIONS):
            writer.hset("kiqbeat:watermarks", "rb:acl", "0")  # kiqbeat's own: refused
    finally:
        client.acl_deluser("kiqbeat-writer")


# ---------------------------------------------------------------------------- expectations


def test_expectations_written_from_ruby_are_judged_as_a_documents_are(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    unread = {"class": "UnreadWorker", "cron": "* * * * *", "queue": "nobody_reads",
              "expect_success_within": "3m", "alert_after_failures": 2}
    wrong = {"class": "W", "cron": "* * * * *", "alert_after_failures": 0}
    assert ruby(redis_url, ["put", "unread", unread], ["put", "wrong", wrong]) == [True] * 2
    invoke(client, base)
    for minute in range(1, 6):
        invoke(client, base + timedelta(minutes=minute))
    assert text(client.hget("kiqbeat:expectations", "unread")).endswith(" 180000 2 0")
    events = [{text(k): text(v) for k, v in f.items()}
              for _i, f in client.xrange("kiqbeat:alerts:outbox")]
    assert [(e["s"], e["e"]) for e in events] == [("unread", "silent")]
    assert events[0]["t"] == str(to_ms(base + timedelta(minutes=1)))
    why = state(client, "wrong")["rejected"]
    assert why is not None and "alert_after_failures" in why and "from 1 to 1,000" in why


# ---------------------------------------------------------------------------- the name index


def test_the_console_lists_a_schedule_from_every_writer_without_reading_the_store(
    client: redis.Redis, redis_url: str, base: datetime,
) -> None:
    """Every writer keeps the console's name index (docs/store.md "The name index"): the
    Python API, the CLI, a Lambda event, a document, an import, the console's API and the
    Ruby module; the console then lists each by prefix, and nothing built the index."""
    from kiqbeat.entrypoints.outcomes import execute
    from kiqbeat.entrypoints.requests import from_event, from_fields
    from kiqbeat.redis.names import NameIndex, fold
    from kiqbeat.web.console import Console
    from tests.support.cli import kiqbeat_cli

    plain = {"class": "W", "cron": "*/10 * * * *"}
    Store(client).put("by/python", plain)
    done = kiqbeat_cli("schedules", "put", "by/cli", "--json-definition", json.dumps(plain),
                       "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    engine = Engine(Settings(redis_url=redis_url))
    try:
        execute(from_event({"kiqbeat": "put", "name": "by/lambda", "definition": plain}),
                engine, deadline=time.monotonic() + 30)
        engine.run(load_config_text(json.dumps({"schedules": {"by/document": plain}}),
                                    source="file:///etc/kiqbeat/schedules.yaml"), now=base)
        Store(client).import_definitions([("by/import", plain)])
        console = Console(engine)
        console.execute("alice", from_fields("put", {"name": "by/http", "definition": plain}))
        ruby(redis_url, ["put", "by/ruby", named(plain, "by/ruby")])
        listed = [r.status.name for r in console.page(prefix="by/").rows]
        filtered = [r.status.name for r in console.page(prefix="by/", source="api").rows]
    finally:
        engine.close()
    writers = ["cli", "document", "http", "import", "lambda", "python", "ruby"]
    assert listed == [f"by/{w}" for w in writers]
    assert filtered == [f"by/{w}" for w in writers if w != "document"]
    assert not NameIndex(client, "").built()  # no build ran: each writer kept it
    ruby(redis_url, ["remove", "by/ruby"])
    assert client.zscore("kiqbeat:names", "by/ruby") == 0  # marked for the index
    fold(client, "")  # as the console's start does
    assert b"by/ruby" not in indexed(client) and b"by/python" in indexed(client)
