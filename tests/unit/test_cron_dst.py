"""Daylight saving, case by case (DESIGN §3), with the expected instants worked out by hand.

Rules: a *fixed-time* job (neither minute nor hour starts with '*') fires once per matching
wall time — first pass of a repeated hour; a wall time that does not exist fires once, when
the gap ends. A *wildcard* job fires at every real instant whose wall time matches — both
passes of a repeated hour, nothing in a gap.

The 2024 transitions used (instant in UTC; local wall clock before -> after):
  America/New_York     10 Mar 07:00Z  01:59:59 EST -> 03:00 EDT  (02:00-02:59 missing)
                        3 Nov 06:00Z  01:59:59 EDT -> 01:00 EST  (01:00-01:59 twice)
  Europe/London        31 Mar 01:00Z  00:59:59 GMT -> 02:00 BST  (01:00-01:59 missing)
                       27 Oct 01:00Z  01:59:59 BST -> 01:00 GMT  (01:00-01:59 twice)
  Australia/Lord_Howe   5 Oct 15:30Z  01:59:59 +10:30 -> 02:30 +11  (02:00-02:29 missing)
                        6 Apr 15:00Z  01:59:59 +11 -> 01:30 +10:30  (01:30-01:59 twice)
  America/Santiago      8 Sep 04:00Z  23:59:59 -04 (7 Sep) -> 01:00 -03  (midnight missing)
                        7 Apr 03:00Z  23:59:59 -03 (6 Apr) -> 23:00 -04  (23:00-23:59 twice)
  Pacific/Chatham      28 Sep 14:00Z  02:44:59 +12:45 -> 03:45 +13:45  (02:45-03:44 missing)
                        6 Apr 14:00Z  03:44:59 +13:45 -> 02:45 +12:45  (02:45-03:44 twice)
  America/St_Johns     10 Mar 05:30Z  01:59:59 -03:30 -> 03:00 -02:30
                        3 Nov 04:30Z  01:59:59 -02:30 -> 01:00 -03:30
  Asia/Kolkata         no DST (+05:30 all year)
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kiqbeat.core.cron import fire_times, parse_cron


def z(text: str) -> datetime:
    """'2024-03-10 07:00' (or with seconds) as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def zs(*texts: str) -> list[datetime]:
    return [z(t) for t in texts]


NY_SPRING = ("America/New_York", "2024-03-10 04:00", "2024-03-10 09:00")
NY_FALL = ("America/New_York", "2024-11-03 03:00", "2024-11-03 09:00")

# A hand-laid table reads better than one argument per line.
# fmt: off
CASES = [
    # --- New York, spring forward: 02:00-02:59 does not exist.
    pytest.param(
        "30 2 * * *", *NY_SPRING, zs("2024-03-10 07:00"),
        id="ny-spring-0230-fires-when-gap-ends-0300EDT",
    ),
    pytest.param(
        "15 2 * * *", *NY_SPRING, zs("2024-03-10 07:00"),
        id="ny-spring-0215-fires-when-gap-ends",
    ),
    pytest.param(
        "0,15,30,45 2 * * *", *NY_SPRING, zs("2024-03-10 07:00"),
        id="ny-spring-four-missing-times-fire-once",
    ),
    pytest.param(
        "0 2,3 * * *", *NY_SPRING, zs("2024-03-10 07:00"),
        id="ny-spring-missing-0200-and-real-0300-are-one-instant",
    ),
    pytest.param(
        "30 1 * * *", *NY_SPRING, zs("2024-03-10 06:30"),  # 01:30 EST, untouched
        id="ny-spring-0130-normal",
    ),
    pytest.param(
        # 23:30 EST .. 01:30 EST = 04:30Z..06:30Z; no 02:00/02:30; 03:00 EDT = 07:00Z ...
        "*/30 * * * *", *NY_SPRING,
        zs("2024-03-10 04:30", "2024-03-10 05:00", "2024-03-10 05:30", "2024-03-10 06:00",
           "2024-03-10 06:30", "2024-03-10 07:00", "2024-03-10 07:30", "2024-03-10 08:00",
           "2024-03-10 08:30", "2024-03-10 09:00"),
        id="ny-spring-every-30-min-skips-the-gap",
    ),
    pytest.param(
        # 00:00, 01:00 EST, (02:00 missing), 03:00, 04:00, 05:00 EDT
        "0 * * * *", *NY_SPRING,
        zs("2024-03-10 05:00", "2024-03-10 06:00", "2024-03-10 07:00", "2024-03-10 08:00",
           "2024-03-10 09:00"),
        id="ny-spring-hourly-has-no-0200",
    ),
    # --- New York, fall back: 01:00-01:59 happens twice (EDT, then EST).
    pytest.param(
        "30 1 * * *", *NY_FALL, zs("2024-11-03 05:30"),  # 01:30 EDT only, not 06:30Z
        id="ny-fall-0130-first-pass-only",
    ),
    pytest.param(
        "30 2 * * *", *NY_FALL, zs("2024-11-03 07:30"),  # 02:30 EST, once
        id="ny-fall-0230-once",
    ),
    pytest.param(
        "15 2 * * *", *NY_FALL, zs("2024-11-03 07:15"),
        id="ny-fall-0215-once",
    ),
    pytest.param(
        # 23:30 EDT = 03:30Z, every 30 real minutes through 04:00 EST = 09:00Z: 12 ticks
        "*/30 * * * *", *NY_FALL,
        zs("2024-11-03 03:30", "2024-11-03 04:00", "2024-11-03 04:30", "2024-11-03 05:00",
           "2024-11-03 05:30", "2024-11-03 06:00", "2024-11-03 06:30", "2024-11-03 07:00",
           "2024-11-03 07:30", "2024-11-03 08:00", "2024-11-03 08:30", "2024-11-03 09:00"),
        id="ny-fall-every-30-min-fires-in-both-passes",
    ),
    pytest.param(
        # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00, 03:00, 04:00 EST
        "0 * * * *", *NY_FALL,
        zs("2024-11-03 04:00", "2024-11-03 05:00", "2024-11-03 06:00", "2024-11-03 07:00",
           "2024-11-03 08:00", "2024-11-03 09:00"),
        id="ny-fall-hourly-fires-0100-twice",
    ),
    pytest.param(
        # the same hours written without '*': fixed-time, so 01:00 EST (06:00Z) is skipped
        "0 0-23 * * *", *NY_FALL,
        zs("2024-11-03 04:00", "2024-11-03 05:00", "2024-11-03 07:00", "2024-11-03 08:00",
           "2024-11-03 09:00"),
        id="ny-fall-fixed-hour-list-fires-0100-once",
    ),
    # --- Europe/London
    pytest.param(
        "30 1 * * *", "Europe/London", "2024-03-30 22:00", "2024-03-31 04:00",
        zs("2024-03-31 01:00"),  # 01:30 missing -> 02:00 BST = 01:00Z
        id="london-spring-0130-fires-when-gap-ends",
    ),
    pytest.param(
        "30 1 * * *", "Europe/London", "2024-10-26 22:00", "2024-10-27 04:00",
        zs("2024-10-27 00:30"),  # 01:30 BST; 01:30 GMT (01:30Z) skipped
        id="london-fall-0130-first-pass-only",
    ),
    pytest.param(
        # 23:30 BST, 00:30 BST, 01:30 BST, 01:30 GMT, 02:30, 03:30 GMT
        "30 * * * *", "Europe/London", "2024-10-26 22:00", "2024-10-27 04:00",
        zs("2024-10-26 22:30", "2024-10-26 23:30", "2024-10-27 00:30", "2024-10-27 01:30",
           "2024-10-27 02:30", "2024-10-27 03:30"),
        id="london-fall-hourly-at-30-fires-0130-twice",
    ),
    # --- Lord Howe: a 30-minute shift.
    pytest.param(
        "15 2 * * *", "Australia/Lord_Howe", "2024-10-05 12:00", "2024-10-05 18:00",
        zs("2024-10-05 15:30"),  # 02:15 missing -> 02:30 +11 = 15:30Z
        id="lord-howe-spring-0215-fires-when-half-hour-gap-ends",
    ),
    pytest.param(
        # 01:30, 01:45 (+10:30), [02:00, 02:15 missing], 02:30, 02:45 (+11)
        "*/15 * * * *", "Australia/Lord_Howe", "2024-10-05 14:50", "2024-10-05 15:50",
        zs("2024-10-05 15:00", "2024-10-05 15:15", "2024-10-05 15:30", "2024-10-05 15:45"),
        id="lord-howe-spring-every-15-skips-half-hour-gap",
    ),
    pytest.param(
        "45 1 * * *", "Australia/Lord_Howe", "2024-04-06 12:00", "2024-04-06 18:00",
        zs("2024-04-06 14:45"),  # 01:45 +11; 01:45 +10:30 (15:15Z) skipped
        id="lord-howe-fall-0145-first-pass-only",
    ),
    pytest.param(
        # 01:30, 01:45 (+11), then 01:30, 01:45, 02:00 (+10:30)
        "*/15 * * * *", "Australia/Lord_Howe", "2024-04-06 14:20", "2024-04-06 15:40",
        zs("2024-04-06 14:30", "2024-04-06 14:45", "2024-04-06 15:00", "2024-04-06 15:15",
           "2024-04-06 15:30"),
        id="lord-howe-fall-every-15-fires-repeated-half-hour-twice",
    ),
    # --- Santiago: changes at midnight.
    pytest.param(
        "0 0 * * *", "America/Santiago", "2024-09-07 12:00", "2024-09-08 12:00",
        zs("2024-09-08 04:00"),  # midnight missing -> 01:00 -03 = 04:00Z
        id="santiago-spring-midnight-fires-at-0100",
    ),
    pytest.param(
        # 22:00 -04, 23:00 -04, (00:00 missing), 01:00 -03, 02:00, 03:00 -03
        "0 * * * *", "America/Santiago", "2024-09-08 01:00", "2024-09-08 06:00",
        zs("2024-09-08 02:00", "2024-09-08 03:00", "2024-09-08 04:00", "2024-09-08 05:00",
           "2024-09-08 06:00"),
        id="santiago-spring-hourly-has-no-midnight",
    ),
    pytest.param(
        "30 23 * * *", "America/Santiago", "2024-04-06 12:00", "2024-04-07 12:00",
        zs("2024-04-07 02:30"),  # 23:30 -03; 23:30 -04 (03:30Z) skipped
        id="santiago-fall-2330-first-pass-only",
    ),
    pytest.param(
        "0 0 * * *", "America/Santiago", "2024-04-06 12:00", "2024-04-07 12:00",
        zs("2024-04-07 04:00"),  # midnight 7 Apr -04 = 04:00Z (6 Apr midnight was earlier)
        id="santiago-fall-midnight-once",
    ),
    # --- Chatham: +12:45 / +13:45, changes at 02:45 local standard time.
    pytest.param(
        "0 3 * * *", "Pacific/Chatham", "2024-09-28 10:00", "2024-09-28 18:00",
        zs("2024-09-28 14:00"),  # 03:00 missing -> 03:45 +13:45 = 14:00Z
        id="chatham-spring-0300-fires-when-gap-ends",
    ),
    pytest.param(
        "0 3 * * *", "Pacific/Chatham", "2024-04-06 10:00", "2024-04-06 18:00",
        zs("2024-04-06 13:15"),  # 03:00 +13:45; 03:00 +12:45 (14:15Z) skipped
        id="chatham-fall-0300-first-pass-only",
    ),
    pytest.param(
        # 02:00 +13:45 = 12:15Z, 03:00 +13:45 = 13:15Z, 03:00 +12:45 = 14:15Z
        "0 * * * *", "Pacific/Chatham", "2024-04-06 12:00", "2024-04-06 15:00",
        zs("2024-04-06 12:15", "2024-04-06 13:15", "2024-04-06 14:15"),
        id="chatham-fall-hourly-fires-0300-twice",
    ),
    # --- St John's: -03:30 / -02:30.
    pytest.param(
        "30 2 * * *", "America/St_Johns", "2024-03-10 00:00", "2024-03-10 12:00",
        zs("2024-03-10 05:30"),  # 02:30 missing -> 03:00 NDT = 05:30Z
        id="st-johns-spring-0230-fires-when-gap-ends",
    ),
    pytest.param(
        "30 1 * * *", "America/St_Johns", "2024-11-03 00:00", "2024-11-03 12:00",
        zs("2024-11-03 04:00"),  # 01:30 NDT; 01:30 NST (05:00Z) skipped
        id="st-johns-fall-0130-first-pass-only",
    ),
    # --- Kolkata: no DST, a plain +05:30.
    pytest.param(
        "30 2 * * *", "Asia/Kolkata", "2024-03-09 12:00", "2024-03-10 12:00",
        zs("2024-03-09 21:00"),
        id="kolkata-0230-is-2100Z-the-day-before",
    ),
    # --- Six fields (seconds first) across New York transitions.
    pytest.param(
        "*/20 30 2 * * *", *NY_SPRING, zs("2024-03-10 07:00"),
        id="ny-spring-seconds-all-missing-fire-once",
    ),
    pytest.param(
        "*/20 59 1 * * *", *NY_FALL,
        zs("2024-11-03 05:59:00", "2024-11-03 05:59:20", "2024-11-03 05:59:40"),
        id="ny-fall-fixed-seconds-first-pass-only",
    ),
    pytest.param(
        # 01:59:00, 01:59:30 EDT, then 01:00:00, 01:00:30 EST, 01:01:00 EST
        "0,30 * 1 * * *", "America/New_York", "2024-11-03 05:58:45", "2024-11-03 06:01:00",
        zs("2024-11-03 05:59:00", "2024-11-03 05:59:30", "2024-11-03 06:00:00",
           "2024-11-03 06:00:30", "2024-11-03 06:01:00"),
        id="ny-fall-wildcard-seconds-run-on-through-second-pass",
    ),
]
# fmt: on


@pytest.mark.parametrize(("cron", "tz", "after", "until", "expected"), CASES)
def test_fire_times_follow_cron_dst_rules(
    cron: str, tz: str, after: str, until: str, expected: list[datetime]
) -> None:
    assert fire_times(cron, tz=tz, after=z(after), until=z(until)) == expected


@pytest.mark.parametrize(("cron", "tz", "after", "until", "expected"), CASES)
def test_next_after_agrees_with_the_table(
    cron: str, tz: str, after: str, until: str, expected: list[datetime]
) -> None:
    timetable = parse_cron(cron, tz)
    walked = []
    tick = timetable.next_after(z(after))
    while tick <= z(until):
        walked.append(tick)
        tick = timetable.next_after(tick)
    assert walked == expected


@pytest.mark.parametrize(
    ("cron", "tz", "instant", "note"),
    [
        (
            "30 2 * * *",
            "America/New_York",
            "2024-03-10 07:00",
            "02:30 skipped by DST; fired when the gap ended (dst: shift)",
        ),
        ("30 1 * * *", "America/New_York", "2024-11-03 05:30",
         "repeated hour: first pass; the second pass does not fire (dst: first)"),
        ("0 * * * *", "America/New_York", "2024-11-03 05:00", "repeated hour: first pass"),
        ("0 * * * *", "America/New_York", "2024-11-03 06:00", "repeated hour: second pass"),
        ("0 * * * *", "America/New_York", "2024-03-10 07:00", ""),
        ("0 * * * *", "America/New_York", "2024-11-03 08:00", ""),
        (
            "0 0 * * *",
            "America/Santiago",
            "2024-09-08 04:00",
            "00:00 skipped by DST; fired when the gap ended (dst: shift)",
        ),
        (
            "*/20 30 2 * * *",
            "America/New_York",
            "2024-03-10 07:00",
            "02:30:00 skipped by DST; fired when the gap ended (dst: shift)",
        ),
        ("30 2 * * *", "Asia/Kolkata", "2024-03-09 21:00", ""),
    ],
)
def test_dst_note_explains_moved_and_doubled_ticks(
    cron: str, tz: str, instant: str, note: str
) -> None:
    assert parse_cron(cron, tz).dst_note(z(instant)) == note
