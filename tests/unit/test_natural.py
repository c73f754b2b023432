"""fugit's natural-language schedules, translated to the cron fugit makes of each.

The expected crons are fugit 1.14's, from its specification table
(floraison/fugit `test/_nat_single_crons.txt`) and `lib/fugit/nat.rb`: hours with am/pm
follow `adjust_h` (12 am is 0, 12 pm is 12), times sharing their minutes share one cron
(`determine_hms`), `every N <unit>` puts `*/N` in that field and zeros below it
(`rewrite_every_interval`).
"""

from __future__ import annotations

import pytest

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.natural import is_natural, natural_cron
from kiqbeat.document import load_config_text
from kiqbeat.errors import ConfigError


@pytest.mark.parametrize(("text", "cron"), [
    ("every day at five", "0 5 * * *"),
    ("every weekday", "0 0 * * 1-5"),
    ("every weekday at five pm", "0 17 * * 1-5"),
    ("every tuesday at 5 pm", "0 17 * * 2"),
    ("every day at 16:30", "30 16 * * *"),
    ("every day at noon", "0 12 * * *"),
    ("every day at midnight", "0 0 * * *"),
    ("every day at 5 pm in Asia/Tokyo", "0 17 * * * Asia/Tokyo"),
    ("every day at 5 pm on America/Bogota", "0 17 * * * America/Bogota"),
    ("every day at midnight America/Los_Angeles", "0 0 * * * America/Los_Angeles"),
    ("every 3 hours", "0 */3 * * *"),
    ("every 4M", "0 0 1 */4 *"),
    ("every 5m", "*/5 * * * *"),
    ("every 5 minutes", "*/5 * * * *"),
    ("every 15 seconds", "*/15 * * * * *"),
    ("every 1 h", "0 * * * *"),
    ("every hour", "0 * * * *"),
    ("every minute", "* * * * *"),
    ("every week", "0 0 * * 0"),
    ("every month", "0 0 1 * *"),
    ("every year at 20:10", "10 20 1 1 *"),
    ("every 2 days at 17:00", "0 17 */2 * *"),
    ("every day at 12:15am", "15 0 * * *"),
    ("every day at 12pm", "0 12 * * *"),
    ("every day at 6pm and 8pm UTC", "0 18,20 * * * UTC"),
    ("every day at 18:00, 18:15, 20:00, and 20:15", "0,15 18,20 * * *"),
    ("every wed or Monday at 5pm and 11", "0 11,17 * * 1,3"),
    ("every Mon, Tue, and Wed at 18:15", "15 18 * * 1,2,3"),
    ("every Mon to Thu, 18:20", "20 18 * * 1-4"),
    ("every Fri-Sun at 18:00 UTC", "0 18 * * 5-0 UTC"),
    ("from Monday through Friday at 19:21", "21 19 * * 1-5"),
    ("every monday 18:24", "24 18 * * 1"),
    ("every 15th of the month", "0 0 15 * *"),
    ("every month on days 1,15 at 10:00", "0 10 1,15 * *"),
    ("at 12 PM", "0 12 * * *"),
    ("at noon", "0 12 * * *"),
    ("at 5am every day", "0 5 * * *"),
    ("every day at 3:20 am Australia/Sydney", "20 3 * * * Australia/Sydney"),
    # issue 21 review: Solid Queue's own example, and the table's other `at_p` points
    ("every hour at minute 12", "12 * * * *"),
    ("every 12 hours at minute 50", "50 */12 * * *"),
    ("every 12h at min 50", "50 */12 * * *"),
    ("every minute at second 10 and 40", "10,40 * * * * *"),
    ("every week on monday 18:23", "23 18 * * 1"),
    ("every first of the month at midnight", "0 0 1 * *"),
    ("Every second of the month at 10:00", "0 10 2 * *"),
    # fugit writes '0 24 * * *', and its cron reader takes hour 24 as 0 (`do_determine`)
    ("every day at 12 midnight", "0 0 * * *"),
    ("every day at 12:15 midnight", "15 0 * * *"),
])
def test_a_natural_language_schedule_becomes_fugits_cron(text: str, cron: str) -> None:
    assert is_natural(text)
    assert natural_cron(text).cron == cron
    parse_cron(cron)  # and kiqbeat reads that cron


def test_a_step_that_does_not_divide_its_field_says_what_the_cron_really_does() -> None:
    reading = natural_cron("every 90 minutes")
    assert reading.cron == "*/90 * * * *"  # fugit's cron: minute 0 of each hour
    assert "does not fire every 90 minutes; for that, write every: 90m" in reading.note
    assert natural_cron("every 5 minutes").note == ""


@pytest.mark.parametrize(("text", "nearest"), [
    # fugit makes two crons of it: sidekiq-cron refuses it, GoodJob keeps the first.
    ("every day at 18:15 and 20:45", "'15 18 * * *'"),
    ("every other tuesday at 9am", "'0 9 * * 2'"),
    ("every 15 minutes starting at minute 1", "every: 15m"),
    ("every first day of the month at 1am", "'0 1 1 * *'"),
])
def test_forms_kiqbeat_does_not_translate_are_refused_with_the_nearest_cron(
    text: str, nearest: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        natural_cron(text)
    (problem,) = caught.value.problems
    assert "is natural language (fugit's reader" in problem and nearest in problem


def test_an_interval_fugit_cannot_read_either_says_the_tool_never_ran_it() -> None:
    # fugit's intervals are seconds..months, plus 'every week' and 'every year' alone.
    with pytest.raises(ConfigError) as caught:
        natural_cron("every 2 weeks")
    (problem,) = caught.value.problems
    assert "fugit cannot read it either" in problem and "the tool never ran this job" in problem
    assert "write the interval as every: 2w" in problem


def test_cron_expressions_and_macros_are_not_natural_language() -> None:
    assert not any(map(is_natural, ["0 9 * * 1-5", "@daily", "*/5 * * * * Europe/Paris"]))


def test_a_natural_language_schedule_longer_than_fugits_limit_is_refused_unread() -> None:
    with pytest.raises(ConfigError, match="at most 256"):
        natural_cron("every day at " + "5 and " * 10_000 + "6")


def test_a_kiqbeat_document_reads_a_phrase_as_its_cron_with_a_zones_checks() -> None:
    config = load_config_text("""
schedules:
  standup: {cron: "every weekday at 9:15am Europe/Paris", class: S, tz: Asia/Tokyo}
  odd: {cron: "every 90 minutes", class: O}
""")
    timings = {s.name: s.timing for s in config.schedules}
    assert timings == {"standup": "every weekday at 9:15am Europe/Paris → 15 9 * * 1-5 "
                                  "(Europe/Paris)",
                       "odd": "every 90 minutes → */90 * * * * (UTC)"}
    assert config.warnings == (
        "schedule 'standup': the zone in its cron string (Europe/Paris) wins over tz "
        "'Asia/Tokyo'",
        "schedule 'odd': 'every 90 minutes' reads as the cron '*/90 * * * *' (as fugit reads "
        "it), but a step of 90 does not divide the 60 minutes of a hour, so it restarts each "
        "hour and does not fire every 90 minutes; for that, write every: 90m",
    )
    standup = next(s for s in config.schedules if s.name == "standup")
    assert standup.definition["cron"] == "every weekday at 9:15am Europe/Paris"


def test_a_phrase_kiqbeat_does_not_translate_is_refused_in_a_document_naming_the_schedule(
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("schedules:\n  a: {cron: every other tuesday, class: A}\n")
    (problem,) = caught.value.problems
    assert problem.startswith("schedule 'a' (field 'cron'): 'every other tuesday' is natural "
                              "language")
    assert "the nearest cron is '0 0 * * 2'" in problem
