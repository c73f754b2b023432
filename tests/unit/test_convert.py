"""`kiqbeat convert` and the migration warnings (issue 29): another tool's file written as a
kiqbeat document that validates and fires exactly as the import of the file does, every
warning kept as a comment; the once-per-file catch-up warning; kiqbeat's own keys kept.

What the tools do after an outage is from their source: sidekiq-cron 1.8
(`Job#not_past_scheduled_time?`: a tick is enqueued only while `previous_time` is at most
60 s old; 1.9+ names that `reschedule_grace_period`, 60 s by default) enqueues at most the
latest tick; sidekiq-scheduler runs its jobs with rufus-scheduler inside the Sidekiq
process, which runs none of the ticks missed while no process ran.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from kiqbeat.core.payload import job_json
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text, parse_config
from kiqbeat.document.emit import kiqbeat_document
from kiqbeat.document.imported import ImportOptions
from kiqbeat.document.read import parse
from kiqbeat.errors import ConfigError

CORPUS = Path(__file__).parent / "import_corpus"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# The options each file is imported with (the flags its tests pass).
OPTIONS: dict[str, dict[str, object]] = {
    "environments.yml": {"section": "production"},
    "recurring.yml": {"section": "production"},
    "recurring_hash_args.yml": {"section": "production"},
    "recurring_rails8.yml": {"section": "production"},
    "recurring_symbol_keys.yml": {"section": "production"},
    "cron_migration.yml": {"app_zone": "America/New_York"},
}
# Spans holding the 2026 DST nights of New York, Europe and Sydney, and ordinary days.
SPANS = [(datetime(2026, 3, 7, tzinfo=UTC), datetime(2026, 3, 10, tzinfo=UTC)),
         (datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 30, tzinfo=UTC)),
         (datetime(2026, 4, 4, tzinfo=UTC), datetime(2026, 4, 6, tzinfo=UTC)),
         (datetime(2026, 10, 3, tzinfo=UTC), datetime(2026, 10, 5, tzinfo=UTC)),
         (datetime(2026, 10, 24, tzinfo=UTC), datetime(2026, 10, 26, tzinfo=UTC)),
         (datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))]


def imported(name: str, **extra: object) -> Config:
    path = CORPUS / name
    doc, duplicates = parse(path.read_bytes(), str(path))
    options = ImportOptions(**{**OPTIONS.get(name, {}), **extra})  # type: ignore[arg-type]
    return parse_config(doc, source=name, problems=duplicates, options=options, now=NOW)


def converted(name: str, **flags: str) -> str:
    path = CORPUS / name
    options = ImportOptions(**OPTIONS.get(name, {}))  # type: ignore[arg-type]
    return kiqbeat_document(path.read_bytes(), source=name, options=options, now=NOW,
                            **flags).text


def ticks(config: Config) -> dict[str, list[datetime]]:
    return {s.name: [t for a, b in SPANS for t in s.timetable.between(a, b)]
            for s in config.schedules}


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.yml")))
def test_every_corpus_file_converts_to_a_document_that_fires_as_its_import(name: str) -> None:
    try:
        before = imported(name)
    except ConfigError as refused:
        with pytest.raises(ConfigError) as caught:
            converted(name)
        assert caught.value.problems == refused.problems
        return
    text = converted(name)
    after = load_config_text(text, source="converted.yml")
    assert yaml.safe_load(text)["time_zone"] == before.time_zone
    assert [s.name for s in after.schedules] == [s.name for s in before.schedules]
    assert ticks(after) == ticks(before)
    for old, new in zip(before.schedules, after.schedules, strict=True):
        # The same stored form, and byte for byte the same job at a tick.
        assert dict(new.definition) == dict(old.definition)
        tick = old.timetable.next_after(NOW)
        assert job_json(new, tick, pushed_at=NOW) == job_json(old, tick, pushed_at=NOW)
    # Every warning of the import is there, whole, in a comment.
    comments = " ".join(line.strip().removeprefix("#").strip()
                        for line in text.splitlines() if line.lstrip().startswith("#"))
    for warning in before.warnings:
        assert " ".join(warning.split()) in comments


def test_a_schedule_s_warning_is_a_comment_beside_it() -> None:
    text = converted("dst_new_york.yml")
    lines = text.splitlines()
    at = lines.index("  early_batch:")
    block = []
    for line in reversed(lines[:at]):
        if not line.startswith("  #"):
            break
        block.insert(0, line)
    comment = " ".join(line.strip().lstrip("#").strip() for line in block)
    assert comment.startswith("warning: schedule 'early_batch': daylight saving: on 2026-03-08")
    assert "add dst: fugit to the schedule to keep sidekiq-cron's instants" in comment


def test_catch_up_and_dst_flags_write_kiqbeat_s_fields() -> None:
    text = converted("cron_migration.yml", catch_up="none", dst="fugit")
    config = load_config_text(text)
    s = {x.name: x for x in config.schedules}
    assert {n: x.catch_up for n, x in s.items()} == {
        "heartbeat": "none", "sync_inventory": "none", "nightly_settlement": "latest",
        "early_export": "none"}
    assert "catch-up:" not in text and "daylight saving:" not in text
    # dst: fugit: 02:30 New York does not fire on 8 March, as under sidekiq-cron.
    spring = s["early_export"].timetable.between(*SPANS[0])
    assert [t.day for t in spring] == [7, 9]


def test_converting_a_kiqbeat_document_is_refused() -> None:
    with pytest.raises(ConfigError, match="already a kiqbeat document"):
        kiqbeat_document("schedules: {a: {cron: '* * * * *', class: J}}")


# ---------------------------------------------------------------- the import's warnings


def test_a_migrated_file_warns_once_of_catch_up_naming_its_frequent_schedules() -> None:
    config = imported("cron_migration.yml")
    (warning,) = [w for w in config.warnings if w.startswith("catch-up:")]
    assert "for the 3 schedule(s) without catch_up" in warning
    assert "sidekiq-cron enqueued only the latest missed tick" in warning
    assert "reschedule_grace_period (60 s by default)" in warning
    assert ("the 2 schedule(s) firing every 15 minutes or more often ('heartbeat', "
            "'sync_inventory')") in warning
    assert "catch_up: latest" in warning and "catch_up: none" in warning


def test_an_invocation_reading_the_file_does_not_look_for_frequent_schedules() -> None:
    path = CORPUS / "cron_migration.yml"
    doc, _ = parse(path.read_bytes(), str(path))
    config = parse_config(doc, options=ImportOptions(app_zone="America/New_York"))
    assert not [w for w in config.warnings if "catch-up:" in w or "daylight" in w]


def test_a_sidekiq_scheduler_file_gets_its_own_catch_up_warning() -> None:
    (warning,) = [w for w in imported("scheduler_classless.yml").warnings
                  if w.startswith("catch-up:")]
    assert "sidekiq-scheduler (rufus-scheduler in the Sidekiq process) ran none" in warning


def test_other_tools_files_get_no_catch_up_warning() -> None:
    assert not [w for w in imported("good_job.yml").warnings if "catch-up:" in w]


def test_kiqbeat_s_own_keys_in_a_sidekiq_cron_file_are_kept_and_named() -> None:
    config = imported("cron_migration.yml")
    settlement = {s.name: s for s in config.schedules}["nightly_settlement"]
    assert settlement.catch_up == "latest"
    assert settlement.definition["dst"] == "fugit"
    (kept,) = [w for w in config.warnings if w.startswith("kiqbeat's own keys kept")]
    assert "'catch_up' ('nightly_settlement'); 'dst' ('nightly_settlement')" in kept
    assert not [w for w in config.warnings if "ignores these keys" in w]


def test_dst_warnings_follow_the_app_zone_and_the_schedule_s_policy() -> None:
    config = imported("cron_migration.yml")
    dst = [w for w in config.warnings if "daylight saving" in w]
    # early_export runs in the app's zone (--app-zone) and is warned about; the settlement
    # job keeps fugit's instants (dst: fugit) and is not; wildcard crons never are.
    assert [w.split(":")[0] for w in dst] == ["schedule 'early_export'"]
    assert "on 2026-03-08 clocks in America/New_York go forward 1 h" in dst[0]
    assert "add dst: fugit to the schedule to keep sidekiq-cron's instants" in dst[0]


def test_a_sidekiq_scheduler_file_s_kiqbeat_keys_are_kept_and_its_interval_is_frequent() -> None:
    config = imported("scheduler_migration.yml")
    s = {x.name: x for x in config.schedules}
    assert s["nightly_rollup"].catch_up == "none"
    assert s["nightly_rollup"].definition["dst"] == {"repeated": "both", "skipped": "skip"}
    assert "payload" not in s["nightly_rollup"].definition  # not pushed with the job
    (kept,) = [w for w in config.warnings if w.startswith("kiqbeat's own keys kept")]
    assert "'catch_up' ('nightly_rollup'); 'dst' ('nightly_rollup')" in kept
    (catch_up,) = [w for w in config.warnings if w.startswith("catch-up:")]
    assert "for the 2 schedule(s) without catch_up" in catch_up
    assert "firing every 15 minutes or more often ('poll_feeds')" in catch_up
    # The rollup keeps fugit's instants (both, skip): no DST warning; the digest at 07:00
    # is touched by no change; so none at all.
    assert not [w for w in config.warnings if "daylight saving" in w]
