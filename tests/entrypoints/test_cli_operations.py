"""`kiqbeat missed`, `backfill`, `trigger`, `history` (and `status NAME`): the real commands
against a real Redis after a real outage, checked against Redis itself and against fire
times counted independently (`fire_times`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.core.cron import fire_times
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import to_ms
from tests.support.cli import Kiqbeat, run_on_a_terminal
from tests.support.clock import redis_now

WINDOW = timedelta(hours=1)
CRONS = {"report": "*/10 * * * *", "digest": "0 * * * *"}
QUEUES = {"report": "reports", "digest": "default"}
DOCUMENT = f"""
missed_jobs_window: 1h
schedules:
  report: {{cron: "{CRONS['report']}", class: ReportWorker, queue: reports, args: [1]}}
  digest: {{cron: "{CRONS['digest']}", class: DigestWorker}}
"""


@pytest.fixture
def kiqbeat(kiqbeat: Kiqbeat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Kiqbeat:
    """`kiqbeat ARGS...` on the test's Redis, with DOCUMENT as KIQBEAT_CONFIG."""
    path = tmp_path / "schedules.yaml"
    path.write_text(DOCUMENT)
    monkeypatch.setenv("KIQBEAT_CONFIG", str(path))
    return kiqbeat


@dataclass(frozen=True)
class Outage:
    """Invocations at `start` and (five hours later) at `end`, none between."""

    start: datetime
    end: datetime

    def missed(self, name: str) -> list[datetime]:
        """The ticks older than the window at `end`: recorded as missed."""
        return fire_times(CRONS[name], after=self.start, until=self.end - WINDOW)

    def all(self, name: str) -> list[datetime]:
        return fire_times(CRONS[name], after=self.start, until=self.end)


def outage(kiqbeat: Kiqbeat, client: redis.Redis) -> Outage:
    start = redis_now(client) - timedelta(hours=5)
    first = kiqbeat("run-once", "--now", start.isoformat(), "--replay", "--json")
    assert first.code == 0, first.err
    second = kiqbeat("run-once", "--json")
    assert second.code == 0, second.err
    gone = Outage(start, datetime.fromisoformat(second.json()["now"]))
    assert second.json()["missed_recorded"] == sum(len(gone.missed(n)) for n in CRONS)
    return gone


def jids(client: redis.Redis, name: str) -> list[str]:
    """The jids in schedule `name`'s queue, in push order (duplicates kept)."""
    return [json.loads(raw)["jid"]
            for raw in reversed(client.lrange(f"queue:{QUEUES[name]}", 0, -1))]


def tick_jids(name: str, ticks: list[datetime]) -> list[str]:
    return [jid_ms(name, to_ms(t)) for t in ticks]


def test_missed_lists_each_recorded_range_with_its_tick_count(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    quiet = kiqbeat("missed")
    assert quiet.code == 0 and quiet.out.strip() == "no missed ticks recorded"
    gone = outage(kiqbeat, redis_client)
    ranges = kiqbeat("missed", "--json").json()["missed"]
    for r in ranges:
        counted = fire_times(CRONS[r["name"]], after=datetime.fromisoformat(r["after"]),
                             until=datetime.fromisoformat(r["through"]))
        assert (r["ticks"], r["capped"], r["reason"]) == (len(counted), False, "window")
    for name in CRONS:
        # The ranges hold exactly the ticks older than the window, none twice.
        inside = [t for r in ranges if r["name"] == name
                  for t in fire_times(CRONS[name], after=datetime.fromisoformat(r["after"]),
                                      until=datetime.fromisoformat(r["through"]))]
        assert inside == gone.missed(name) and inside
    text = kiqbeat("missed", "digest")
    assert text.code == 0
    digest = [r for r in ranges if r["name"] == "digest"]
    assert text.out.count("digest: ") == len(digest) and "report" not in text.out
    assert f"{len(gone.missed('digest'))} tick(s)" in text.out
    assert "older than the missed-jobs window" in text.out
    unknown = kiqbeat("missed", "nosuch")
    assert unknown.code == 1 and "no schedule 'nosuch'" in unknown.err


def test_missed_says_which_ranges_it_could_not_count(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    redis_client.hset("kiqbeat:schedules", "digest", '{"cron": "61 * * * *", "class": "D"}')
    text = kiqbeat("missed")
    assert text.code == 0
    counted = len(gone.missed("report"))
    assert f"{counted}+ tick(s) recorded as missed (1 range(s) not counted: no valid " \
           "definition)" in text.out


def test_the_store_commands_say_how_to_run_while_the_document_is_broken(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outage(kiqbeat, redis_client)
    broken = tmp_path / "broken.yaml"
    broken.write_text(DOCUMENT.replace("class: DigestWorker", "clas: DigestWorker"))
    monkeypatch.setenv("KIQBEAT_CONFIG", str(broken))
    for command in (["missed"], ["trigger", "report"], ["history", "report"], ["status"]):
        refused = kiqbeat(*command)
        assert refused.code == 1 and "'clas'" in refused.err, command
        assert "KIQBEAT_CONFIG= kiqbeat COMMAND" in refused.err, command
    monkeypatch.setenv("KIQBEAT_CONFIG", "")  # the way round it the message gives
    before = redis_client.llen("queue:reports")
    assert kiqbeat("trigger", "report").code == 0
    assert redis_client.llen("queue:reports") == before + 1
    assert kiqbeat("missed", "--json").json()["missed"]


def test_backfill_pushes_each_recorded_tick_once_and_a_dry_run_nothing(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    before = {name: jids(redis_client, name) for name in CRONS}
    recorded = kiqbeat("missed", "--json").json()

    dry = kiqbeat("backfill", "report", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    assert dry.json()["planned"] == len(gone.missed("report")) and dry.json()["pushed"] == 0
    assert {n: jids(redis_client, n) for n in CRONS} == before
    assert kiqbeat("missed", "--json").json() == recorded
    assert "would push" in kiqbeat("backfill", "report", "--dry-run").out

    done = kiqbeat("backfill", "report")
    assert done.code == 0, done.err
    n = len(gone.missed("report"))
    assert f"{n:,} pushed, 0 already pushed by another backfill" in done.out
    assert jids(redis_client, "report")[len(before["report"]):] == tick_jids(
        "report", gone.missed("report"))
    assert jids(redis_client, "digest") == before["digest"]  # not named: left alone
    assert "no missed ticks recorded" in kiqbeat("missed", "report").out
    again = kiqbeat("backfill", "report", "--json")
    assert again.code == 0 and again.json()["pushed"] == 0
    assert len(jids(redis_client, "report")) == len(before["report"]) + n

    every = kiqbeat("backfill", "--all", "--json")
    assert every.code == 0 and every.json()["pushed"] == len(gone.missed("digest"))
    assert kiqbeat("missed", "--json").json() == {"missed": []}
    # Invocations and backfills together: every tick of the outage, each exactly once.
    for name in CRONS:
        assert Counter(jids(redis_client, name)) == Counter(tick_jids(name, gone.all(name)))


def test_since_and_until_limit_a_backfill_and_leave_the_rest_recorded(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    ticks = gone.missed("report")
    since, until = ticks[3], ticks[8]  # both ends are ticks: included
    before = jids(redis_client, "report")
    done = kiqbeat("backfill", "report", "--since", since.isoformat().replace("+00:00", "Z"),
                   "--until", until.astimezone().isoformat(), "--json")
    assert done.code == 0, done.err
    assert jids(redis_client, "report")[len(before):] == tick_jids("report", ticks[3:9])
    left = [t for r in kiqbeat("missed", "report", "--json").json()["missed"]
            for t in fire_times(CRONS["report"], after=datetime.fromisoformat(r["after"]),
                                until=datetime.fromisoformat(r["through"]))]
    assert left == ticks[:3] + ticks[9:]
    rest = kiqbeat("backfill", "report", "--json")
    assert rest.json()["pushed"] == len(ticks) - 6
    assert Counter(jids(redis_client, "report")) == Counter(tick_jids("report", gone.all("report")))


def test_latest_only_pushes_the_newest_tick_and_clears_the_record(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    before = jids(redis_client, "report")
    done = kiqbeat("backfill", "report", "--latest-only")
    assert done.code == 0, done.err
    assert "1 pushed" in done.out
    assert jids(redis_client, "report")[len(before):] == tick_jids("report",
                                                                   gone.missed("report")[-1:])
    assert "no missed ticks recorded" in kiqbeat("missed", "report").out
    assert kiqbeat("missed", "digest", "--json").json()["missed"]  # not named: kept


@pytest.mark.parametrize(("args", "message"), [
    (["report", "--all"], "not both"),
    ([], "or --all"),
    (["report", "--since", "yesterday"], "--since 'yesterday' is not an ISO 8601 instant"),
    (["report", "--until", "2026-03-08T07:00:00"], "--until '2026-03-08T07:00:00' has no UTC"),
    (["--all", "--since", "2026-03-08T08:00Z", "--until", "2026-03-08T07:00Z"],
     "is later than --until"),
])
def test_a_backfill_asked_wrongly_is_refused_and_does_nothing(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, args: list[str], message: str
) -> None:
    outage(kiqbeat, redis_client)
    before = ({n: jids(redis_client, n) for n in CRONS}, kiqbeat("missed", "--json").out)
    done = kiqbeat("backfill", *args)
    assert done.code == 1 and message in done.err, done.err
    assert ({n: jids(redis_client, n) for n in CRONS}, kiqbeat("missed", "--json").out) == before


def test_a_backfill_naming_an_unknown_or_paused_schedule_says_so_and_fails(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    before = jids(redis_client, "report")
    # A name with neither a definition nor a record (a typo) is refused before anything is
    # pushed, as `missed` refuses it and the HTTP API answers 404 (one dispatch).
    typo = kiqbeat("backfill", "report", "nosuch")
    assert (typo.code, typo.out) == (1, "")
    assert typo.err == "kiqbeat: no schedule 'nosuch' in the store (kiqbeat:schedules)\n"
    assert jids(redis_client, "report") == before
    assert kiqbeat("missed", "report", "--json").json()["missed"]  # still recorded
    done = kiqbeat("backfill", "report")
    assert done.code == 0, done.err
    assert jids(redis_client, "report")[-len(gone.missed("report")):] == tick_jids(
        "report", gone.missed("report"))
    assert kiqbeat("schedules", "pause", "digest").code == 0
    paused = kiqbeat("backfill", "digest", "--json")
    assert paused.code == 1 and paused.json()["skipped"][0]["name"] == "digest"
    assert kiqbeat("missed", "digest", "--json").json()["missed"]  # still recorded
    every = kiqbeat("backfill", "--all")  # not named: listed, and the rest is done
    assert every.code == 0 and "skipped: digest: paused" in every.out


def test_trigger_pushes_one_job_with_a_jid_no_tick_has(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    before = jids(redis_client, "report")
    done = kiqbeat("trigger", "report", "--json")
    assert done.code == 0, done.err
    pushed = [json.loads(raw) for raw in redis_client.lrange("queue:reports", 0, -1)]
    assert len(pushed) == len(before) + 1
    job = pushed[0]  # LPUSH: the newest first
    assert job["jid"] == done.json()["jid"] and done.json()["queue"] == "reports"
    assert job["jid"].startswith("manual") and len(job["jid"]) == 24
    assert job["jid"] not in tick_jids("report", gone.all("report"))
    assert (job["class"], job["args"]) == ("ReportWorker", [1])
    text = kiqbeat("trigger", "report", "--args", '[2, {"region": "eu"}]')
    assert text.code == 0 and "into queue 'reports'" in text.out
    job = json.loads(redis_client.lindex("queue:reports", 0) or "")
    assert job["args"] == [2, {"region": "eu"}] and job["jid"] in text.out
    count = redis_client.llen("queue:reports")
    for bad, message in (('{"a": 1}', "must be a JSON array"), ("[1,", "is not JSON"),
                         ("42", "must be a JSON array")):
        refused = kiqbeat("trigger", "report", "--args", bad)
        assert refused.code == 1 and message in refused.err
    unknown = kiqbeat("trigger", "nosuch")
    assert unknown.code == 1 and "no schedule 'nosuch'" in unknown.err
    # A wrong key prefix shows in the message: it names the hash looked in.
    elsewhere = kiqbeat("trigger", "report", "--namespace", "other:")
    assert elsewhere.code == 1
    assert "no schedule 'report' in the store (other:kiqbeat:schedules)" in elsewhere.err
    assert redis_client.llen("queue:reports") == count


def test_history_shows_ticks_backfills_and_manual_runs_newest_first(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    assert kiqbeat("backfill", "digest").code == 0
    manual = kiqbeat("trigger", "digest", "--json").json()["jid"]
    pushes = kiqbeat("history", "digest", "--history", "20", "--json").json()["history"]
    ticks = {jid: t for jid, t in zip(tick_jids("digest", gone.all("digest")),
                                      gone.all("digest"), strict=True)}
    kinds = {"manual": [manual], "backfill": tick_jids("digest", gone.missed("digest")[::-1]),
             "tick": tick_jids("digest", [t for t in gone.all("digest")
                                          if t > gone.end - WINDOW][::-1])}
    assert [p["jid"] for p in pushes] == kinds["manual"] + kinds["backfill"] + kinds["tick"]
    assert all(p["kind"] == kind for kind, listed in kinds.items() for p in pushes
               if p["jid"] in listed)
    assert all(datetime.fromisoformat(p["tick"]) == ticks[p["jid"]] for p in pushes[1:])
    whens = [p["when"] for p in pushes]
    assert whens == sorted(whens, reverse=True)
    text = kiqbeat("history", "digest").out.splitlines()
    assert len(text) == min(10, len(pushes))  # --history 10 by default
    assert "manual" in text[0] and manual in text[0] and "backfill" in text[1]
    assert kiqbeat("history", "nosuch").code == 1


def test_status_of_named_schedules_shows_their_history_and_missed_ticks(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    status = kiqbeat("status", "digest", "--json").json()
    (row,) = status["schedules"]
    assert row["missed"] == kiqbeat("missed", "digest", "--json").json()["missed"]
    assert row["history"] == kiqbeat("history", "digest", "--json").json()["history"]
    assert row["missed"] and row["history"]
    assert status["summary"]["with_missed"] == 2
    text = kiqbeat("status", "digest", "report").out
    assert "2 with missed ticks recorded" in text
    assert text.count("  missed: digest: ") == len(row["missed"])
    assert f"  missed: digest: {len(gone.missed('digest'))} tick(s)" in text
    assert text.count("  pushed ") == len(row["history"]) + min(10, len(
        [t for t in gone.all("report") if t > gone.end - WINDOW]))
    unnamed = kiqbeat("status", "--json").json()
    assert all("history" not in r and "missed" not in r for r in unnamed["schedules"])
    assert "  pushed " not in kiqbeat("status").out


def test_a_large_backfill_draws_a_bar_on_a_terminal(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    path = tmp_path / "seconds.yaml"
    path.write_text("missed_jobs_window: 1m\n"
                    "schedules:\n  pulse: {cron: '* * * * * *', class: PulseWorker}\n")
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_REDIS_URL": redis_url, "KIQBEAT_CONFIG": str(path)}
    start = redis_now(redis_client) - timedelta(hours=2)
    for args in (["--now", start.isoformat(), "--replay"], []):
        done = subprocess.run([sys.executable, "-m", "kiqbeat", "run-once", *args],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    pushed = redis_client.llen("queue:default")
    # With --yes the bar's count is the only one, and gives it its total.
    code, out, terminal = run_on_a_terminal(
        [sys.executable, "-m", "kiqbeat", "backfill", "pulse", "--yes"], env, (24, 100))
    assert code == 0, terminal
    backfilled = redis_client.llen("queue:default") - pushed
    assert backfilled > 7000 and f"{backfilled:,} pushed" in out
    assert f"{backfilled}/{backfilled}" in terminal and "ticks/s" in terminal


def test_a_backfill_with_a_bar_counts_its_ticks_once(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kiqbeat.store import backfill

    gone = outage(kiqbeat, redis_client)
    counted: list[int] = []
    count = backfill.count_scope

    def spied(result: Any, *args: Any) -> None:
        count(result, *args)
        counted.append(result.planned)

    monkeypatch.setattr(backfill, "count_scope", spied)
    # stderr as a terminal of 24 rows of 100 columns: the bar is drawn.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(sys.stderr, "fileno", lambda: 2)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((100, 24)))
    for args in (["report"], ["digest", "--yes"]):  # counted by the backfill; by the bar
        counted.clear()
        done = kiqbeat("backfill", *args)
        assert done.code == 0, done.err
        assert counted == [len(gone.missed(args[0]))]
        assert f"{counted[0]:,} pushed" in done.out


def test_a_latest_only_dry_run_counts_what_the_real_run_pushes(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    gone = outage(kiqbeat, redis_client)
    ticks = gone.missed("report")
    between = ticks[2] + (ticks[3] - ticks[2]) / 3  # a span holding no tick
    scopes = {"empty": ("--since", between.isoformat(), "--until",
                        (between + (ticks[3] - ticks[2]) / 3).isoformat()),
              "some": ("--until", ticks[4].isoformat())}
    for scope, flags in scopes.items():
        dry = kiqbeat("backfill", "report", "--latest-only", "--dry-run", *flags, "--json")
        real = kiqbeat("backfill", "report", "--latest-only", *flags, "--json")
        assert dry.code == real.code == 0, (dry.err, real.err)
        assert dry.json()["planned"] == real.json()["pushed"] == (scope == "some"), scope
        # ticks[0..4] in scope: the newest pushed, four taken out unpushed.
        assert dry.json()["dropped"] == (4 if scope == "some" else 0), scope


def test_backfill_and_missed_lines_show_a_long_name_clipped(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    long = "n" * 1000  # the longest name kiqbeat writes; another language may write longer
    added = kiqbeat("schedules", "add", long, "--json-definition",
                    json.dumps({"cron": CRONS["report"], "class": "W"}))
    assert added.code == 0, added.err
    start = redis_now(redis_client) - timedelta(hours=5)
    for args in (["--now", start.isoformat(), "--replay"], []):
        assert kiqbeat("run-once", *args).code == 0
    done = kiqbeat("backfill", long, "--max-jobs", "2")
    assert done.code == 3, done.err  # stopped at --max-jobs
    assert done.out.count("pushed 'nnn") == 2 and "the last: 'nnn" in done.err
    # Each line shows at most MAX_SHOWN_CHARS of the name (200), never all 1,000.
    for line in [*done.out.splitlines(), *done.err.splitlines()]:
        assert "n" * 201 not in line
    assert kiqbeat("backfill", long, "--yes").code == 0  # the rest
    nothing = kiqbeat("missed", long)
    assert nothing.code == 0 and "no missed ticks recorded for 'nnn" in nothing.out
    assert "n" * 201 not in nothing.out
