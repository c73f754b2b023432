"""Realistic schedule files of other tools (tests/unit/import_corpus, written for these tests),
each imported and checked against what the tool itself would run: the jobs, their next fire
times, and the warnings where kiqbeat's reading differs (issue 21).

fugit's readings below come from floraison/fugit 1.14: `lib/fugit/nat.rb` and the table
`test/_nat_single_crons.txt` for natural language ('every hour' -> '0 * * * *', 'every 5
minutes' -> '*/5 * * * *', 'every monday at 9am' -> '0 9 * * 1', 'every day at 3:20 am
Australia/Sydney' -> '20 3 * * * Australia/Sydney', 'at 5am every day' -> '0 5 * * *'), and
`lib/fugit/cron.rb` for daylight saving: its `TimeCursor` moves by real seconds and stops at
the first instant whose wall time matches, so a wall time in a spring-forward gap is never
matched and one in a repeated hour is matched in both passes (`previous_time`, which
sidekiq-cron polls, returns each).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kiqbeat.core.cron import Cron
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document import parse_config
from kiqbeat.document.fields import ACTIVE_JOB_WRAPPER
from kiqbeat.document.imported import ImportOptions
from kiqbeat.document.read import parse
from kiqbeat.errors import ConfigError

CORPUS = Path(__file__).parent / "import_corpus"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def imported(name: str, **options: object) -> Config:
    path = CORPUS / name
    doc, duplicates = parse(path.read_bytes(), str(path))
    return parse_config(doc, source=name, warnings=duplicates,
                        options=ImportOptions(**options), now=NOW)  # type: ignore[arg-type]


def refused(name: str, **options: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        imported(name, **options)
    return caught.value


def by_name(config: Config) -> dict[str, Schedule]:
    return {s.name: s for s in config.schedules}


def fires(schedule: Schedule, count: int = 2, after: datetime = NOW) -> list[str]:
    out = []
    for _ in range(count):
        after = schedule.timetable.next_after(after)
        out.append(after.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return out


def warned(config: Config, text: str) -> list[str]:
    return [w for w in config.warnings if text in w]


# ---------------------------------------------------------------- format detection


def test_a_sidekiq_scheduler_file_of_class_less_jobs_is_read_as_sidekiq_schedulers() -> None:
    config = imported("scheduler_classless.yml")
    s = by_name(config)
    assert set(s) == {"PruneSessionsJob", "RefreshExchangeRatesJob"}
    assert (s["PruneSessionsJob"].job_class, s["PruneSessionsJob"].queue) == (
        "PruneSessionsJob", "maintenance")
    assert s["RefreshExchangeRatesJob"].job_class == "RefreshExchangeRatesJob"
    assert config.warnings[0].startswith("read as a sidekiq-scheduler file")
    # The zone key is not a zone to sidekiq-scheduler: the cron keeps UTC here (the app's
    # zone is not given), and the warning says which reading was kept and how to opt in.
    assert fires(s["RefreshExchangeRatesJob"]) == ["2026-01-01T06:00:00Z",
                                                   "2026-01-01T12:00:00Z"]
    (zone_warning,) = warned(config, "timezone 'Europe/Berlin' ignored")
    assert "kiqbeat kept sidekiq-scheduler's reading" in zone_warning
    assert "--honour-tz" in zone_warning
    (skip,) = warned(config, "schedule 'LegacyMailerJob': skipped")
    assert "no timer" in skip and "disabled" in skip


def test_honour_tz_applies_the_zone_key_sidekiq_scheduler_ignored() -> None:
    s = by_name(imported("scheduler_classless.yml", honour_tz=True))
    assert fires(s["RefreshExchangeRatesJob"]) == ["2026-01-01T05:00:00Z",
                                                   "2026-01-01T11:00:00Z"]


def test_a_good_job_file_is_read_as_active_job_jobs() -> None:
    config = imported("good_job.yml")
    s = by_name(config)
    report = s["weekly_report"]
    assert (report.job_class, report.active_job_wrapper, report.queue) == (
        "WeeklyReportJob", ACTIVE_JOB_WRAPPER, "reports")
    # args splatted, kwargs as ActiveJob serializes keyword arguments.
    assert report.args == ("summary", {"recipients": "ops", "_aj_ruby2_keywords": ["recipients"]})
    assert report.description == "Weekly report for ops"
    assert fires(report) == ["2026-01-05T09:00:00Z", "2026-01-12T09:00:00Z"]  # Mondays
    assert s["cleanup"].enabled is False
    text = "\n".join(config.warnings)
    assert "read as a GoodJob file" in text
    assert "'every monday at 9am' is natural language; GoodJob (fugit) reads it as the cron " \
           "'0 9 * * 1'" in text
    assert "set 'priority' ignored" in text
    assert "1 job(s) without a queue ('cleanup'): GoodJob enqueued them on their class's " \
           "queue_as" in text


def test_a_solid_queue_file_names_its_format_and_refuses_a_command_task() -> None:
    error = refused("recurring.yml", section="production")
    assert "(read as a Solid Queue file)" in str(error)
    (problem,) = error.problems
    assert problem.startswith("schedule 'purge_sessions': Solid Queue's command: "
                              "'Session.stale.delete_all' evaluates Ruby")


def test_a_solid_queue_file_reads_class_tasks(tmp_path: Path) -> None:
    text = (CORPUS / "recurring.yml").read_text()
    text = text[: text.index("  purge_sessions:")]
    doc, _ = parse(text)
    config = parse_config(doc, options=ImportOptions(section="production"), now=NOW)
    s = by_name(config)
    cleanup = s["periodic_cleanup"]
    assert (cleanup.queue, cleanup.active_job_wrapper) == ("background", ACTIVE_JOB_WRAPPER)
    # Solid Queue passes a last hash as keyword arguments.
    assert cleanup.args == (1000, {"batch_size": 500, "_aj_ruby2_keywords": ["batch_size"]})
    assert fires(cleanup) == ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]
    assert fires(s["nightly_digest"]) == ["2026-01-01T05:00:00Z", "2026-01-02T05:00:00Z"]
    assert warned(config, "schedule 'nightly_digest': priority 2 ignored")


def test_format_flag_overrides_detection() -> None:
    config = imported("leading_colons.yml", format="good_job")
    assert config.schedules[0].active_job_wrapper == ACTIVE_JOB_WRAPPER
    assert config.warnings[0].startswith("read as a GoodJob file (as --format says)")


# ---------------------------------------------------------------- keys the tool ignores


def test_sidekiq_cron_ignores_tz_and_other_keys_and_kiqbeat_says_so() -> None:
    config = imported("cron_ignored_keys.yml")
    s = by_name(config)
    # 30 9 * * * stays at 09:30 in the app's zone (UTC here), not 08:30Z as Berlin would make it.
    assert fires(s["nightly_export"]) == ["2026-01-01T09:30:00Z", "2026-01-02T09:30:00Z"]
    assert s["log_rotation"].queue == "low"
    assert warned(config, "sidekiq-cron ignores these keys, so kiqbeat does too: 'desc' "
                          "('nightly_export'); 'output' ('log_rotation')")
    assert warned(config, "schedule 'nightly_export': tz 'Europe/Berlin' ignored, as "
                          "sidekiq-cron ignores it")


def test_the_app_zone_applies_to_crons_without_one() -> None:
    config = imported("cron_ignored_keys.yml", app_zone="America/Sao_Paulo")
    s = by_name(config)
    assert fires(s["nightly_export"]) == ["2026-01-01T12:30:00Z", "2026-01-02T12:30:00Z"]
    assert warned(config, "run in America/Sao_Paulo, the app's zone")


def test_the_zone_warning_points_at_the_apps_zone() -> None:
    (warning,) = warned(imported("cron_ignored_keys.yml"), "cron(s) without a zone")
    assert "sidekiq-cron read them in the app's zone (Rails config.time_zone, else $TZ" in warning
    assert "pass --app-zone ZONE" in warning


# ---------------------------------------------------------------- natural language


def test_natural_language_crons_are_translated_as_fugit_reads_them() -> None:
    config = imported("natural.yml")
    s = by_name(config)
    expected = {
        "sydney_report": ("20 3 * * * Australia/Sydney", ["2026-01-01T16:20:00Z",
                                                         "2026-01-02T16:20:00Z"]),
        "hourly_sync": ("0 * * * *", ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]),
        "monday_digest": ("0 9 * * 1", ["2026-01-05T09:00:00Z", "2026-01-12T09:00:00Z"]),
        "poll_feeds": ("*/5 * * * *", ["2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"]),
    }
    for name, (cron, times) in expected.items():
        timetable = s[name].timetable
        assert isinstance(timetable, Cron) and timetable.expr == cron.removesuffix(
            " Australia/Sydney")
        assert fires(s[name]) == times
        assert warned(config, f"schedule {name!r}: ") and warned(config, f"cron {cron!r}")


def test_an_untranslated_natural_language_cron_is_refused_with_the_nearest_cron() -> None:
    (problem,) = refused("natural_refused.yml").problems
    assert problem.startswith("schedule 'fortnightly' (field 'cron'): 'every other tuesday at "
                              "9am' is natural language")
    assert "the nearest cron is '0 9 * * 2'" in problem


# ---------------------------------------------------------------- classes, DST, seconds


def test_a_class_with_a_leading_double_colon_is_pushed_without_it() -> None:
    (s,) = imported("leading_colons.yml").schedules
    assert s.job_class == "BenefitsIntake::SubmissionStatusJob"


def test_dst_nights_where_fugit_fires_differently_are_named_per_schedule() -> None:
    config = imported("dst_new_york.yml")
    (fall,) = warned(config, "schedule 'morning_batch': daylight saving")
    assert "on 2026-11-01 clocks in America/New_York go back 1 h" in fall
    assert "sidekiq-cron (fugit) also fires at 01:00 EST = 06:00Z" in fall
    (spring,) = warned(config, "schedule 'early_batch': daylight saving")
    assert "on 2026-03-08 clocks in America/New_York go forward 1 h" in spring
    assert "kiqbeat fires 02:30" in spring and "(03:00 EDT = 07:00Z)" in spring
    assert "sidekiq-cron (fugit) does not fire it that day" in spring
    assert not warned(config, "schedule 'every_quarter_hour': daylight saving")
    # kiqbeat's own reading is unchanged (Vixie): 02:30 fires at 03:00 EDT on 8 March.
    early = by_name(config)["early_batch"]
    assert fires(early, 1, datetime(2026, 3, 7, 12, tzinfo=UTC)) == ["2026-03-08T07:00:00Z"]


def test_a_six_field_cron_with_one_seconds_value_gets_no_sub_minute_warning() -> None:
    config = imported("six_fields.yml")
    assert not warned(config, "schedule 'daily_at_0430': fires between minute boundaries")
    assert not warned(config, "schedule 'monthly_first': fires between minute boundaries")
    assert warned(config, "schedule 'every_half_minute': fires between minute boundaries")


# ---------------------------------------------------------------- sections and wrappers


def test_per_environment_sections_are_refused_with_the_section_to_choose() -> None:
    (problem,) = refused("environments.yml").problems
    assert problem.startswith("the top-level keys 'default', 'development', 'production' look "
                              "like per-environment sections; choose the one to import with "
                              "--section production")


def test_a_section_is_read_with_its_anchors_merged() -> None:
    s = by_name(imported("environments.yml", section="production"))
    assert set(s) == {"cleanup", "billing"}
    assert fires(s["billing"]) == ["2026-01-01T06:00:00Z", "2026-02-01T06:00:00Z"]


def test_a_single_wrapping_key_is_unwrapped_with_a_warning() -> None:
    config = imported("wrapped.yml")
    assert set(by_name(config)) == {"digest", "purge"}
    assert warned(config, "the jobs were read from under the single top-level key 'cron'")


def test_import_options_can_live_in_the_file() -> None:
    doc, _ = parse((CORPUS / "environments.yml").read_text()
                   + "kiqbeat:\n  section: production\n  app_zone: Europe/Paris\n")
    config = parse_config(doc, now=NOW)
    s = by_name(config)
    assert fires(s["billing"], 1) == ["2026-01-01T05:00:00Z"]  # 06:00 in Paris (UTC+1)


# ---------------------------------------------------------------- review of the importers
# Files valid for their tool that kiqbeat refused, read differently, or took for another
# tool's (issue 21, second pass). The tools' behaviour is from their source:
# sidekiq-cron `lib/sidekiq/cron/job.rb` and `support.rb`, rails/solid_queue
# `lib/solid_queue/configuration.rb` and `app/models/solid_queue/recurring_task.rb`,
# floraison/fugit `lib/fugit/cron.rb` and `lib/fugit/nat.rb`.


def test_ruby_symbol_values_are_read_as_their_names() -> None:
    (s,) = imported("ruby_symbols.yml").schedules
    # Sidekiq pushes queue.to_s; JSON writes a symbol as its name; quoted text stays text.
    assert s.queue == "critical"
    assert s.args == ({"provider": "google", "mode": "full"}, ":literal")


def test_a_holder_of_yaml_anchors_is_skipped_as_sidekiq_cron_skips_it() -> None:
    config = imported("cron_anchor_holder.yml")
    s = by_name(config)
    assert set(s) == {"sync_accounts", "sync_invoices"}
    assert (s["sync_accounts"].queue, s["sync_accounts"].job_class) == (
        "low", "SyncAccountsWorker")
    assert fires(s["sync_invoices"]) == ["2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z"]
    # The holder has no class, but it is no job: the file stays sidekiq-cron's.
    assert config.warnings[0].startswith("read as a sidekiq-cron file")
    (skip,) = warned(config, "schedule 'x-job-defaults': skipped")
    assert "no cron and no class" in skip and "sidekiq-cron" in skip


def test_rails_8s_generated_recurring_file_imports() -> None:
    config = imported("recurring_rails8.yml", section="production")
    (s,) = config.schedules
    # 'every hour at minute 30': fugit's at_p minutes fill the hour interval's minute field.
    assert (s.name, s.queue, s.timetable.expr) == (  # type: ignore[union-attr]
        "sync_accounts", "accounts", "30 * * * *")
    assert fires(s) == ["2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z"]
    (housekeeping,) = warned(config, "schedule 'clear_solid_queue_finished_jobs': skipped")
    assert "Solid Queue's own housekeeping" in housekeeping
    assert warned(config, "schedule 'paused_for_now': skipped: it is empty")
    assert warned(config, "schedule 'shared': skipped: it has no schedule, so Solid Queue")


def test_a_command_task_of_the_apps_own_is_still_refused() -> None:
    error = refused("recurring.yml", section="production")
    assert "Solid Queue's command: 'Session.stale.delete_all' evaluates Ruby" in str(error)


def test_crons_in_forms_only_fugit_reads_fire_as_fugit_fires_them() -> None:
    config = imported("fugit_cron_forms.yml")
    s = by_name(config)
    assert fires(s["lunch_digest"]) == ["2026-01-01T12:00:00Z", "2026-01-02T12:00:00Z"]
    assert fires(s["midnight_rollup"]) == ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]
    # 09:00 at +09:00 is 00:00Z, on weekdays: Friday 2 January, then Monday 5 January.
    assert fires(s["tokyo_open"]) == ["2026-01-02T00:00:00Z", "2026-01-05T00:00:00Z"]
    for name in ("lunch_digest", "midnight_rollup"):
        (warning,) = warned(config, f"schedule {name!r}: sidekiq-cron (fugit) reads the cron")
        assert "which kiqbeat uses" in warning
    # kiqbeat reads a UTC offset as fugit does, a fixed-offset zone: kept as written.
    assert s["tokyo_open"].timing == "0 9 * * 1-5 (+09:00 (fixed offset, no DST))"
    assert not warned(config, "schedule 'tokyo_open'")


def test_fugits_month_end_and_nth_weekday_forms_fire_in_the_rails_apps_zone() -> None:
    config = imported("cron_month_end.yml", app_zone="Eastern Time (US & Canada)")
    s = by_name(config)
    expected = {  # by hand, from a 2026 calendar; EST is UTC-5 until 8 March
        "month_end_close": ["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"],  # 19:00 EST
        "last_three_days_reconcile": ["2026-01-29T11:30:00Z", "2026-01-30T11:30:00Z"],
        "board_pack": ["2026-01-30T12:00:00Z", "2026-02-27T12:00:00Z"],
        "first_monday_invoices": ["2026-01-05T10:00:00Z", "2026-02-02T10:00:00Z"],
        "payroll": ["2026-01-15T13:00:00Z", "2026-01-31T13:00:00Z"],
        "sprint_review": ["2026-01-07T04:00:00Z", "2026-01-13T04:00:00Z"],
        "bangalore_digest": ["2026-01-01T03:30:00Z", "2026-01-02T03:30:00Z"],
        "sydney_settlement": ["2026-01-01T05:30:00Z", "2026-01-02T05:30:00Z"],
    }
    assert {name: fires(s[name]) for name in expected} == expected
    assert s["month_end_close"].timing == ("0 19 L * * (Eastern Time (US & Canada) "
                                           "(America/New_York))")
    assert s["bangalore_digest"].timing == "0 9 * * 1-5 (+05:30 (fixed offset, no DST))"
    assert config.warnings[0] == ("line 11: duplicate key 'month_end_close' (also at line 6); "
                                  "the last value is kept, as Ruby's YAML loader keeps it")
    # fugit reads these forms as kiqbeat does: no schedule is said to fire on other days.
    assert not warned(config, "read this cron differently")


def test_a_sidekiq_scheduler_file_with_zoned_month_end_crons_fires_as_fugit_reads_it() -> None:
    config = imported("scheduler_rails_zones.yml")
    s = by_name(config)
    expected = {
        "tokyo_morning_report": ["2026-01-02T00:00:00Z", "2026-01-05T00:00:00Z"],
        # 22:00 on 31 December 2025 (EST) is 03:00Z on 1 January; 31 March is in EDT.
        "quarter_end_snapshot": ["2026-01-01T03:00:00Z", "2026-04-01T02:00:00Z"],
        "second_to_last_friday_sync": ["2026-01-23T20:00:00Z", "2026-02-20T20:00:00Z"],
        "london_close": ["2026-01-31T16:30:00Z", "2026-02-28T16:30:00Z"],
    }
    assert {name: fires(s[name]) for name in expected} == expected
    assert not warned(config, "read this cron differently")


def test_erb_is_refused_naming_the_tag_and_its_line() -> None:
    (problem,) = refused("erb.yml").problems
    assert problem.startswith("line 3: the document contains ERB tags (\"<%= ENV.fetch(")
    assert "render it to plain YAML first" in problem


def test_keyword_argument_makes_an_active_job_with_keyword_arguments() -> None:
    config = imported("scheduler_keyword_argument.yml")
    s = by_name(config)
    export = s["nightly_export"]
    assert export.active_job_wrapper == ACTIVE_JOB_WRAPPER
    assert export.args == ({"format": "csv", "full": True,
                            "_aj_ruby2_keywords": ["format", "full"]},)
    assert fires(export) == ["2026-01-01T02:00:00Z", "2026-01-02T02:00:00Z"]
    assert not s["ping"].active_job_wrapper and s["ping"].args == ()
    assert warned(config, "'NightlyExportJob' is one: kiqbeat pushes it in Sidekiq's "
                          "ActiveJob envelope")


def test_intervals_counted_from_the_process_start_are_named_once() -> None:
    config = imported("scheduler_keyword_argument.yml")
    (warning,) = warned(config, "'every' schedule(s)")
    assert warning.startswith("1 'every' schedule(s) ('ping'): sidekiq-scheduler (rufus) "
                              "counted each interval from when the Sidekiq process started")


@pytest.mark.parametrize(("name", "tool", "unqueued"), [
    ("cron_ignored_keys.yml", "sidekiq-cron", "1 job(s) without a queue ('nightly_export')"),
    ("scheduler_keyword_argument.yml", "sidekiq-scheduler",
     "1 job(s) without a queue ('nightly_export')"),
])
def test_jobs_without_a_queue_are_named_once_since_the_tool_took_their_classs(
    name: str, tool: str, unqueued: str,
) -> None:
    (warning,) = warned(imported(name), "job(s) without a queue")
    assert warning.startswith(f"{unqueued}: {tool} enqueued them on their class's queue "
                              "(sidekiq_options queue:, or queue_as for ActiveJob classes)")


@pytest.mark.parametrize(("name", "options"), [
    ("cron_ignored_keys.yml", {}), ("scheduler_classless.yml", {}), ("good_job.yml", {}),
    ("recurring_rails8.yml", {"section": "production"}), ("six_fields.yml", {}),
    ("wrapped.yml", {}), ("dst_new_york.yml", {}), ("natural.yml", {}),
    ("cron_anchor_holder.yml", {}), ("fugit_cron_forms.yml", {}),
    ("scheduler_keyword_argument.yml", {}), ("scheduler_rails_zones.yml", {}),
])
def test_every_import_warning_names_the_tool(name: str, options: dict[str, str]) -> None:
    config = imported(name, **options)
    tool = config.warnings[0].removeprefix("read as a ").split(" file")[0]
    # The sub-minute warning is kiqbeat's own, given to every document alike.
    assert all(tool in w for w in config.warnings if "minute boundaries" not in w)


def test_solid_queue_hash_arguments_keep_their_symbol_keys() -> None:
    (s,) = imported("recurring_symbol_keys.yml", section="production").schedules
    assert s.active_job_wrapper == ACTIVE_JOB_WRAPPER
    assert s.args == (
        {"status": "pending", "_aj_symbol_keys": ["status"]},
        42,
        {"batch_size": 500, "options": {"dry_run": True, "_aj_symbol_keys": ["dry_run"]},
         "_aj_ruby2_keywords": ["batch_size", "options"]},
    )
    assert fires(s) == ["2026-01-01T04:15:00Z", "2026-01-02T04:15:00Z"]


def test_solid_queue_args_given_as_a_hash_are_refused_saying_what_to_write() -> None:
    (problem,) = refused("recurring_hash_args.yml", section="production").problems
    assert problem.startswith("schedule 'reindex' (field 'args'): {'batch_size': 500} is a "
                              "hash, which Solid Queue turns into a list of [key, value] pairs")
    assert "write args: [{...}]" in problem


def test_sidekiq_cron_symbolize_args_gives_an_active_job_symbol_keys() -> None:
    config = imported("cron_active_job_symbolize.yml")
    (s,) = config.schedules
    # Shallow, as sidekiq-cron's symbolize_args: the nested hash keeps String keys.
    assert s.args == ({"days": 30, "scope": {"kind": "audit"},
                       "_aj_symbol_keys": ["days", "scope"]},)
    assert not warned(config, "symbolize_args ignored")
