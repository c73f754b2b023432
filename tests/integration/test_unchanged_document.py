"""A new process running an unchanged document costs what is due (document/fingerprint.py).

Each `Engine(...)` built with its own `Sources()` here is a new process as far as kiqbeat can
tell (no cache survives); a parse is detected by making `kiqbeat.document.parse_config` —
the step every document goes through after its bytes are read — fail, and the neighbour
check by Redis's own count of EXISTS calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

import kiqbeat.document
from kiqbeat.core.schedule import Config
from kiqbeat.document.sources import Sources
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError
from kiqbeat.settings import Settings
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import pushed_jobs

DOCUMENT = """\
missed_jobs_window: 1h
schedules:
  minutely:
    cron: "* * * * *"
    class: MinuteWorker
  report:
    cron: "*/5 * * * *"
    class: ReportWorker
    queue: reports
"""


@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "schedules.yaml"
    path.write_text(DOCUMENT)
    return path


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of every document parsed from now on."""
    seen: list[str] = []
    real = kiqbeat.document.parse_config

    def spy(doc: object, **kwargs: Any) -> Config:
        seen.append(kwargs.get("source", ""))
        return real(doc, **kwargs)

    monkeypatch.setattr(kiqbeat.document, "parse_config", spy)
    return seen


def new_process(client: redis.Redis, path: Path, **settings: Any) -> Engine:
    """An engine with nothing cached, as in a new `kiqbeat run-once` process."""
    return Engine(Settings(config_source=str(path), **settings), client=client,
                  sources=Sources())


def exists_calls(client: redis.Redis) -> int:
    """EXISTS commands Redis has run since the last CONFIG RESETSTAT."""
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_exists", {}).get("calls", 0))


def jids(client: redis.Redis, namespace: str = "") -> list[str]:
    return [job["jid"] for job in pushed_jobs(client, namespace)]


def start(client: redis.Redis) -> datetime:
    """A second past a replayed five minutes well inside the Redis clock's past (later
    `now`s stay behind it; `report` fires at +5 minutes)."""
    minute = minute_floor(redis_now(client))
    return minute - timedelta(minutes=20 + minute.minute % 5) + timedelta(seconds=1)


def applied(client: redis.Redis, path: Path, t0: datetime, **settings: Any) -> None:
    """A first process applies the document at `t0` (every schedule first seen then)."""
    engine = new_process(client, path, **settings)
    report = engine.run(now=t0)
    assert report.documents_applied == 1


def test_a_new_process_runs_an_unchanged_document_without_parsing_it_or_asking_neighbours(
    redis_client: redis.Redis, document: Path, parses: list[str]
) -> None:
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    parses.clear()
    redis_client.config_resetstat()
    report = new_process(redis_client, document).run(now=t0 + timedelta(minutes=5))
    assert parses == []
    assert exists_calls(redis_client) == 0
    assert report.round_trips == 2  # the due read (with the record) and one push
    pushed = jids(redis_client)
    # minutely: t0+1 .. t0+5 min; report: t0+5 min (its first tick after first-seen).
    assert len(pushed) == len(set(pushed)) == 6
    again = new_process(redis_client, document).run(now=t0 + timedelta(minutes=5))
    assert again.pushed == 0
    assert sorted(jids(redis_client)) == sorted(pushed)
    assert parses == []


def test_a_cold_run_once_process_asks_no_neighbours_and_pushes_each_tick_once(
    redis_client: redis.Redis, redis_url: str, document: Path
) -> None:
    t0 = start(redis_client)

    def run_once(at: datetime) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kiqbeat", "run-once", "--config", str(document),
             "--redis-url", redis_url, "--now", at.isoformat(), "--replay", "--json"],
            capture_output=True, text=True, timeout=60, check=True)

    run_once(t0)
    redis_client.config_resetstat()
    second = run_once(t0 + timedelta(minutes=3))
    assert json.loads(second.stdout)["pushed"] == 3
    assert exists_calls(redis_client) == 0
    pushed = jids(redis_client)
    assert len(pushed) == len(set(pushed)) == 3


def test_a_document_changed_by_one_byte_is_parsed_checked_and_applied(
    redis_client: redis.Redis, document: Path, parses: list[str]
) -> None:
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    document.write_text(DOCUMENT.replace("ReportWorker", "ReportWorkeR"))
    parses.clear()
    redis_client.config_resetstat()
    report = new_process(redis_client, document).run(now=t0 + timedelta(minutes=1))
    assert parses == [str(document)]
    assert exists_calls(redis_client) == 4  # sidekiq-scheduler and sidekiq-cron, per name
    assert report.documents_applied == 1
    stored = json.loads(redis_client.hget("kiqbeat:schedules", "report") or "{}")
    assert stored["class"] == "ReportWorkeR"
    # And the next new process runs the changed document without parsing it.
    parses.clear()
    new_process(redis_client, document).run(now=t0 + timedelta(minutes=2))
    assert parses == []


def test_a_changed_document_is_refused_beside_a_sidekiq_cron_job_of_the_same_name(
    redis_client: redis.Redis, document: Path
) -> None:
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    document.write_text(DOCUMENT + "  nightly:\n    cron: '0 3 * * *'\n    class: NightWorker\n")
    redis_client.hset("cron_job:nightly", mapping={"name": "nightly", "cron": "0 3 * * *"})
    with pytest.raises(ConfigError, match="nightly"):
        new_process(redis_client, document).run(now=t0 + timedelta(minutes=1))
    assert redis_client.hget("kiqbeat:schedules", "nightly") is None


@pytest.mark.parametrize("change", ["window", "namespace", "version", "rules"])
def test_an_override_or_another_kiqbeat_version_makes_a_new_process_parse_the_document(
    redis_client: redis.Redis, document: Path, parses: list[str],
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    settings: dict[str, Any] = {}
    if change == "window":
        settings["window_s"] = 1800.0
    elif change == "namespace":
        settings["namespace"] = ""  # the document's own, but now given by the settings
    elif change == "version":
        monkeypatch.setattr("kiqbeat.document.fingerprint.__version__", "99.0.0")
    else:
        monkeypatch.setattr("kiqbeat.document.fingerprint.RULES", 99)
    parses.clear()
    new_process(redis_client, document, **settings).run(now=t0 + timedelta(minutes=1))
    assert parses == [str(document)]
    parses.clear()  # recorded again, for this meaning of the bytes
    new_process(redis_client, document, **settings).run(now=t0 + timedelta(minutes=2))
    assert parses == []


def test_the_record_is_found_under_the_namespace_the_document_sets(
    redis_client: redis.Redis, document: Path, parses: list[str]
) -> None:
    document.write_text('namespace: "exq:"\n' + DOCUMENT)
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    parses.clear()
    report = new_process(redis_client, document).run(now=t0 + timedelta(minutes=2))
    assert parses == []
    assert report.pushed == 2
    assert len(set(jids(redis_client, "exq:"))) == 2


@pytest.mark.parametrize("tamper", [
    lambda c: c.hdel("kiqbeat:documents", *[f for f in c.hkeys("kiqbeat:documents")
                                              if not f.startswith("bytes of ")]),
    lambda c: c.hset("kiqbeat:documents", next(f for f in c.hkeys("kiqbeat:documents")
                                               if f.startswith("bytes of ")), "{not json"),
], ids=["a half-applied change forgot the digest", "a garbled record"])
def test_a_record_the_store_no_longer_backs_makes_a_new_process_parse_and_apply_again(
    redis_client: redis.Redis, document: Path, parses: list[str],
    tamper: Callable[[redis.Redis], Any]
) -> None:
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    tamper(redis_client)
    parses.clear()
    report = new_process(redis_client, document).run(now=t0 + timedelta(minutes=1))
    assert parses == [str(document)]
    assert report.pushed == 1
    assert len(set(jids(redis_client))) == 1


def test_a_document_with_the_recurring_jobs_tab_is_parsed_by_every_new_process(
    redis_client: redis.Redis, document: Path, parses: list[str]
) -> None:
    document.write_text("sidekiq_scheduler_ui: true\n" + DOCUMENT)
    t0 = start(redis_client)
    applied(redis_client, document, t0)
    assert redis_client.hlen("kiqbeat:documents") == 1  # the digest, and no record
    parses.clear()
    new_process(redis_client, document).run(now=t0 + timedelta(minutes=1))
    assert parses == [str(document)]
