"""The cron dialect, its errors, and interval schedules (DESIGN §3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kiqbeat.core.cron import Cron, Every, fire_times, parse_cron, parse_every, zone
from kiqbeat.errors import ConfigError

T0 = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


def fires(expr: str, days: float = 1, tz: str = "UTC", start: datetime = T0) -> list[datetime]:
    return fire_times(expr, tz=tz, after=start, until=start + timedelta(days=days))


def minutes_of(expr: str) -> list[int]:
    return sorted({t.minute for t in fires(expr)})


def hours_of(expr: str) -> list[int]:
    return sorted({t.hour for t in fires(expr)})


def weekdays_of(expr: str) -> list[int]:
    """Cron day numbers (0 = Sunday) on which `expr` fires in a 2-week span."""
    return sorted({t.isoweekday() % 7 for t in fires(expr, days=14)})


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        ("* * * * *", list(range(60))),
        ("*/15 * * * *", [0, 15, 30, 45]),
        ("5/15 * * * *", [5, 20, 35, 50]),
        ("59/1 * * * *", [59]),
        ("10-20/5 * * * *", [10, 15, 20]),
        ("5-5 * * * *", [5]),
        ("1,2,58 * * * *", [1, 2, 58]),
        ("55-5 * * * *", [0, 1, 2, 3, 4, 5, 55, 56, 57, 58, 59]),
        ("*/7 * * * *", [0, 7, 14, 21, 28, 35, 42, 49, 56]),
        ("*/60 * * * *", [0]),
    ],
)
def test_minute_field_forms_expand_as_vixie_cron_does(expr: str, minutes: list[int]) -> None:
    assert minutes_of(expr) == minutes


def test_n_slash_s_means_n_to_max_in_steps_of_s_in_the_hour_field() -> None:
    assert hours_of("0 5/6 * * *") == [5, 11, 17, 23]


def test_wrapped_hour_range_runs_through_midnight() -> None:
    assert hours_of("0 22-2 * * *") == [0, 1, 2, 22, 23]


@pytest.mark.parametrize(
    ("expr", "days"),
    [
        ("0 0 * * 1-5", [1, 2, 3, 4, 5]),
        ("0 0 * * mon-fri", [1, 2, 3, 4, 5]),
        ("0 0 * * MON,wed,Fri", [1, 3, 5]),
        ("0 0 * * 7", [0]),
        ("0 0 * * 0", [0]),
        ("0 0 * * 5-7", [0, 5, 6]),
        ("0 0 * * 0-7", [0, 1, 2, 3, 4, 5, 6]),
        ("0 0 * * sat-sun", [0, 6]),
        ("0 0 * * fri-mon", [0, 1, 5, 6]),
        ("0 0 * * */2", [0, 2, 4, 6]),
        ("0 0 * * 1/2", [1, 3, 5]),
    ],
)
def test_day_of_week_forms_with_sunday_as_0_or_7(expr: str, days: list[int]) -> None:
    assert weekdays_of(expr) == days


def test_month_names_select_months() -> None:
    ticks = fires("0 0 1 jan-mar,DEC *", days=366, start=T0 - timedelta(seconds=1))
    assert [t.month for t in ticks] == [1, 2, 3, 12]


def test_day_of_month_and_day_of_week_are_ored_when_both_restricted() -> None:
    # January 2024: the 13th is a Saturday; Fridays are 5, 12, 19, 26.
    days = [t.day for t in fires("0 0 13 * 5", days=31)]
    assert days == [5, 12, 13, 19, 26]


def test_a_star_day_field_with_a_step_still_counts_as_unrestricted() -> None:
    # Vixie: '*/2' starts with '*', so the day fields are AND-ed: odd days that are Mondays.
    days = [t.day for t in fires("0 0 */2 * 1", days=31, start=T0 - timedelta(seconds=1))]
    assert days == [1, 15, 29]


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ],
)
def test_shortcuts_mean_their_five_field_forms(macro: str, same_as: str) -> None:
    assert parse_cron(macro) == parse_cron(same_as)
    assert fires(macro, days=400) == fires(same_as, days=400)


def test_six_fields_put_seconds_first() -> None:
    cron = parse_cron("*/20 30 9 * * *")
    assert cron.has_seconds
    assert [t.time().isoformat() for t in fires("*/20 30 9 * * *")] == [
        "09:30:00",
        "09:30:20",
        "09:30:40",
    ]


def test_trailing_zone_name_overrides_the_tz_argument() -> None:
    cron = parse_cron("0 9 * * 1-5 Europe/Paris", "Asia/Kolkata")
    assert cron.zone_name == "Europe/Paris"
    assert cron.expr == "0 9 * * 1-5"
    assert cron.next_after(T0) == datetime(2024, 1, 1, 8, tzinfo=UTC)


def test_shortcut_accepts_a_trailing_zone() -> None:
    assert parse_cron("@daily Asia/Kolkata").next_after(T0) == datetime(
        2024, 1, 1, 18, 30, tzinfo=UTC
    )


def test_normalized_expression_and_flags() -> None:
    cron = parse_cron("  0   9 * *   MON-FRI ")
    assert cron.expr == "0 9 * * mon-fri"
    assert cron.zone_name == "UTC"
    assert not cron.has_seconds
    assert cron.is_fixed_time
    assert not parse_cron("0 */2 * * *").is_fixed_time
    assert not parse_cron("* 9 * * *").is_fixed_time
    assert parse_cron("0 0-23 * * *").is_fixed_time


def test_equivalent_spellings_share_a_key_and_different_zones_do_not() -> None:
    assert parse_cron("0 9 * * mon-fri").key == parse_cron("0 9 * * 1,2,3,4,5").key
    assert parse_cron("0 9 * * 1-5").key != parse_cron("0 9 * * 1-5", "Europe/Paris").key
    # Same instants in summer, different DST behaviour: keys must differ.
    assert parse_cron("0 * * * *").key != parse_cron("0 0-23 * * *").key


def test_crons_are_immutable_hashable_and_cached() -> None:
    cron = parse_cron("*/5 * * * *")
    assert cron is parse_cron("*/5 * * * *")
    assert hash(cron) == hash(parse_cron("*/5 * * * *", "UTC"))
    with pytest.raises(AttributeError):
        cron.expr = "x"  # type: ignore[misc]
    assert isinstance(cron, Cron)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", "cron '61 * * * *': minute field '61' is out of range 0-59"),
        ("5,61 * * * *", "minute field '5,61': '61' is out of range 0-59"),
        ("0 24 * * *", "hour field '24' is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("0 0 * 13 *", "month field '13' is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8' is out of range 0-7"),
        ("0 0 1-40 * *", "day-of-month field '1-40': '40' is out of range 1-31"),
        ("60 * * * * *", "second field '60' is out of range 0-59"),
        (
            "0 9 * *",
            "cron '0 9 * *' has 4 fields; expected 5 (min hour dom month dow)"
            " or 6 (sec min hour dom month dow)",
        ),
        ("0 0 1 2 3 4 5", "has 7 fields"),
        ("0 0 L * *", "day-of-month field 'L' uses 'L' (last)"),
        ("0 0 15W * *", "day-of-month field '15W' uses 'W' (nearest weekday)"),
        ("0 0 * * 1#2", "day-of-week field '1#2' uses '#' (nth weekday)"),
        ("0 0 * * 5L", "day-of-week field '5L' uses 'L' (last)"),
        ("0 0 ? * 1", "day-of-month field '?' uses '?'"),
        ("@reboot", "@reboot is not supported"),
        ("@dayly", "unknown shortcut '@dayly'; did you mean '@daily'?"),
        ("*/0 * * * *", "minute field '*/0' has step '0'"),
        ("*/x * * * *", "minute field '*/x' has step 'x'"),
        ("0 0 * fbe *", "month field 'fbe' has unknown month name 'fbe'; did you mean 'feb'?"),
        ("0 0 * * mnd", "day-of-week field 'mnd' has unknown day name"),
        ("0 0 * * 1-9", "day-of-week field '1-9': '9' is out of range 0-7"),
        ("0 0 * jan 1-x", "day-of-week field '1-x' has unknown day name 'x'"),
        ("a * * * *", "minute field 'a' has 'a' where a number 0-59 was expected"),
        ("0 0 30 2 *", "cron '0 0 30 2 *' never fires"),
        ("0 0 31 4,6 *", "never fires"),
        ("", "cron expression is empty"),
    ],
)
def test_bad_expressions_are_config_errors_naming_field_and_value(expr: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_february_30_with_a_weekday_still_fires_because_the_days_are_ored() -> None:
    ticks = fires("0 0 30 2 1", days=60)
    assert ticks
    assert all(t.month == 2 and t.isoweekday() == 1 for t in ticks)


def test_february_29_fires_only_in_leap_years() -> None:
    cron = parse_cron("0 0 29 2 *")
    assert cron.next_after(datetime(2024, 3, 1, tzinfo=UTC)) == datetime(2028, 2, 29, tzinfo=UTC)


def test_unknown_zone_suggests_the_closest_name() -> None:
    with pytest.raises(ConfigError) as caught:
        zone("Europe/Pariss")
    assert str(caught.value) == "unknown time zone 'Europe/Pariss'; did you mean 'Europe/Paris'?"
    with pytest.raises(ConfigError, match="unknown time zone 'Europe/Pariss'"):
        parse_cron("0 9 * * * Europe/Pariss")
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Base'"):
        parse_cron("0 9 * * *", "Mars/Base")


def test_between_is_half_open_after_exclusive_until_inclusive() -> None:
    cron = parse_cron("0 * * * *")
    start = datetime(2024, 1, 1, 1, tzinfo=UTC)
    ticks = cron.between(start, start + timedelta(hours=2))
    assert ticks == [start + timedelta(hours=1), start + timedelta(hours=2)]
    assert cron.between(start, start) == []
    assert cron.between(start, start - timedelta(hours=5)) == []


def test_between_accepts_any_aware_zone_and_sub_second_bounds_and_returns_utc() -> None:
    paris_ish = timezone(timedelta(hours=1))
    after = datetime(2024, 1, 1, 1, 0, 0, 500_000, tzinfo=paris_ish)  # 00:00:00.5 UTC
    ticks = parse_cron("* * * * * *").between(after, after + timedelta(seconds=2))
    assert ticks == [
        datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(2024, 1, 1, 0, 0, 2, tzinfo=UTC),
    ]
    assert all(t.tzinfo is UTC for t in ticks)


def test_naive_datetimes_are_refused() -> None:
    naive = datetime(2024, 1, 1)  # noqa: DTZ001 - the point of the test
    with pytest.raises(ValueError, match="aware"):
        fire_times("* * * * *", after=naive, until=T0)
    with pytest.raises(ValueError, match="aware"):
        parse_cron("* * * * *").next_after(naive)


def test_next_after_is_strictly_after() -> None:
    cron = parse_cron("0 9 * * *")
    nine = datetime(2024, 1, 1, 9, tzinfo=UTC)
    assert cron.next_after(nine) == nine + timedelta(days=1)
    assert cron.next_after(nine - timedelta(microseconds=1)) == nine


def test_dst_note_is_empty_for_ordinary_instants() -> None:
    assert (
        parse_cron("0 9 * * *", "Europe/Paris").dst_note(datetime(2024, 1, 1, 8, tzinfo=UTC)) == ""
    )


# ---------------------------------------------------------------- intervals


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("2d", 172_800),
        ("1w", 604_800),
        ("90", 90),
        (" 45 ", 45),
        ("1H", 3600),
    ],
)
def test_every_reads_rufus_style_durations(text: str, seconds: int) -> None:
    assert parse_every(text) == Every(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "must be at least 1 second"),
        ("0m", "must be at least 1 second"),
        ("soon", "is not a duration"),
        ("15x", "is not a duration"),
        ("", "is not a duration"),
        ("-5m", "is not a duration"),
        ("1M", "months and years have no fixed length"),
        ("1.5h", "is not a duration"),
    ],
)
def test_every_rejects_nonsense(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_every(text)


def test_every_is_anchored_to_the_unix_epoch() -> None:
    every = parse_every("7m")
    after = datetime(2024, 1, 1, tzinfo=UTC)
    ticks = every.between(after, after + timedelta(minutes=30))
    assert all(int(t.timestamp()) % 420 == 0 for t in ticks)
    assert every.next_after(after) == ticks[0]
    assert len(ticks) == 4 or len(ticks) == 5
    assert every.key == "every:420"
    assert not every.has_seconds
    assert parse_every("30s").has_seconds


def test_every_constructor_refuses_non_positive_intervals() -> None:
    with pytest.raises(ConfigError):
        Every(0)
