"""`kiqbeat validate` and `kiqbeat next`: what a user sees before anything is pushed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.entrypoints.cli import main
from tests.support.cli import Kiqbeat
from tests.support.clock import redis_now

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EMBEDDED = Path(__file__).resolve().parents[2] / "lib" / "kiqbeat" / "demo" / "example.yaml"

GOOD = """
time_zone: Europe/Paris
schedules:
  report:
    cron: "0 9 * * 1-5"
    class: ReportWorker
    queue: reports
  sync:
    every: 15m
    class: SyncWorker
    enabled: false
"""

BAD = """
schedules:
  report:
    cron: "0 9 * * 1-5"
    class: ReportWorker
    quue: low
    tz: Europe/Pariss
  broken:
    cron: "0 25 * * *"
    class: B
"""


def write(tmp_path: Path, text: str, name: str = "schedule.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_validate_lists_each_schedule_with_its_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["validate", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: OK, 2 schedules"
    report, sync = lines[1].split(), lines[2].split()
    assert report[:7] == ["report", "0", "9", "*", "*", "1-5", "(Europe/Paris)"]
    assert "ReportWorker -> reports" in lines[1]
    assert lines[1].endswith("at 09:00 on Monday through Friday")
    assert sync[:3] == ["sync", "every", "15m"]
    assert lines[2].endswith("every 15 minutes (disabled)")


def test_validate_prints_every_error_at_once_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, BAD)
    assert main(["validate", path]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"kiqbeat: {path}: 3 problems:",
        "  - schedule 'report': unknown key 'quue'; did you mean 'queue'?",
        "  - schedule 'report' (field 'tz'): unknown time zone 'Europe/Pariss'; "
        "did you mean 'Europe/Paris'?",
        "  - schedule 'broken' (field 'cron'): cron '0 25 * * *': hour field '25' is out of "
        "range 0-23",
    ]


def test_validate_prints_warnings_after_the_schedules(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "schedules:\n  fast: {cron: '*/5 * * * * *', class: A}\n")
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("warning: schedule 'fast': fires between minute boundaries")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.y*ml")) + sorted(EXAMPLES.glob("*.json"))
                         + [EMBEDDED], ids=lambda p: p.name)
def test_every_sample_file_validates(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(path)]) == 0
    assert ": OK, " in capsys.readouterr().out


def test_the_embedded_example_shows_pushes_within_seconds() -> None:
    from tests.support.engine import load_config_file

    config = load_config_file(EMBEDDED)
    assert any(s.timetable.has_seconds and s.enabled for s in config.schedules)
    assert len({s.queue for s in config.schedules}) >= 2


def test_next_lists_fire_times_in_utc_and_the_schedules_zone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["next", path, "report", "-n", "2", "--after", "2026-03-06T00:00:00Z"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "after 2026-03-06T00:00:00Z:",
        "report: 0 9 * * 1-5 (Europe/Paris): at 09:00 on Monday through Friday",
        "  2026-03-06 08:00:00 UTC   2026-03-06 09:00:00 CET (+01:00) Fri",
        "  2026-03-09 08:00:00 UTC   2026-03-09 09:00:00 CET (+01:00) Mon",
    ]


def test_next_marks_times_moved_or_doubled_by_dst(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--cron", "30 2 * * *", "--tz", "America/New_York", "-n", "2",
                 "--after", "2026-03-07T12:00:00Z"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("  2026-03-08 07:00:00 UTC   2026-03-08 03:00:00 EDT (-04:00) Sun"
                        "   [02:30 skipped by DST; fired when the gap ended (dst: shift)]")
    assert "[" not in lines[3]
    assert main(["next", "--cron", "*/30 1 * * * Europe/London", "-n", "3",
                 "--after", "2026-10-25T00:00:00Z", "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)["schedules"][0]["fires"]
    assert [f["dst"] for f in fires] == ["repeated hour: first pass",
                                         "repeated hour: second pass",
                                         "repeated hour: second pass"]


def test_next_marks_each_dst_night_with_the_policy_s_outcome(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--cron", "30 2 * * *", "--tz", "America/New_York", "--dst", "fugit",
                 "-n", "2", "--after", "2026-03-07T12:00:00Z"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "dst fugit" in lines[1]
    # No 02:30 on 8 March: the line says so, and the two ticks shown are the 7th's and 9th's.
    assert lines[2:] == [
        "  2026-03-08 07:00:00 UTC   2026-03-08 03:00:00 EDT (-04:00) Sun"
        "   [02:30 skipped by DST; not fired that day (dst: skip); not pushed]",
        "  2026-03-09 06:30:00 UTC   2026-03-09 02:30:00 EDT (-04:00) Mon",
        "  2026-03-10 06:30:00 UTC   2026-03-10 02:30:00 EDT (-04:00) Tue",
    ]
    assert main(["next", "--cron", "30 1 * * *", "--tz", "America/New_York", "--dst",
                 '{"repeated": "last"}', "-n", "1", "--after", "2026-11-01T04:00:00Z",
                 "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)["schedules"][0]["fires"]
    assert [(f["utc"], f.get("fate"), f["dst"]) for f in fires] == [
        ("2026-11-01T05:30:00Z", "dst",
         "repeated hour: 01:30 in the first pass does not fire (dst: last)"),
        ("2026-11-01T06:30:00Z", None,
         "repeated hour: second pass; the first pass did not fire (dst: last)")]
    assert main(["next", "--cron", "30 1 * * *", "--dst", "twice"]) == 1
    assert "--dst 'twice': 'twice' is not a preset" in capsys.readouterr().err


def test_next_previews_a_phrase_a_rails_zone_an_offset_and_fugits_day_forms(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--cron", "every weekday at 9:15am", "--tz",
                 "Eastern Time (US & Canada)", "-n", "1", "--after",
                 "2026-03-06T00:00:00Z"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "every weekday at 9:15am → 15 9 * * 1-5 (Eastern Time (US & Canada) "
        "(America/New_York)): at 09:15 on Monday through Friday",
        "  2026-03-06 14:15:00 UTC   2026-03-06 09:15:00 EST (-05:00) Fri",
    ]
    assert main(["next", "--cron", "0 7 * * fri#L +05:30", "-n", "2", "--after",
                 "2026-03-06T00:00:00Z"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "0 7 * * fri#L (+05:30 (fixed offset, no DST)): at 07:00 on the last Friday of the "
        "month",
        "  2026-03-27 01:30:00 UTC   2026-03-27 07:00:00 UTC+05:30 (+05:30) Fri",
        "  2026-04-24 01:30:00 UTC   2026-04-24 07:00:00 UTC+05:30 (+05:30) Fri",
    ]
    assert main(["next", "--cron", "0 18 L * *", "--tz", "Tokyo", "-n", "1", "--after",
                 "2026-02-01T00:00:00Z"]) == 0
    assert capsys.readouterr().out.splitlines()[2] == (
        "  2026-02-28 09:00:00 UTC   2026-02-28 18:00:00 JST (+09:00) Sat")


def test_next_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["next", path, "-n", "1", "--after", "2026-03-06T00:00:00+00:00", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"after": "2026-03-06T00:00:00Z", "schedules": [
        {"name": "report", "timing": "0 9 * * 1-5 (Europe/Paris)", "zone": "Europe/Paris",
         "reading": "at 09:00 on Monday through Friday", "enabled": True,
         "fires": [{"utc": "2026-03-06T08:00:00Z", "local": "2026-03-06T09:00:00+01:00",
                    "zone_abbrev": "CET", "weekday": "Fri", "dst": None}]},
        {"name": "sync", "timing": "every 15m", "zone": "UTC", "reading": "every 15 minutes",
         "enabled": False,
         "fires": [{"utc": "2026-03-06T00:15:00Z", "local": "2026-03-06T00:15:00+00:00",
                    "zone_abbrev": "UTC", "weekday": "Fri", "dst": None}]},
    ]}


def test_next_every_previews_an_interval(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--every", "7m", "-n", "2", "--after", "2026-01-01T00:00:00Z"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "every 7m: every 7 minutes (counted from 1970-01-01 00:00 UTC)"
    assert out[2].startswith("  2026-01-01 00:07:00 UTC")


def test_next_with_an_unknown_name_lists_the_valid_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["next", path, "reprot"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"kiqbeat: {path}: 2 problems:",
        "  - no schedule 'reprot'; did you mean 'report'?",
        "  - the file's schedules are: report, sync",
    ]


@pytest.mark.parametrize(("argv", "message"), [
    (["next"], "no schedule document: name one"),
    (["next", "--cron", "* * * * *", "--every", "5m"], "give one of"),
    (["next", "--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
    (["next", "--cron", "every fortnight"], "is natural language (fugit's reader"),
    (["next", "--cron", "0 0 L-3 * *"], "Quartz's 'L-3' (3 days before the last) is '-4'"),
    (["next", "--cron", "0 9 * * *", "--after", "2026-01-01T00:00"], "has no UTC offset"),
    (["next", "--cron", "0 9 * * *", "-n", "0"], "-n 0: expected a count from 1 to 1000"),
])
def test_next_refuses_bad_arguments(argv: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_next_defaults_to_the_system_clock(capsys: pytest.CaptureFixture[str]) -> None:
    import time_machine

    with time_machine.travel("2026-03-06T10:00:00Z", tick=False):
        assert main(["next", "--cron", "0 * * * *", "-n", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "after 2026-03-06T10:00:00Z:"


def test_validate_jobs_prints_each_schedules_job_exactly_as_pushed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("schedules:\n  nightly: {cron: '0 3 * * *', class: Nightly::Worker, "
                    "queue: low, args: [1, é], retry: 3}\n")
    assert main(["validate", "--jobs", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("nightly at "))
    job = json.loads(lines[header + 1])
    assert (job["class"], job["queue"], job["args"], job["retry"]) == (
        "Nightly::Worker", "low", [1, "é"], 3)
    assert len(job["jid"]) == 24


def test_validate_refuses_a_hostile_document_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(8)) + "schedules:\n  s: {cron: '* * * * *', class: A, tags: *i}\n")
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "expands to more than" in err and "Traceback" not in err and len(err) < 1000


def test_now_before_1970_is_refused_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("schedules:\n  s: {cron: '* * * * *', class: A}\n")
    assert main(["run-once", "--config", str(path), "--redis-url", "redis://127.0.0.1:1",
                 "--now", "1969-12-31T23:59:00Z"]) == 1
    assert "must be from 1970-01-01" in capsys.readouterr().err


CORPUS = Path(__file__).resolve().parents[1] / "unit" / "import_corpus"


def test_validate_refuses_environment_sections_then_reads_the_one_chosen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(CORPUS / "environments.yml")
    assert main(["validate", path]) == 1
    assert "choose the one to import with --section production" in capsys.readouterr().err
    assert main(["validate", path, "--section", "production"]) == 0
    out = capsys.readouterr().out
    assert "OK, 2 schedules" in out and "read as a sidekiq-cron file" in out


def test_next_reads_zone_less_crons_in_the_app_zone_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(CORPUS / "cron_ignored_keys.yml")
    code = main(["next", path, "nightly_export", "-n", "1", "--after", "2026-01-01T00:00:00Z",
                 "--app-zone", "Asia/Kolkata", "--json"])
    assert code == 0
    (schedule,) = json.loads(capsys.readouterr().out)["schedules"]
    assert schedule["fires"][0]["utc"] == "2026-01-01T04:00:00Z"  # 09:30 IST


def test_validate_format_flag_names_the_tool_in_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", str(CORPUS / "natural.yml"), "--format", "sidekiq-scheduler"]) == 1
    err = capsys.readouterr().err
    assert "(read as a sidekiq-scheduler file)" in err
    assert "rufus-scheduler) refuses too; fugit's natural-language reader would make it " \
           "'0 * * * *'" in err


def test_validate_warns_of_daylight_saving_nights_and_an_invocation_does_not_look(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kiqbeat.document.sources import Sources

    path = str(CORPUS / "dst_new_york.yml")
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert "schedule 'morning_batch': daylight saving" in out
    assert "schedule 'early_batch': daylight saving" in out
    # An invocation reads the same file without comparing it with fugit's readings over
    # the next 12 months: no such warning logged on every cold invocation.
    config = Sources().load_config(path)
    assert [s.name for s in config.schedules] == ["morning_batch", "early_batch",
                                                  "every_quarter_hour"]
    assert not [w for w in config.warnings if "daylight saving" in w]


def test_an_invocation_reading_kiqbeats_own_document_loads_no_importer(tmp_path: Path) -> None:
    import subprocess
    import sys

    document = tmp_path / "schedules.yaml"
    document.write_text("schedules:\n  a: {cron: '0 9 * * *', tz: Europe/Paris, class: W}\n")
    importers = ["kiqbeat.document.sidekiq", "kiqbeat.document.rails", "kiqbeat.core.fugit",
                 "kiqbeat.core.natural"]
    code = ("import sys; import kiqbeat.engine; from kiqbeat.document.sources import Sources; "
            f"Sources().load_config({str(document)!r}); "
            f"print([m for m in {importers!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


LIFE = """
time_zone: Europe/Paris
calendars:
  holidays: ['2026-12-25', '2027-01-01']
schedules:
  report:
    cron: "0 9 * * *"
    class: ReportWorker
    start_at: "2026-12-24T00:00:00+01:00"
    end_at: "2027-01-03T00:00:00Z"
    except: [holidays]
    max_runs: 5
  spread:
    cron: "0 9 * * *"
    class: SpreadWorker
    jitter: 5m
    overlap: skip
  once:
    at: "2026-12-24T17:00:00+01:00"
    class: OnceWorker
"""


def test_validate_describes_every_life_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", write(tmp_path, LIFE)]) == 0
    report, spread, once = capsys.readouterr().out.splitlines()[1:4]
    assert report.endswith("at 09:00; from 2026-12-23T23:00:00Z; until 2027-01-03T00:00:00Z; "
                           "except 2 dates (holidays) in Europe/Paris; at most 5 runs")
    assert spread.endswith("at 09:00; each job delivered up to 5m after its tick (jitter); "
                           "no tick while its previous job waits or runs (overlap: skip)")
    assert once.split()[:3] == ["once", "at", "2026-12-24T16:00:00Z"]
    assert once.endswith("once, at 2026-12-24T16:00:00Z")


def test_next_marks_the_start_excluded_dates_and_the_run_limit_between_two_instants(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, LIFE)
    assert main(["next", path, "report", "--from", "2026-12-22T12:00:00Z",
                 "--until", "2027-02-01T00:00:00Z"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "after 2026-12-22T12:00:00Z until 2027-02-01T00:00:00Z:"
    marks = [(line.split()[0], line.partition("[")[2]) for line in lines[2:]]
    assert marks == [
        ("2026-12-23", "before start_at, not pushed; starts at 2026-12-23T23:00:00Z]"),
        ("2026-12-24", ""),
        ("2026-12-25", "excluded: 2026-12-25 (holidays), not pushed]"),
        ("2026-12-26", ""), ("2026-12-27", ""), ("2026-12-28", ""), ("2026-12-29", ""),
        ("2026-12-30", "run limit: max_runs 5 reached, not pushed: the schedule has ended]"),
    ]


def test_next_marks_the_end_and_a_one_shot_after_its_tick_has_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, LIFE.replace("max_runs: 5", "max_runs: 50"))
    assert main(["next", path, "report", "once", "--from", "2027-01-01T12:00:00Z",
                 "--json"]) == 0
    report, once = json.loads(capsys.readouterr().out)["schedules"]
    assert [(f["utc"], f.get("fate")) for f in report["fires"]] == [
        ("2027-01-02T08:00:00Z", None), ("2027-01-03T08:00:00Z", "after end_at")]
    assert once["fires"] == []
    assert main(["next", path, "once", "--from", "2027-01-01T12:00:00Z"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  (does not fire again)"


def test_next_shows_each_jittered_jobs_delivery_within_the_window_and_the_same_each_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, LIFE)
    argv = ["next", path, "spread", "-n", "20", "--from", "2026-03-01T00:00:00Z", "--json"]
    assert main(argv) == 0
    fires = json.loads(capsys.readouterr().out)["schedules"][0]["fires"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["schedules"][0]["fires"] == fires
    for fire in fires:
        tick = datetime.fromisoformat(fire["utc"])
        delivered = datetime.fromisoformat(fire["delivered"])
        assert tick <= delivered < tick + timedelta(minutes=5)
        assert (delivered - tick) // timedelta(milliseconds=1) == fire["jitter_ms"]
    assert len({f["jitter_ms"] for f in fires}) > 10  # spread, not one offset


def test_next_refuses_an_until_before_the_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--cron", "0 * * * *", "--from", "2026-03-02T00:00:00Z",
                 "--until", "2026-03-01T00:00:00Z"]) == 1
    assert "--until '2026-03-01T00:00:00Z' is not after --from '2026-03-02T00:00:00Z'" in (
        capsys.readouterr().err)


def test_next_until_lists_every_tick_in_the_span(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "--every", "15m", "--from", "2026-03-01T00:00:00Z",
                 "--until", "2026-03-01T06:00:00Z"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 + 24


# ---------------------------------------------------------------------------- stored schedules

DAILY = {"cron": "0 9 * * *", "class": "DailyWorker"}


def stored_fires(kiqbeat: Kiqbeat, *argv: str) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """`kiqbeat next ARGV --json`'s one schedule: its stored state, and each line's
    (UTC instant, fate)."""
    done = kiqbeat("next", *argv, "--json")
    assert done.code == 0, done.err
    (schedule,) = done.json()["schedules"]
    return schedule["stored"], [(f["utc"], f.get("fate")) for f in schedule["fires"]]


def add(kiqbeat: Kiqbeat, name: str, definition: dict[str, Any]) -> None:
    done = kiqbeat("schedules", "add", name, "--json-definition", json.dumps(definition))
    assert done.code == 0, done.err


def test_next_name_reads_a_stored_schedule_and_marks_its_pending_skips_and_run_limit(
        kiqbeat: Kiqbeat, redis_client: redis.Redis) -> None:
    add(kiqbeat, "daily", {**DAILY, "max_runs": 5})
    assert kiqbeat("schedules", "skip", "daily", "--count", "2").code == 0
    redis_client.hset("kiqbeat:runs", "daily", 3)  # three pushed over its life
    stored, fires = stored_fires(kiqbeat, "daily", "--from", "2030-01-01T00:00:00Z")
    assert (stored["runs"], stored["skips"], stored["ended"]) == (3, 2, False)
    assert fires == [("2030-01-01T09:00:00Z", "skipped"), ("2030-01-02T09:00:00Z", "skipped"),
                     ("2030-01-03T09:00:00Z", None), ("2030-01-04T09:00:00Z", None),
                     ("2030-01-05T09:00:00Z", "run limit")]
    text = kiqbeat("next", "daily", "--from", "2030-01-01T00:00:00Z")
    assert text.code == 0, text.err
    lines = text.out.splitlines()
    assert lines[2] == "  stored: 3 runs pushed; 2 ticks to skip"
    assert lines[3].endswith("[skipped (1 of 2 pending), not pushed]")
    assert lines[-1].endswith("[run limit: max_runs 5 reached, not pushed: the schedule has "
                              "ended]")


def test_next_name_shows_a_stored_schedule_with_its_runs_used_as_ended(
        kiqbeat: Kiqbeat, redis_client: redis.Redis) -> None:
    add(kiqbeat, "daily", {**DAILY, "max_runs": 2})
    redis_client.hset("kiqbeat:runs", "daily", 2)
    stored, fires = stored_fires(kiqbeat, "daily", "--from", "2030-01-01T00:00:00Z")
    assert stored["ended"] is True
    assert fires == [("2030-01-01T09:00:00Z", "run limit")]


def test_next_name_marks_the_ticks_a_pause_passes_over_until_its_end(
        kiqbeat: Kiqbeat, redis_client: redis.Redis) -> None:
    add(kiqbeat, "daily", DAILY)
    now = redis_now(redis_client)
    until = (now + timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
    paused = kiqbeat("schedules", "pause", "daily", "--note", "INC-7", "--until",
                     until.isoformat())
    assert paused.code == 0, paused.err
    stored, fires = stored_fires(kiqbeat, "daily", "-n", "4",
                                 "--from", now.isoformat())
    assert stored["paused"]["note"] == "INC-7"
    ticks = [datetime.fromisoformat(utc) for utc, _ in fires]
    assert len(ticks) == 4 and ticks[0] > now
    assert [fate for _, fate in fires] == ["paused" if t <= until else None for t in ticks]
    assert [fate for _, fate in fires].count("paused") in (2, 3)  # its end's tick included
    text = kiqbeat("next", "daily", "--from", now.isoformat()).out
    assert f"paused until {until.isoformat().replace('+00:00', 'Z')}, not pushed" in text
    assert "INC-7" in text.splitlines()[2]


def test_next_name_marks_every_tick_of_a_pause_without_end(kiqbeat: Kiqbeat) -> None:
    add(kiqbeat, "daily", DAILY)
    assert kiqbeat("schedules", "pause", "daily").code == 0
    _, fires = stored_fires(kiqbeat, "daily", "-n", "3")
    assert [fate for _, fate in fires] == ["paused"] * 3
    assert "[paused until resumed, not pushed]" in kiqbeat("next", "daily").out


def test_next_previews_several_stored_schedules_and_names_the_ones_the_store_lacks(
        kiqbeat: Kiqbeat) -> None:
    add(kiqbeat, "daily", DAILY)
    add(kiqbeat, "report.yaml", DAILY)  # named like a file: --store reads it from the store
    both = kiqbeat("next", "--store", "daily", "report.yaml", "-n", "1", "--json")
    assert both.code == 0, both.err
    assert [s["name"] for s in both.json()["schedules"]] == ["daily", "report.yaml"]
    missing = kiqbeat("next", "dialy")
    assert missing.code == 1
    assert "no schedule 'dialy' in the store (kiqbeat:schedules) (and no file 'dialy' here" in (
        missing.err)
    file_typo = kiqbeat("next", "report.yaml")  # ends like a document: read as a file
    assert file_typo.code == 1 and "file not found" in file_typo.err
