"""Plain-English readings of cron expressions and intervals."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings

from kiqbeat.core.cron import parse_cron, parse_every
from kiqbeat.core.describe import describe_cron, describe_every
from kiqbeat.errors import ConfigError

from .cron_strategies import crons


@pytest.mark.parametrize(
    ("expr", "reading"),
    [
        ("0 * * * *", "every hour at minute 0"),
        ("@hourly", "every hour at minute 0"),
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("0 9 * * 1-5", "at 09:00 on Monday through Friday"),
        ("0 9 * * mon-fri Europe/Paris", "at 09:00 on Monday through Friday"),
        ("*/2 * * * * *", "every 2 seconds"),
        ("0 */2 * * *", "at minute 0 past every 2nd hour"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("0 9,17 * * *", "at 09:00 and 17:00"),
        ("30 9 * * 5-7", "at 09:30 on Friday through Sunday"),
        ("0 0 * * 0,6", "at 00:00 on Saturday and Sunday"),
        ("0 0 13 * 5", "at 00:00 on day 13 of the month or on Friday"),
        ("0 18 L * *", "at 18:00 on the last day of the month"),
        ("0 0 -7-L * *", "at 00:00 on the last 7 days of the month"),
        ("0 0 1,-2 * *", "at 00:00 on day 1 and the second-to-last day of the month"),
        ("0 5 * * mon#1", "at 05:00 on the first Monday of the month"),
        ("0 7 * * fri#L", "at 07:00 on the last Friday of the month"),
        ("0 7 * * 5#-2", "at 07:00 on the second-to-last Friday of the month"),
        ("0 23 * * mon#2,tue", "at 23:00 on the second Monday of the month and on Tuesday"),
        ("0 0 L * mon#1", "at 00:00 on the last day of the month or on the first Monday of "
         "the month"),
        ("0 9 1-7& * mon", "at 09:00 on days 1 through 7 of the month, if it is a Monday"),
        ("0 9 L * fri&", "at 09:00 on the last day of the month, if it is a Friday"),
        (
            "0 0 1 jan-mar,dec *",
            "at 00:00 on day 1 of the month in January through March and December",
        ),
        ("5-10 9-17 * * *", "at minutes 5 through 10 past hours 9 through 17"),
        ("* 9 * * *", "every minute of hour 9"),
        ("30 0 9 * * *", "at 09:00:30"),
        ("*/20 30 9 * * *", "every 20 seconds during 09:30"),
        ("15 * * * * *", "at second 15 of every minute"),
        ("0 0 9 * * *", "at 09:00"),
    ],
)
def test_common_shapes_read_naturally(expr: str, reading: str) -> None:
    assert describe_cron(parse_cron(expr)) == reading


def test_steps_that_do_not_divide_the_hour_are_listed_not_called_every_n() -> None:
    # */7 fires at :56 then :00 — four minutes apart — so "every 7 minutes" would be wrong.
    assert describe_cron(parse_cron("*/7 * * * *")) == (
        "every hour at minutes 0, 7, 14, 21, 28, 35, 42, 49 and 56"
    )
    assert describe_cron(parse_cron("0 */5 * * *")) == "at minute 0 past hours 0, 5, 10, 15 and 20"


def test_a_star_step_day_field_is_read_as_and_per_vixie() -> None:
    assert describe_cron(parse_cron("0 0 */10 * 1")) == (
        "at 00:00 on days 1, 11, 21 and 31 of the month, if it is a Monday"
    )


@pytest.mark.parametrize(
    ("text", "reading"),
    [
        ("30s", "every 30 seconds"),
        ("1", "every second"),
        ("15m", "every 15 minutes"),
        ("1h30m", "every 90 minutes from 00:00 UTC"),
        ("6h", "every 6 hours from 00:00 UTC"),
        ("7m", "every 7 minutes (counted from 1970-01-01 00:00 UTC)"),
        ("2d", "every 2 days (counted from 1970-01-01 00:00 UTC)"),
        ("1w", "every week (counted from 1970-01-01 00:00 UTC)"),
    ],
)
def test_intervals_read_naturally_and_say_their_anchor(text: str, reading: str) -> None:
    assert describe_every(parse_every(text)) == reading


@settings(max_examples=200, deadline=None)
@given(spec=crons())
def test_every_valid_expression_gets_a_reading(spec: tuple[str, str, bool]) -> None:
    expr, zone_name, _ = spec
    try:
        cron = parse_cron(expr, zone_name)
    except ConfigError:
        assume(False)
        raise
    assert describe_cron(cron).strip()


def test_a_schedules_life_ends_with_what_its_jobs_are_expected_to_do() -> None:
    from kiqbeat.core.describe import describe_life
    from kiqbeat.document import load_config_text

    (expecting, plain) = load_config_text(
        "schedules:\n"
        "  a: {cron: '0 9 * * *', class: A, expect_success_within: 15m,\n"
        "      alert_after_failures: 1, pause_after_failures: 3}\n"
        "  b: {cron: '0 9 * * *', class: B}\n").schedules
    assert describe_life(expecting) == (
        "silent when a tick's job has not succeeded within 15m; failing after 1 failed tick "
        "in a row; pauses itself after 3 failed ticks in a row")
    assert describe_life(plain) == ""
