"""The cron dialect, its errors, and interval schedules (DESIGN §3)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kiqbeat.core.cron import Cron, Every, fire_times, parse_cron, parse_every
from kiqbeat.core.fugit import fugit_differences
from kiqbeat.core.zones import zone
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


def test_n_slash_s_means_n_to_max_in_the_day_of_month_and_month_fields() -> None:
    cron = parse_cron("0 0 20/5 10/1 *")
    assert sorted(cron.days) == [20, 25, 30]
    assert sorted(cron.months) == [10, 11, 12]


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
        ("0 0 * * 1-5/2", [1, 3, 5]),
        ("0 0 * * fri-mon/2", [0, 5]),
        ("0 0 * * 1-7/2", [0, 1, 3, 5]),
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
        ("0 0 L/2 * *", "day-of-month field 'L/2' has 'L/2', a step after one day counted"
         " from the end, which fugit refuses too; write a range counted from the end with"
         " its step, such as '-7-L/2'"),
        ("0 0 L-3 * *", "Quartz's 'L-3' (3 days before the last) is '-4' here"),
        ("0 0 5--3 * *", "fugit reads it as '5-L' (5 through the last day), dropping -3,"
         " so kiqbeat refuses it; write '5-L' for that"),
        ("0 0 -32 * *", "day-of-month field '-32' has '-32'; days counted from the end run"
         " from -1 (the last day, also 'L') to -31"),
        ("0 0 15W * *", "day-of-month field '15W' uses 'W' (nearest weekday), which fugit"
         " refuses too; the nearest: 'L' (the last day) or, in day-of-week, 'fri#L'"),
        ("0 0 * * 1-5#2", "day-of-week field '1-5#2' has '1-5#2'; '#' follows one day"
         " ('mon#1'): for several, list each ('mon#1,tue#1')"),
        ("0 0 * * 1#6", "after '#' comes 1 to 5, -1 to -5, L or last"),
        ("0 0 * * 5L", "day-of-week field '5L' has '5L', Quartz's last such day of the"
         " month; write '5#L'"),
        ("0 0 * * L", "day-of-week field 'L' uses 'L' (last), which day-of-week reads"
         " only after '#'"),
        ("0 0 ? * 1", "day-of-month field '?' uses '?' (Quartz's 'no specific value');"
         " write '*'"),
        ("0 0 * * sun%2", "uses fugit's '%' (every Nth week"),
        ("0~5 0 * * *", "minute field '0~5' uses fugit's '~' (a value picked at random"),
        ("0 L * * *", "hour field 'L' uses 'L' (last), which only the day fields read"),
        ("0 0 1&2 * 1", "'&' inside it; it goes at the end of a day field"),
        ("0 0 1-7& * mon#2", "never fires: no day of its months matches its day fields"),
        ("0 0 -30 2 *", "never fires"),
        ("0 24 * * *", "hour field '24' is out of range 0-23; fugit reads hour 24 as 0"
         " (midnight): write 0"),
        ("@noon", "unknown shortcut '@noon' (fugit's @noon: write '0 12 * * *')"),
        ("0 9 1,,15 * *", "has an empty list item; remove the extra ','"),
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


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("¹ * * * *", "minute field '¹' has '¹'"),
        ("٣ * * * *", "minute field '٣' has '٣'"),
        ("５ * * * *", "minute field '５' has '５'"),
        ("0 ５ * * *", "hour field '５' has '５'"),
        ("0 0 1-٣ * *", "day-of-month field '1-٣' has '٣'"),
        ("*/٣ * * * *", "minute field '*/٣' has step '٣'"),
        ("*/¹ * * * *", "minute field '*/¹' has step '¹'"),
        ("0 0 * ١٢ *", "month field '١٢' has '١٢'"),
        ("0 0 * * ٣", "day-of-week field '٣' has '٣'"),
        ("0 0 9 * * ٣", "day-of-week field '٣' has '٣'"),
        ("٣ 0 9 * * *", "second field '٣' has '٣'"),
    ],
)
def test_only_ascii_digits_are_numbers(expr: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    assert message in str(caught.value)
    assert "ASCII digits" in str(caught.value)


@pytest.mark.parametrize(
    ("expr", "weekdays", "months"),
    [
        ("0 0 9 * * mon-fri/2", [1, 3, 5], list(range(1, 13))),
        ("0 0 9 * * sun,wed", [0, 3], list(range(1, 13))),
        ("0 0 9 * * MON-FRI", [1, 2, 3, 4, 5], list(range(1, 13))),
        ("0 0 9 * * Sun/1", None, None),  # refused as N/S, but as a day-of-week, not a zone
        ("0 0 9 * jan-mar/2 mon", [1], [1, 3]),
        ("0 0 9 * JAN-MAR/2 *", list(range(7)), [1, 3]),
        ("0 0 9 * * */2 Europe/Paris", [0, 2, 4, 6], list(range(1, 13))),
    ],
)
def test_six_field_day_names_are_read_as_day_of_week_not_as_a_zone(
    expr: str, weekdays: list[int] | None, months: list[int] | None
) -> None:
    if weekdays is None:
        with pytest.raises(ConfigError, match="day-of-week field 'Sun/1'"):
            parse_cron(expr)
        return
    cron = parse_cron(expr)
    assert cron.has_seconds
    assert cron.hours == (9,)
    assert sorted(cron.weekdays) == weekdays
    assert sorted(cron.months) == months
    assert cron.zone_name == ("Europe/Paris" if "Europe" in expr else "UTC")


@pytest.mark.parametrize(
    ("expr", "zone_name", "utc_hour_minute"),
    [
        ("0 9 * * * +09:00", "+09:00", (0, 0)),
        ("0 9 * * * UTC+9", "+09:00", (0, 0)),
        ("0 9 * * * -0500", "-05:00", (14, 0)),
        ("0 9 * * * utc-05:00", "-05:00", (14, 0)),
        ("0 9 * * * +05:30", "+05:30", (3, 30)),
        ("0 0 9 * * * +0900", "+09:00", (0, 0)),
        ("@daily +09:00", "+09:00", (15, 0)),
        ("0 9 * * * \u221208:00", "-08:00", (17, 0)),
    ],
)
def test_a_utc_offset_in_the_zone_position_is_a_fixed_offset_zone(
    expr: str, zone_name: str, utc_hour_minute: tuple[int, int]
) -> None:
    cron = parse_cron(expr)
    assert cron.zone_name == zone_name
    # Every day at the same UTC instant, across both of New York's 2026 changes: no DST.
    ticks = cron.between(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC))
    assert len(ticks) == 364
    assert {(t.hour, t.minute) for t in ticks} == {utc_hour_minute}
    assert cron.dst_note(ticks[0]) == ""


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 9 * * * GMT+2", "time zone 'GMT+2' is ambiguous: POSIX's 'Etc/GMT+2' is 2 hours"
         " west of UTC; write '+02:00' for 2 hours east"),
        ("0 9 * * * +5", "time zone '+5' has no minutes; write a UTC offset with them, as"
         " fugit reads it: '+05:00'"),
        ("0 9 * * * +24:00", "'+24:00' is not a UTC offset (at most 23:59 either way)"),
        ("0 9 * * +09:00", "has 4 fields"),
    ],
)
def test_a_malformed_utc_offset_is_refused_saying_what_to_write(expr: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_cron(expr)


def test_etc_gmt_zones_are_iana_names_and_keep_working() -> None:
    cron = parse_cron("0 9 * * * Etc/GMT-9")
    assert cron.zone_name == "Etc/GMT-9"
    assert cron.next_after(T0) == datetime(2024, 1, 2, 0, tzinfo=UTC)  # 09:00 at UTC+9
    assert parse_cron("0 0 9 * * * Etc/GMT+5").zone_name == "Etc/GMT+5"
    assert parse_cron("@daily GMT+0").zone_name == "GMT+0"


@pytest.mark.parametrize(
    ("expr", "item", "instead"),
    [
        ("0 0 * * 3/2", "'3/2'", ["'3-6/2'", "'*/2'"]),
        ("0 0 * * wed/2", "'wed/2'", ["'wed-sat/2'", "'*/2'"]),
        ("0 0 * * 1,3/2", "'3/2'", ["'3-6/2'"]),
        ("0 0 9 * * 0/3", "'0/3'", ["'0-6/3'", "'*/3'"]),
        ("0 0 * * 7/2", "'7/2'", ["'0-6/2'", "'*/2'"]),
    ],
)
def test_day_of_week_n_slash_s_is_refused_saying_what_to_write(
    expr: str, item: str, instead: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    message = str(caught.value)
    assert f"day-of-week field {expr.split()[-1]!r} has {item}" in message
    assert "fugit" in message
    assert all(f"write {w}" in message or f"or {w}" in message for w in instead), message


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        (",5 * * * *", "minute field ',5' has an empty list item"),
        ("- * * * *", "minute field '-' has range '-' with no start"),
        ("1- * * * *", "minute field '1-' has range '1-' with no end"),
        ("-5 * * * *", "minute field '-5' has range '-5' with no start"),
        ("1-2-3 * * * *", "minute field '1-2-3' has range '1-2-3' with more than one '-'"),
        ("/5 * * * *", "minute field '/5' has nothing before '/' in '/5'; write '*/5'"),
        ("*/ * * * *", "minute field '*/' has step ''"),
        ("1/2/3 * * * *", "minute field '1/2/3' has step '2/3'"),
        ("*-5 * * * *", "minute field '*-5' has '*' where a number 0-59 was expected"),
        ("é * * * *", "minute field 'é' has 'é' where a number 0-59 was expected"),
        ("\x00 * * * *", "minute field '\\x00' has '\\x00' where"),
        ("0 \x7f * * *", "hour field '\\x7f' has"),
        ("0 0 * * ǅ", "day-of-week field 'ǅ' has unknown day name 'ǅ'"),
        ("0 0 * ⅻ *", "month field 'ⅻ' has 'ⅻ'"),
        ("99999999999999999999 * * * *", "minute field '99999999999999999999' is out of range"),
        ("0\xa09 * * * *", "minute field '0\\xa09' has '0\\xa09'"),
        ("0 9 * * *\u3000Asia/Tokyo", "day-of-week field '*\\u3000Asia/Tokyo'"),
        ("@daily Asia/Tokyo extra", "'@daily' may be followed only by a time zone"),
        ("@daily 5", "unknown time zone '5'"),
    ],
)
def test_malformed_fields_are_config_errors_naming_field_and_value(expr: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    assert message in str(caught.value)


def test_leading_zeros_do_not_change_a_number() -> None:
    assert parse_cron("0 0 * * 00000000000000000000005").weekdays == frozenset({5})
    assert parse_cron("*/000000000000000000000000015 * * * *").minutes == (0, 15, 30, 45)


def test_huge_steps_select_only_the_first_value() -> None:
    assert parse_cron("*/99999999999999999999 * * * *").minutes == (0,)
    assert parse_cron(f"5/{'9' * 5000} * * * *").minutes == (5,)


@pytest.mark.parametrize(
    "expr",
    [
        f"{'9' * 5000} * * * *",
        f"*/{'٣' * 5000} * * * *",
        f"0 0 * {'x' * 5000} *",
        f"0 0 * * {'mon' * 3000}",
        f"0 0 * * {'1,' * 3000}99",
        f"{'1-' * 3000}5 * * * *",
        f"0 9 * * * {'Europe/' * 1000}",
        f"0 9 * * * +{'0' * 5000}",
        f"@{'d' * 5000}",
        f"0 9 * * * {'x ' * 3000}",
        f"0 0 {chr(0) * 5000} * *",
    ],
)
def test_messages_never_repeat_a_huge_value_in_full(expr: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cron(expr)
    message = str(caught.value)
    assert len(message) < 400, message
    assert "..." in message


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
        ("0", "must be a whole number of seconds, at least 1"),
        ("0m", "must be a whole number of seconds, at least 1"),
        ("soon", "is not a duration"),
        ("15x", "is not a duration"),
        ("", "is not a duration"),
        ("-5m", "is not a duration"),
        ("1M", "months and years have no fixed length"),
        ("1.5s", "must be a whole number of seconds"),
        ("٣m", "is not a duration"),
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


# ---------------------------------------------------------------- fugit


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/15 9-17 * * 1-5",
        "0 0 1,15 * *",
        "0 0 13 * 5",  # both restricted: OR in kiqbeat, Vixie and fugit
        "0 0 * * */2",  # day-of-month '*': both read only the day-of-week
        "0 0 */2 * *",
        "0 0 */1 * 1",  # fugit reads '*/1' as '*', so it ANDs like kiqbeat
        "0 0 * * 1-5/2",
        "0 0 * * fri-mon",
        "0 0 1-31 * 0-6",  # every day either way
        "0 5/15 * * * *",
        "@weekly Europe/Paris",
        "0 0 L * mon#1",  # both restricted: OR in both
        "0 0 * * mon#1",  # a '*' day-of-month: AND in both
        "0 0 -3-L * 1-5",
        "0 0 */2& * 1-5",  # fugit's '&': AND in both
        "0 0 1-L& * 1",
        "0 9 * * 1-5 +05:30",
    ],
)
def test_fugit_reads_these_the_same(expr: str) -> None:
    assert fugit_differences(expr) == []


def test_fugit_ors_the_day_fields_when_one_starts_with_star_and_has_a_step() -> None:
    # fugit issue #75 is this very expression: fugit fires on every even day too.
    (warning,) = fugit_differences("0 0 */2 * 1-5")
    assert warning == (
        "day-of-month '*/2' and day-of-week '1-5': kiqbeat, like Vixie cron, fires only on"
        " days matching both, because '*/2' starts with '*'; fugit (sidekiq-cron,"
        " sidekiq-scheduler) fires on days matching either one, as it does unless it reads"
        " one of them as '*'"
    )
    (warning,) = fugit_differences("0 0 9 1 * */2 Asia/Tokyo")
    assert "because '*/2' starts with '*'" in warning
    assert "fires on days matching either one" in warning
    (warning,) = fugit_differences("0 0 1 * */1")
    assert "because '*/1' starts with '*'" in warning
    # A list of every weekday is restricted to fugit: it fires every day, kiqbeat on odd days.
    (warning,) = fugit_differences("0 0 */2 * 0,1,2,3,4,5,6")
    assert "because '*/2' starts with '*'" in warning
    (warning,) = fugit_differences("0 0 */2 * */3")
    assert "because '*/2' and '*/3' start with '*'" in warning


def test_fugit_reads_one_through_l_as_star_and_a_star_step_beside_an_nth_weekday_as_or(
) -> None:
    (warning,) = fugit_differences("0 0 1-L * 1")
    assert "reads day-of-month '1-L' as '*' and fires only on days matching day-of-week '1'" \
        in warning
    (warning,) = fugit_differences("0 0 */2 * mon#1")
    assert "because '*/2' starts with '*'" in warning


def test_fugit_reads_a_full_day_of_month_range_as_star() -> None:
    (warning,) = fugit_differences("0 0 1-31 * 1")
    assert warning == (
        "day-of-month '1-31' and day-of-week '1': kiqbeat, like Vixie cron, fires on days"
        " matching either one, because neither starts with '*' (here: every day); fugit"
        " (sidekiq-cron, sidekiq-scheduler) reads day-of-month '1-31' as '*' and fires only"
        " on days matching day-of-week '1'"
    )
    assert fugit_differences("0 0 1/1 * mon") != []


def test_fugit_ignores_a_star_inside_a_day_of_week_list() -> None:
    (warning,) = fugit_differences("0 0 * * *,1")
    assert warning == (
        "day-of-week '*,1': fugit (sidekiq-cron, sidekiq-scheduler) skips a '*' inside a"
        " day-of-week list and reads '*,1' as '1'; kiqbeat reads it as every day"
    )


def test_fugit_reads_a_wrapped_day_of_week_range_with_a_step_as_no_day() -> None:
    (warning,) = fugit_differences("0 0 * * fri-mon/2")
    assert warning == (
        "day-of-week 'fri-mon/2': fugit (sidekiq-cron, sidekiq-scheduler) reads a range"
        " with a step whose start is after its end ('fri-mon/2') as no day at all; kiqbeat"
        " reads it as 0,5; write '0,5' to mean the same in both"
    )
    warnings = fugit_differences("0 0 1 * 5-1/2")
    assert any("'5-1/2') as no day at all" in w for w in warnings)
    assert any("fires only on days matching day-of-month '1'" in w for w in warnings)
    assert any(
        "'7-2/2') as no day at all; kiqbeat reads it as 0,2" in w
        for w in fugit_differences("0 0 * * 7-2/2")
    )


def test_fugit_differences_refuses_what_kiqbeat_refuses() -> None:
    with pytest.raises(ConfigError, match="day-of-week field '3/2'"):
        fugit_differences("0 0 * * 3/2")


# ---------------------------------------------------------------- the end of time

END = datetime.max.replace(tzinfo=UTC)  # lifecycle.ENDED: no tick left


@pytest.mark.parametrize(("expr", "zone_name", "last"), [
    ("0 9 * * *", "UTC", datetime(9999, 12, 31, 9, tzinfo=UTC)),
    ("0 9 * * *", "America/New_York", datetime(9999, 12, 31, 14, tzinfo=UTC)),
    ("0 9 * * *", "+05:30", datetime(9999, 12, 31, 3, 30, tzinfo=UTC)),
    ("0 9 L * *", "America/Los_Angeles", datetime(9999, 12, 31, 17, tzinfo=UTC)),
    ("0 9 * * 1#1", "Europe/London", datetime(9999, 12, 6, 9, tzinfo=UTC)),
    ("0 9 * * 1-5", "Australia/Sydney", datetime(9999, 12, 30, 22, tzinfo=UTC)),
    ("* * * * *", "America/New_York", datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
    ("*/7 * * * * *", "Asia/Tokyo", datetime(9999, 12, 31, 14, 59, 56, tzinfo=UTC)),
    ("0 0 * 12 *", "UTC", datetime(9999, 12, 31, tzinfo=UTC)),
])
def test_the_walk_ends_at_the_last_tick_before_the_end_of_time(
        expr: str, zone_name: str, last: datetime) -> None:
    """DESIGN §3: no tick past 9999-12-31T23:59:59Z, nor at a wall time past 9999-12-31
    local (Tokyo's last: 23:59:56 local). The last one is listed; after it `next_after` is
    ENDED and listings are empty. Each once raised 'year 10000 is out of range' or 'date
    value out of range' (a month's jump or a day's step past 9999-12-31)."""
    cron = parse_cron(expr, zone_name)
    assert cron.between(last - timedelta(days=40), END)[-1] == last
    assert cron.next_after(last - timedelta(seconds=1)) == last
    assert cron.next_after(last) == END
    assert cron.between(last, END) == []
    assert cron.dst_note(last) == ""
    assert cron.dst_withheld(last - timedelta(days=400), END) == []


@pytest.mark.parametrize("expr", ["0 0 29 2 *", "0 0 1 1 *", "0 9 * 1 *"])
def test_a_cron_with_no_tick_left_before_the_end_of_time_has_ended(expr: str) -> None:
    # In Kiritimati (+14) 1 January 10000 begins at 10:00Z on 31 December 9999: no date.
    for zone_name in ("UTC", "Europe/Berlin", "Pacific/Kiritimati"):
        cron = parse_cron(expr, zone_name)
        after = datetime(9999, 3, 1, tzinfo=UTC)
        assert cron.next_after(after) == END
        assert cron.between(after, END) == []


def test_an_interval_ends_at_its_last_multiple_before_the_end_of_time() -> None:
    every = parse_every("7h")
    ticks = every.between(datetime(9999, 12, 31, tzinfo=UTC), END)
    assert ticks[-1] == datetime(9999, 12, 31, 18, tzinfo=UTC)
    assert every.next_after(ticks[-1]) == END
