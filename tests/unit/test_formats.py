"""sidekiq-scheduler and sidekiq-cron files: detected, converted, and warned about honestly."""

from __future__ import annotations

import textwrap

import pytest

from kiqbeat.core.cron import Cron, Every
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document import load_config_text
from kiqbeat.document.convert import convert, detect_format
from kiqbeat.document.fields import LEGACY_ACTIVE_JOB_WRAPPER
from kiqbeat.errors import ConfigError


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), source="t.yml")


def by_name(config: Config) -> dict[str, Schedule]:
    return {s.name: s for s in config.schedules}


@pytest.mark.parametrize(("doc", "expected"), [
    ({"schedules": {}}, "kiqbeat"),
    ({"time_zone": "UTC"}, "kiqbeat"),
    ({"scheduler": {"schedule": {}}}, "sidekiq-scheduler"),
    ({"schedule": {"a": {"cron": "* * * * *"}}}, "sidekiq-scheduler"),
    ({"a": {"every": "1m", "class": "A"}}, "sidekiq-scheduler"),
    ({"a": {"cron": "* * * * *", "class": "A"}}, "sidekiq-cron"),
    # sidekiq-scheduler takes the name as the class; sidekiq-cron refuses a job without one.
    ({"A": {"cron": "* * * * *"}, "B": {"cron": "0 * * * *", "class": "B"}}, "sidekiq-scheduler"),
    ({"a": {"cron": "* * * * *", "class": "A", "kwargs": {"x": 1}}}, "good_job"),
    ({"a": {"schedule": "every hour", "class": "A"}}, "solid_queue"),
    ({"a": {"command": "A.run", "schedule": "every hour"}}, "solid_queue"),
    ([{"name": "a", "cron": "* * * * *", "class": "A"}], "sidekiq-cron"),
    ({"schedulez": {"a": {"cron": "* * * * *"}}}, "kiqbeat"),
])
def test_the_format_is_detected_from_the_document(doc: object, expected: str) -> None:
    assert detect_format(doc)[0] == expected


def test_kiqbeat_documents_pass_through_unchanged() -> None:
    doc = {"schedules": {"a": {"cron": "* * * * *", "class": "A"}}}
    converted = convert(doc)
    assert (converted.document, converted.warnings, converted.problems) == (doc, [], [])


SCHEDULER = """
    :concurrency: 5
    :scheduler:
      :schedule:
        CancelAbandonedOrders:
          cron: "*/5 * * * *"
        queue_documents:
          cron: ["0 0 * * * Europe/Stockholm", {first_in: 1m}]
          class: QueueDocuments
          queue: high
          args: contributors
          include_metadata: true
          retry: false
          lock: until_executed
        check_daemon:
          every: ["30s", {first_in: "120s"}]
          class: CheckDaemon
          enabled: false
        one_shot:
          in: 1h
          class: Once
        legacy_interval:
          interval: 5m
          class: Interval
    """


def test_a_sidekiq_scheduler_section_converts_to_the_same_jobs() -> None:
    config = load(SCHEDULER)
    s = by_name(config)
    assert set(s) == {"CancelAbandonedOrders", "queue_documents", "check_daemon",
                      "legacy_interval"}
    assert s["CancelAbandonedOrders"].job_class == "CancelAbandonedOrders"
    docs = s["queue_documents"]
    assert isinstance(docs.timetable, Cron) and docs.timetable.zone_name == "Europe/Stockholm"
    assert (docs.queue, docs.args, docs.include_metadata) == ("high", ("contributors",), True)
    assert dict(docs.extra) == {"retry": False, "lock": "until_executed"}
    daemon = s["check_daemon"]
    assert isinstance(daemon.timetable, Every) and daemon.timetable.seconds == 30
    assert daemon.enabled is False
    assert isinstance(s["legacy_interval"].timetable, Every)


def test_sidekiq_scheduler_conversions_that_change_meaning_warn() -> None:
    text = "\n".join(load(SCHEDULER).warnings)
    assert "read as a sidekiq-scheduler file" in text
    assert "schedule 'one_shot': skipped: 'in' is a one-shot timer" in text
    assert "schedule 'check_daemon': rufus options first_in ignored" in text
    assert "'lock' put into the job hash" in text
    assert "'interval' read as 'every'" in text
    assert "1 cron(s) without a zone ('CancelAbandonedOrders')" in text


def test_the_older_top_level_schedule_key_is_read() -> None:
    (s,) = load("""
        :schedule:
          hello_world:
            every: 1m
            class: HelloWorld
        """).schedules
    assert (s.name, s.job_class, s.timing) == ("hello_world", "HelloWorld", "every 1m")


def test_a_typo_in_a_sidekiq_scheduler_entry_goes_with_the_job_and_is_pointed_out() -> None:
    # sidekiq-scheduler pushes keys it does not know with the job; refusing them would refuse
    # a file sidekiq-scheduler runs, so the warning carries the did-you-mean hint instead.
    config = load(":schedule:\n  a:\n    cron: '* * * * *'\n    quue: low\n")
    assert config.schedules[0].extra == {"quue": "low"}
    assert any("'quue'; did you mean 'queue'? put into the job hash" in w
               for w in config.warnings)


def test_a_scheduler_section_without_a_schedule_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no :schedule: mapping"):
        load(":scheduler:\n  :enabled: true\n  :dynamic: false\n")


CRON_HASH = """
    my_first_job:
      cron: "*/5 * * * *"
      class: HardWorker
      queue: hard_worker
    second_job:
      cron: "0 4 * * * America/Chicago"
      klass: MyClass
      args:
        hash_key: hash_value
      status: disabled
      source: schedule
    json_args:
      cron: "0 * * * *"
      class: JsonArgs
      args: '["a", 1]'
    report:
      cron: "15 * * * *"
      class: ReportJob
      active_job: "yes"
      queue: reports
      queue_name_prefix: production
      date_as_argument: true
    """


def test_a_sidekiq_cron_hash_converts_to_the_same_jobs() -> None:
    s = by_name(load(CRON_HASH))
    assert (s["my_first_job"].job_class, s["my_first_job"].queue) == ("HardWorker", "hard_worker")
    second = s["second_job"]
    assert (second.job_class, second.enabled, second.args) == (
        "MyClass", False, ({"hash_key": "hash_value"},))
    assert s["json_args"].args == ("a", 1)
    report = s["report"]
    assert report.active_job_wrapper == LEGACY_ACTIVE_JOB_WRAPPER
    assert (report.queue, report.include_metadata) == ("production_reports", True)


def test_date_as_argument_warns_that_the_argument_changes_shape() -> None:
    (warning,) = [w for w in load(CRON_HASH).warnings if "date_as_argument" in w]
    assert "{'scheduled_at': <tick as float seconds>} instead of a bare float" in warning


def test_the_sidekiq_cron_list_form_needs_unique_names() -> None:
    config = load("""
        - name: rates
          cron: "0 */6 * * *"
          klass: RatesWorker
          args: not json
        """)
    (s,) = config.schedules
    assert (s.name, s.job_class, s.args) == ("rates", "RatesWorker", ("not json",))
    with pytest.raises(ConfigError) as caught:
        load("""
            - {name: a, cron: "* * * * *", class: A}
            - {name: a, cron: "* * * * *", class: B}
            - {cron: "* * * * *", class: C}
            - just a string
            """)
    assert caught.value.problems == [
        "entry 2: duplicate name 'a'",
        "entry 3: missing 'name' (each job in a list needs one)",
        "entry 4: expected a mapping with name, cron and class, got 'just a string'",
    ]


def test_sidekiq_cron_entries_get_kiqbeats_validation() -> None:
    with pytest.raises(ConfigError) as caught:
        load("""
            a: {cron: "* * * * *", klass: A, status: paused}
            b: {cron: "* * * * *", class: B, message: '{"class": "B"}'}
            """)
    assert caught.value.problems[0] == (
        "schedule 'a' (field 'status'): 'paused' must be 'enabled' or 'disabled'")
    assert "schedule 'b' (field 'message'): a raw job message is not supported" in (
        caught.value.problems[1])
    assert "(read as a sidekiq-cron file)" in str(caught.value)


def test_keys_sidekiq_cron_ignores_are_ignored_and_listed_once() -> None:
    config = load("""
        a: {cron: "0 * * * *", class: A, quue: x, desc: hourly}
        b: {cron: "0 * * * *", class: B, desc: also, output: log/b.log}
        """)
    assert [s.queue for s in config.schedules] == ["default", "default"]
    (warning,) = [w for w in config.warnings if "ignores these keys" in w]
    assert warning == ("sidekiq-cron ignores these keys, so kiqbeat does too: 'quue'; did you "
                       "mean 'queue'? ('a'); 'desc' ('a', 'b'); 'output' ('b')")


def test_a_queue_prefix_without_active_job_is_ignored_with_a_warning() -> None:
    config = load("a: {cron: '* * * * *', class: A, queue: q, queue_name_prefix: p}")
    assert config.schedules[0].queue == "q"
    assert any("queue_name_prefix ignored" in w for w in config.warnings)


@pytest.mark.parametrize("text", [
    "report:\n  cron: '0 0 */2 * 1-5'\n  class: ReportWorker\n",  # sidekiq-cron hash form
    ":scheduler:\n  :schedule:\n    report:\n      cron: '0 0 */2 * 1-5'\n"
    "      class: ReportWorker\n",
])
def test_an_import_warns_where_fugit_reads_the_cron_differently(text: str) -> None:
    config = load_config_text(text)
    (warning,) = [w for w in config.warnings if "read this cron differently" in w]
    assert "schedule 'report'" in warning and "fires on days matching either one" in warning


def test_an_import_says_nothing_when_fugit_reads_the_cron_alike() -> None:
    config = load_config_text("report:\n  cron: '0 9 * * 1-5'\n  class: ReportWorker\n")
    assert not [w for w in config.warnings if "read this cron differently" in w]
