"""kiqbeat's schedule document: what it accepts, what it refuses, and how it says so."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kiqbeat.core.cron import Cron, Every
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.fields import ACTIVE_JOB_WRAPPER, LEGACY_ACTIVE_JOB_WRAPPER
from kiqbeat.errors import ConfigError
from tests.support.engine import load_config_file


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), source="test.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text)
    assert caught.value.source == "test.yaml"
    return caught.value.problems


def test_the_design_example_loads_with_its_defaults() -> None:
    config = load("""
        time_zone: Asia/Kolkata
        missed_jobs_window: 1h
        namespace: ""
        schedules:
          signup_report:
            cron: "0 * * * *"
            class: SignUpReportWorker
            args: [arg1, arg2]
            queue: default
        """)
    (s,) = config.schedules
    assert (config.time_zone, config.missed_jobs_window_s, config.namespace) == (
        "Asia/Kolkata", 3600.0, "")
    assert isinstance(s.timetable, Cron) and s.timetable.zone_name == "Asia/Kolkata"
    assert (s.name, s.job_class, s.queue, s.args) == (
        "signup_report", "SignUpReportWorker", "default", ("arg1", "arg2"))
    assert (s.enabled, s.catch_up, s.include_metadata, s.active_job_wrapper) == (
        True, "all", False, "")
    assert s.timing == "0 * * * * (Asia/Kolkata)"
    assert config.warnings == ()


def test_every_field_is_read_into_the_schedule() -> None:
    (s,) = load("""
        lookahead: 30s
        timestamp_format: ms
        schedules:
          sync:
            every: 15m
            class: Billing::SyncJob
            queue: billing
            args: {account: 7}
            enabled: false
            description: Sync billing
            catch_up: latest
            include_metadata: true
            active_job: legacy
            retry: 5
            retry_for: 2h
            retry_queue: low
            backtrace: 10
            dead: false
            tags: billing
            payload: {lock: until_executed}
        """).schedules
    assert isinstance(s.timetable, Every) and s.timetable.seconds == 900
    assert s.args == ({"account": 7},)
    assert (s.enabled, s.description, s.catch_up, s.include_metadata) == (
        False, "Sync billing", "latest", True)
    assert s.active_job_wrapper == LEGACY_ACTIVE_JOB_WRAPPER
    assert (s.lookahead_s, s.timestamp_format, s.timing) == (30.0, "ms", "every 15m")
    assert dict(s.extra) == {"retry": 5, "retry_for": 7200, "retry_queue": "low",
                             "backtrace": 10, "dead": False, "tags": ["billing"],
                             "lock": "until_executed"}


@pytest.mark.parametrize(("written", "expected"), [
    ("[1, two]", (1, "two")), ("solo", ("solo",)), ("7", (7,)), ("", ()), ("[]", ()),
    ("{a: 1}", ({"a": 1},)), ("[2024-01-01]", ("2024-01-01",)),
])
def test_args_are_always_a_list_the_way_sidekiq_scheduler_makes_them(
        written: str, expected: tuple[object, ...]) -> None:
    (s,) = load(f"schedules:\n  a:\n    cron: '* * * * *'\n    class: A\n    args: {written}\n"
                ).schedules
    assert s.args == expected


def test_active_job_true_uses_sidekiqs_own_wrapper() -> None:
    (s,) = load("schedules: {a: {cron: '* * * * *', class: A, active_job: true}}").schedules
    assert s.active_job_wrapper == ACTIVE_JOB_WRAPPER


def test_a_zone_in_the_cron_string_wins_over_tz_and_tz_over_time_zone() -> None:
    config = load("""
        time_zone: Asia/Kolkata
        schedules:
          both: {cron: "0 9 * * * Europe/Paris", tz: America/New_York, class: A}
          tz_only: {cron: "0 9 * * *", tz: America/New_York, class: A}
          global: {cron: "0 9 * * *", class: A}
        """)
    zones = {s.name: s.timetable.zone_name for s in config.schedules
             if isinstance(s.timetable, Cron)}
    assert zones == {"both": "Europe/Paris", "tz_only": "America/New_York",
                     "global": "Asia/Kolkata"}
    assert any("wins over tz 'America/New_York'" in w for w in config.warnings)


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    found = problems("""
        time_zon: UTC
        schedules:
          report:
            cron: "0 9 * * 1-5"
            class: ReportWorker
            quue: low
            tz: Europe/Pariss
          broken:
            cron: "61 * * * *"
            class: B
          classless:
            every: 5m
        """)
    assert found == [
        "unknown top-level key 'time_zon'; did you mean 'time_zone'?",
        "schedule 'report': unknown key 'quue'; did you mean 'queue'?",
        "schedule 'report' (field 'tz'): unknown time zone 'Europe/Pariss'; "
        "did you mean 'Europe/Paris'?",
        "schedule 'broken' (field 'cron'): cron '61 * * * *': minute field '61' is out of "
        "range 0-59",
        "schedule 'classless': missing 'class' (the worker class to run, e.g. 'ReportWorker')",
    ]


def test_the_message_lists_the_problems_under_the_source() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("schedules:\n  a: {cron: x, class: A, quue: b}\n", source="s.yaml")
    text = str(caught.value)
    assert text.startswith("s.yaml: 2 problems:\n  - ")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("queue", "''", "'' must be a non-empty string without spaces, e.g. 'default'"),
    ("class", "[A]", "['A'] must be a non-empty string without spaces"),
    ("enabled", "'no'", "'no' must be true or false"),
    ("catch_up", "lastest", "'lastest' is not one of all, latest, none; did you mean 'latest'?"),
    ("active_job", "maybe", "'maybe' must be true (Sidekiq::ActiveJob::Wrapper), 'legacy'"),
    ("timestamp_format", "us", "'us' is not one of s, ms"),
    ("retry", "-1", "-1 must be true, false or a whole number from 0 to 1000000"),
    ("tags", "[1]", "[1] must be a list of non-empty strings"),
    ("lookahead", "soon", "'soon' is not a duration"),
    ("every", "5 fortnights", "every '5 fortnights' is not a duration"),
    ("args", "[.nan]", "args[0] is nan, which JSON cannot carry"),
    ("payload", "{jid: x}", "may not set 'jid'"),
    ("payload", "{error_message: x}", "may not set 'error_message'"),
    ("payload", "[1]", "[1] must be a mapping"),
])
def test_a_bad_field_is_named_with_its_value_and_what_is_valid(
        field: str, value: str, message: str) -> None:
    timing = "" if field == "every" else "    cron: '* * * * *'\n"
    (found,) = problems(f"schedules:\n  job:\n{timing}    class: A\n    {field}: {value}\n"
                        .replace("    class: A\n    class:", "    class:"))
    assert found.startswith(f"schedule 'job' (field {field!r}): {message}")


def test_a_job_option_may_not_be_set_twice() -> None:
    (found,) = problems("schedules: {a: {cron: '* * * * *', class: A, retry: 1, "
                        "payload: {retry: 2}}}")
    assert "also given as a schedule field" in found


def test_cron_and_every_are_exclusive_and_one_is_required() -> None:
    assert problems("schedules: {a: {cron: '* * * * *', every: 5m, class: A}, b: {class: B}}"
                    ) == ["schedule 'a': has both 'cron' and 'every'; keep one",
                          "schedule 'b': needs 'cron' (e.g. '0 * * * *'), 'every' "
                          "(e.g. '15m') or 'at' (e.g. '2026-03-01T17:00:00+01:00')"]


@pytest.mark.parametrize(("written", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("1h", 3600.0), ("1h30m", 5400.0),
    ("2d", 172800.0), ("45.5", 45.5),
])
def test_durations_accept_units_and_plain_seconds(written: str, seconds: float) -> None:
    assert load(f"missed_jobs_window: {written}\nschedules: {{}}").missed_jobs_window_s == seconds


def test_the_window_must_be_positive_and_lookahead_within_it() -> None:
    assert problems("missed_jobs_window: 0\nschedules: {}") == [
        "field 'missed_jobs_window': 0 must be longer than 0"]
    assert problems("missed_jobs_window: 5m\nlookahead: 10m\nschedules: {}") == [
        "field 'lookahead': '10m' (600 s) is longer than missed_jobs_window (300 s); "
        "it must be at most the window"]


def test_wait_replicas_is_a_small_count_with_a_bounded_timeout() -> None:
    config = load("wait_replicas: 1\nwait_timeout: 2s\nschedules: {}")
    assert (config.wait_replicas, config.wait_timeout_s) == (1, 2.0)
    assert (load("schedules: {}").wait_replicas, load("schedules: {}").wait_timeout_s) == (0, 1.0)
    assert problems("wait_replicas: yes\nwait_timeout: 1m\nschedules: {}") == [
        "field 'wait_replicas': True must be a whole number of replicas from 0 to 16",
        "field 'wait_timeout': '1m' must be longer than 0 and at most 10s (each push call "
        "waits this long at most, inside the invocation's deadline)"]


def test_a_window_shorter_than_two_minutes_warns() -> None:
    config = load("missed_jobs_window: 90s\nschedules: {a: {cron: '* * * * *', class: A}}")
    assert any("missed_jobs_window is 90 s" in w for w in config.warnings)


def test_sub_minute_schedules_without_lookahead_warn() -> None:
    config = load("""
        schedules:
          secs: {cron: "*/5 * * * * *", class: A}
          ahead: {cron: "*/5 * * * * *", class: A, lookahead: 60s}
        """)
    assert [w.split(":")[0] for w in config.warnings] == ["schedule 'secs'"]
    assert "set lookahead" in config.warnings[0]


def test_a_namespace_without_a_colon_warns() -> None:
    assert any("'exqqueue:NAME'" in w for w in load("namespace: exq\nschedules: {}").warnings)


def test_a_repeated_yaml_key_keeps_the_last_value_with_a_warning_naming_its_lines() -> None:
    config = load("""
        schedules:
          report: {cron: "* * * * *", class: A, queue: low}
          report: {cron: "0 * * * *", class: B}
        """)
    (schedule,) = config.schedules
    assert (schedule.job_class, schedule.queue, schedule.timing) == ("B", "default",
                                                                     "0 * * * * (UTC)")
    assert config.warnings == ("line 4: duplicate key 'report' (also at line 3); the last "
                               "value is kept, as Ruby's YAML loader keeps it",)


def test_a_key_repeated_inside_a_schedule_keeps_the_last_and_its_problems_only() -> None:
    found = problems("""
        schedules:
          report:
            cron: "* * * * *"
            class: A
            queue: [not, a, queue]
            queue: low
            quue: x
        """)
    assert found == ["schedule 'report': unknown key 'quue'; did you mean 'queue'?"]


def test_a_repeated_json_key_keeps_the_last_value_with_a_warning() -> None:
    config = load_config_text('{"schedules": {"a": {"cron": "* * * * *", "class": "A"}, '
                              '"a": {"cron": "* * * * *", "class": "B"}}}')
    assert [s.job_class for s in config.schedules] == ["B"]
    assert config.warnings == ("duplicate key 'a'; the last value is kept",)


def test_yaml_merge_keys_may_be_overridden() -> None:
    config = load("""
        schedules:
          a: &base {cron: "* * * * *", class: A, queue: low}
          b:
            <<: *base
            queue: high
        """)
    assert [s.queue for s in config.schedules] == ["low", "high"]


def test_unsafe_yaml_tags_are_refused_with_a_position() -> None:
    (found,) = problems_of("schedules: !!python/object:os.system {}")
    assert found.startswith("invalid YAML at line 1, column 12")


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    return caught.value.problems


def test_a_syntax_error_names_line_and_column() -> None:
    (found,) = problems_of("schedules:\n  heartbeat: [unclosed\n")
    assert found.startswith("invalid YAML at line 3")


@pytest.mark.parametrize(("text", "message"), [
    ("", "the document is empty"),
    ("- just\n- a list of strings\n", "entry 1: expected a mapping"),
    ("hello", "the document is a str"),
    ("schedules: [a, b]", "field 'schedules': expected a mapping of name to fields"),
    ("schedules: {123: {cron: '* * * * *', class: A}}", "schedule name 123"),
    ("schedules: {a: {cron: '* * * * *', class: A, args: <%= 1 %>}}", "ERB"),
])
def test_documents_of_the_wrong_shape_are_refused(text: str, message: str) -> None:
    assert any(message in p for p in problems_of(text))


def test_ten_thousand_ordinary_schedules_are_admitted(tmp_path: Path) -> None:
    # Five short lines each, about 110 bytes: 1.1 MB, which the old 1 MiB limit refused.
    entry = ("  report_{i:05d}:\n    cron: \"{m} * * * *\"\n    class: SignUpReportWorker\n"
             "    queue: reports\n    args: [{i}, daily, true]\n")
    text = "schedules:\n" + "".join(entry.format(i=i, m=i % 60) for i in range(10_000))
    assert len(text.encode()) > 1024 * 1024
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert len(load_config_file(path).schedules) == 10_000


def test_documents_over_the_size_limit_are_refused_naming_the_size(tmp_path: Path) -> None:
    text = "# " + "é" * (16 * 1024 * 1024) + "\nschedules: {}\n"  # 2 bytes per character
    with pytest.raises(ConfigError, match=r"33,554,449 bytes; the limit is 33,554,432"):
        load_config_text(text)
    path = tmp_path / "big.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"the file is 33,554,449 bytes"):
        load_config_file(path)


def test_alias_bombs_are_stopped_before_they_expand() -> None:
    lines = ["x0: &x0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}]"
              for i in range(1, 9)]
    text = "schedules:\n  b:\n    cron: '* * * * *'\n    class: A\n    payload:\n"
    text += "".join(f"      {line}\n" for line in lines)
    with pytest.raises(ConfigError, match="expands to more than 5,000,000 values"):
        load_config_text(text)
    # A billion values in 500 bytes, through `tags:`: refused at once, not built.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(8))
    bomb += "schedules:\n  s:\n    cron: '* * * * *'\n    class: A\n    tags: *i\n"
    with pytest.raises(ConfigError, match="expands to more than"):
        load_config_text(bomb)


def test_shared_values_within_the_bound_are_kept_and_each_job_is_still_bounded() -> None:
    schedules = "schedules:\n  s0: &d {class: A, queue: q, cron: '* * * * *'}\n" + "".join(
        f"  s{i}: {{<<: *d}}\n" for i in range(1, 2000))
    config = load_config_text(schedules)
    assert len(config.schedules) == 2000 and config.schedules[-1].queue == "q"
    (found,) = problems_of("schedules:\n  b:\n    cron: '* * * * *'\n    class: A\n"
                           "    args: &a [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]\n"
                           "    payload: {a: [" + ", ".join(["*a"] * 1000) + "]}\n")
    assert "more than 10,000 values" in found


def test_a_file_that_cannot_be_read_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="schedule file not found"):
        load_config_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config_file(tmp_path)  # a directory
    (tmp_path / "latin1.yaml").write_bytes(b"schedules: {}\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config_file(tmp_path / "latin1.yaml")


@pytest.mark.parametrize("text", ['{"schedules": {"a": {"cron": "* * * * *", "class": "A"}}}',
                                  "schedules:\n  a: {cron: '* * * * *', class: A}\n"])
def test_a_byte_order_mark_is_read_the_same_by_every_source(tmp_path: Path, text: str) -> None:
    from kiqbeat.document.sources import Sources

    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / ("bom.json" if text.startswith("{") else "bom.yaml")
    path.write_bytes(data)
    assert [s.name for s in load_config_text(data).schedules] == ["a"]
    assert [s.name for s in load_config_file(path).schedules] == ["a"]
    assert [s.name for s in Sources().load_config(str(path)).schedules] == ["a"]  # run-once
    assert [s.name for s in load_config_text(data.decode("utf-8")).schedules] == ["a"]


def test_symbol_keys_read_without_their_colon() -> None:
    (s,) = load("schedules:\n  :a:\n    :cron: '* * * * *'\n    :class: A\n").schedules
    assert (s.name, s.job_class) == ("a", "A")


def test_millisecond_stamps_for_exq_are_warned_about() -> None:
    config = load_config_text("namespace: 'exq:'\ntimestamp_format: ms\n"
                              "schedules:\n  s: {cron: '* * * * *', class: MyApp.Worker}\n")
    assert any("Telemetry middleware crashes" in w for w in config.warnings)
