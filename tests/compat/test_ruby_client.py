"""The Ruby client library (clients/ruby/) against a real Redis, a real `kiqbeat web` and a
real Sidekiq: what Ruby writes is checked in the store, and what kiqbeat pushes is run by the
worker."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.audit import read_audit
from kiqbeat.core.payload import jid
from kiqbeat.core.schedule import Config
from kiqbeat.document.validate import check_size
from kiqbeat.engine import Engine, run
from kiqbeat.errors import ConfigError
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from kiqbeat.web.app import create_app
from kiqbeat.web.auth import Auth, Token
from tests.support.console import OPERATOR_TOKEN, serve

from .harness import Sidekiq, need

LIB = Path(__file__).resolve().parents[2] / "clients" / "ruby" / "lib"
EVERY_MINUTE = {"cron": "* * * * *", "class": "RecordingWorker", "args": [1]}
INVALID = {"cron": "* * 31 2 *", "class": "RecordingWorker", "quue": "low"}

# Each step's result, or the error it raised ({"error": class, "problems": [...]}).
SCRIPT = r'''
require "kiqbeat"
client = KiqbeatClient.new(ENV.fetch("KIQBEAT_URL"), token: ENV.fetch("KIQBEAT_TOKEN"))
steps = JSON.parse(ARGV.fetch(0))
out = steps.map do |op, *args|
  case op
  when "put" then client.put(args[0], args[1], note: "from ruby").to_s
  when "get" then client.get(args[0])
  when "pause" then client.pause(args[0])
  when "resume" then client.resume(args[0])
  when "trigger" then client.trigger(args[0], args: args[1])
  when "remove" then client.remove(args[0])
  when "names" then client.each_schedule(prefix: args[0]).map { |s| s["name"] }
  end
rescue KiqbeatClient::Error => e
  { "error" => e.class.name, "status" => e.status, "problems" => e.problems }
end
puts JSON.generate(out)
'''


@pytest.fixture
def console_url(sidekiq: Sidekiq) -> Iterator[str]:
    """`kiqbeat web`'s app on the worker's Redis."""
    engine = Engine(Settings(redis_url=sidekiq.url))
    server, thread, url = serve(create_app(
        engine, Auth([Token("ruby", "operator", OPERATOR_TOKEN)])))
    yield url
    server.should_exit = True
    thread.join(timeout=10)
    engine.close()


def ruby(url: str, *steps: list[Any]) -> list[Any]:
    done = subprocess.run([need("ruby"), "-I", str(LIB), "-e", SCRIPT, json.dumps(steps)],
                          env={**os.environ, "KIQBEAT_URL": url, "KIQBEAT_TOKEN": OPERATOR_TOKEN},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result: list[Any] = json.loads(done.stdout)
    return result


def test_ruby_adds_changes_pauses_runs_and_removes_a_schedule_that_sidekiq_runs(
    sidekiq: Sidekiq, console_url: str
) -> None:
    client = redis.Redis.from_url(sidekiq.url)
    store = Store(client)
    name = "ruby/every minute"
    results = ruby(console_url, ["put", name, {**EVERY_MINUTE, "args": [0]}],
                   ["put", name, EVERY_MINUTE], ["pause", name], ["resume", name],
                   ["put", "ruby/bad", INVALID], ["names", "ruby/"],
                   ["trigger", name, [5]], ["get", "nobody"])
    created, replaced, paused, resumed, invalid, names, manual, nobody = results
    assert (created, replaced, paused, resumed) == ("created", "replaced", True, True)
    with pytest.raises(ConfigError) as raised:
        store.check("ruby/bad", INVALID)
    assert invalid == {"error": "KiqbeatClient::ValidationError", "status": 422,
                       "problems": raised.value.problems}
    assert any("did you mean 'queue'" in p for p in invalid["problems"])
    assert names == [name] and nobody is None and store.get("ruby/bad") is None
    row = store.get(name)
    # A pause is its own record (kiqbeat:paused): the definition is never written by it.
    assert row is not None and row.definition == EVERY_MINUTE and row.enabled
    # The manual run and the next tick an invocation pushes: the real worker runs both.
    minute = sidekiq.redis_now().replace(second=0, microsecond=0)
    run(client, Config(schedules=()), now=minute - timedelta(seconds=30))
    report = run(client, Config(schedules=()), now=minute)
    assert report.pushed == 1
    ran = sidekiq.wait_runs({manual["jid"], jid(name, minute)})
    performed = {r["jid"]: r["args"] for r in ran if r["kind"] == "perform"}
    assert performed == {manual["jid"]: [5], jid(name, minute): [1]}
    assert ruby(console_url, ["remove", name], ["remove", name]) == [True, False]
    assert store.get(name) is None
    audit = [(e.actor, e.action, e.note) for e in read_audit(client, "", name)]
    assert audit == [("web:ruby", "remove", ""), ("web:ruby", "trigger", ""),
                     ("web:ruby", "resume", ""), ("web:ruby", "pause", ""),
                     ("web:ruby", "put", "from ruby"), ("web:ruby", "put", "from ruby")]
    client.close()


def test_the_module_docs_store_md_prints_runs_as_printed_in_a_bare_ruby(
    redis_url: str, tmp_path: Path
) -> None:
    """The first printing lacked `require "json"` and `require "zlib"`: a fresh Ruby with
    only the redis gem raised NameError (uninitialized constant KiqbeatStore::JSON)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "store.md").read_text()
    begin, end = "# --- KiqbeatStore: begin ---", "# --- KiqbeatStore: end ---"
    module = tmp_path / "kiqbeat_store.rb"
    module.write_text(doc[doc.index(begin):doc.index(end) + len(end)] + "\n")
    script = ('require "redis"\nrequire_relative "kiqbeat_store"\n'
              'redis = Redis.new(url: ENV.fetch("REDIS_URL"))\n'
              'KiqbeatStore.put(redis, "digest:42", { "class" => "DigestWorker", '
              '"cron" => "0 9 * * *", "args" => [42] }, shards: 4)\n'
              'puts KiqbeatStore.due_key("digest:42", "", 4)\n')
    done = subprocess.run([need("ruby"), "-e", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    with redis.Redis.from_url(redis_url) as client:
        row = Store(client, shards=4).get("digest:42")
    assert row is not None and row.definition == {"class": "DigestWorker", "cron": "0 9 * * *",
                                                  "args": [42]}


def test_ruby_refuses_an_oversized_definition_and_never_reads_one_stored(
    redis_url: str, tmp_path: Path
) -> None:
    script = r'''
require "json"
require "redis"
require "kiqbeat/store"
redis = Redis.new(url: ENV.fetch("REDIS_URL"))
big = { "class" => "W", "cron" => "* * * * *", "args" => ["x" * 70_000] }
out = [["put", "big", big], ["pause", "stored-big"], ["put", "stored-big",
       { "class" => "W", "cron" => "* * * * *" }]].map do |op, name, definition|
  case op
  when "put" then KiqbeatStore.put(redis, name, definition)
  when "pause" then KiqbeatStore.pause(redis, name)
  end
rescue KiqbeatStore::Error => e
  { "error" => e.message }
end
puts JSON.generate(out)
'''
    with redis.Redis.from_url(redis_url) as client:
        client.hset("kiqbeat:schedules", "stored-big", json.dumps(
            {"class": "W", "cron": "* * * * *", "args": ["y" * 1_000_000]}))
        client.config_resetstat()
        done = subprocess.run([need("ruby"), "-I", str(LIB), "-e", script],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "REDIS_URL": redis_url})
        assert done.returncode == 0, done.stderr[-2000:]
        refused, paused, replaced = json.loads(done.stdout)
        stats = client.info("commandstats")
        stored = Store(client).get("stored-big")
        big_stored = client.hexists("kiqbeat:schedules", "big")
    with pytest.raises(ConfigError) as raised:
        check_size("big", json.dumps({"class": "W", "cron": "* * * * *",
                                      "args": ["x" * 70_000]}, separators=(",", ":")).encode())
    assert refused == {"error": raised.value.problems[0].replace("'big'", '"big"')}
    assert not big_stored
    # A pause is a record of its own: the oversized definition is measured, not read.
    assert paused is True
    # the million-byte definition was measured (HSTRLEN), never read (no HGET)
    # (the one HGET is the pause's look at kiqbeat:paused)
    assert stats["cmdstat_hget"]["calls"] == 1 and stats["cmdstat_hstrlen"]["calls"] == 2
    assert replaced is True and stored is not None and stored.definition == {
        "class": "W", "cron": "* * * * *"}


STORE_LIFE = r'''
require "json"
require "redis"
require "kiqbeat/store"
redis = Redis.new(url: ENV.fetch("REDIS_URL"))
out = JSON.parse(ARGV.fetch(0)).map do |op, name, *rest|
  case op
  when "pause"
    ends = rest[1] && Time.at(rest[1])
    KiqbeatStore.pause(redis, name, note: rest[0], until: ends, by: "ruby-ops")
  when "resume" then KiqbeatStore.resume(redis, name)
  when "skip" then KiqbeatStore.skip(redis, name, rest[0])
  end
rescue KiqbeatStore::Error => e
  { "error" => e.message }
end
puts JSON.generate(out)
'''


def store_ruby(redis_url: str, *steps: list[Any]) -> list[Any]:
    done = subprocess.run([need("ruby"), "-I", str(LIB), "-e", STORE_LIFE, json.dumps(steps)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr[-2000:]
    result: list[Any] = json.loads(done.stdout)
    return result


def test_ruby_pauses_with_a_note_and_an_end_resumes_and_skips_as_kiqbeat_reads_them(
    redis_url: str,
) -> None:
    with redis.Redis.from_url(redis_url) as client:
        store = Store(client)
        store.put("digest", EVERY_MINUTE)
        store.put("legacy", {**EVERY_MINUTE, "enabled": False})  # paused the older way
        now_s = client.time()[0]
        results = store_ruby(
            redis_url, ["pause", "digest", "INC-9: mailer down", now_s + 3600],
            ["pause", "digest", "again", None], ["pause", "nobody", "", None],
            ["pause", "digest", "", now_s - 10], ["skip", "digest", 3], ["skip", "digest", 1],
            ["skip", "digest", 0], ["skip", "nobody", 1], ["skip", "digest", 10_000])
        paused = store.get("digest")
        pending = client.hget("kiqbeat:skips", "digest")
        resumed = store_ruby(redis_url, ["resume", "digest"], ["resume", "digest"],
                             ["resume", "legacy"], ["resume", "nobody"])
        after, legacy = store.get("digest"), store.get("legacy")
        record_left = client.hexists("kiqbeat:paused", "digest")
    first, again, nobody, past, three, four, zero, unknown, over = results
    assert (first, again) == (True, False)  # the second replaced the note, already paused
    assert nobody == {"error": 'no schedule "nobody" in the store'}
    assert "not in the future" in past["error"]
    assert (three, four, pending) == (3, 4, b"4")
    assert "must be a whole number from 1 to 10,000" in zero["error"]
    assert unknown == {"error": 'no schedule "nobody" in the store'}
    assert "4 skips pending" in over["error"]
    # kiqbeat reads Ruby's record as its own: paused, by whom, the last note, no end.
    assert paused is not None and paused.pause is not None and not paused.enabled
    assert (paused.pause.note, paused.pause.by, paused.pause.until_ms) == (
        "again", "ruby-ops", None)
    assert paused.definition == EVERY_MINUTE  # the definition untouched
    assert resumed[:3] == [True, False, True]
    assert "no schedule" in resumed[3]["error"]
    assert not record_left and after is not None and after.enabled and after.pause is None
    assert legacy is not None and legacy.enabled  # the older pause ended too
