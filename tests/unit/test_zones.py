"""Zone names as users write them: IANA, Rails (ActiveSupport's table) and fixed offsets.

The Rails table is checked against Ruby's own ActiveSupport when it is on the machine
(scripts/setup installs it with ruby-activejob): Debian's may be older than the table
kiqbeat carries (Rails main), so a name Ruby knows must be kiqbeat's too, mapped to the
same zone or to one Rails renamed it to since.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo, available_timezones

import pytest

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.zones import canonical_zone, rails_zones, zone, zone_key, zone_label
from kiqbeat.document import load_config_text
from kiqbeat.errors import ConfigError
from tests.support.tools import missing

# Where an older ActiveSupport maps a name elsewhere: IANA renames (the old name is a link
# to the new) and Rails' own corrections, each with the version that made it.
RENAMED = {"Greenland": "America/Godthab", "Kyiv": "Europe/Kiev", "Rangoon": "Asia/Rangoon"}
CORRECTED = {"Astana": "Asia/Dhaka",  # Rails 7.1: Kazakhstan's capital is on Almaty time
             "Canberra": "Australia/Melbourne"}  # Rails 7.1: Canberra has its own name


def _ruby_mapping() -> dict[str, str] | None:
    if shutil.which("ruby") is None:
        return None
    script = ('require "active_support"; require "active_support/values/time_zone"; '
              'ActiveSupport::TimeZone::MAPPING.each { |k, v| puts "#{k}\\t#{v}" }')
    done = subprocess.run(["ruby", "-e", script], capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        return None
    return dict(line.split("\t") for line in done.stdout.splitlines())


def _same_offsets(a: str, b: str) -> bool:
    """True when two zones give the same UTC offset at every hour of 2020-2030."""
    za, zb = ZoneInfo(a), ZoneInfo(b)
    instant, end = datetime(2020, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)
    while instant < end:
        if instant.astimezone(za).utcoffset() != instant.astimezone(zb).utcoffset():
            return False
        instant += timedelta(hours=1)
    return True


def test_the_rails_table_is_activesupports_and_every_zone_exists_here() -> None:
    table = rails_zones()
    assert len(table) == 154
    assert table["Eastern Time (US & Canada)"] == "America/New_York"
    assert table["Tokyo"] == "Asia/Tokyo"
    assert table["International Date Line West"] == "Etc/GMT+12"
    assert set(table.values()) <= available_timezones()


def test_the_rails_table_agrees_with_rubys_activesupport() -> None:
    ruby = _ruby_mapping()
    if ruby is None:
        missing("Ruby's ActiveSupport is not installed (scripts/setup installs it)")
    ours = rails_zones()
    assert set(ruby) <= set(ours), set(ruby) - set(ours)
    for name, theirs in ruby.items():
        if ours[name] == theirs:
            continue
        if name in RENAMED:
            assert theirs == RENAMED[name] and _same_offsets(theirs, ours[name]), name
        else:
            assert CORRECTED.get(name) == theirs, (name, theirs, ours[name])


@pytest.mark.parametrize(("written", "kept", "key", "label"), [
    ("Eastern Time (US & Canada)", "Eastern Time (US & Canada)", "America/New_York",
     "Eastern Time (US & Canada) (America/New_York)"),
    ("Tokyo", "Tokyo", "Asia/Tokyo", "Tokyo (Asia/Tokyo)"),
    ("UTC", "UTC", "UTC", "UTC"),
    ("Europe/Paris", "Europe/Paris", "Europe/Paris", "Europe/Paris"),
    ("+05:30", "+05:30", "+05:30", "+05:30 (fixed offset, no DST)"),
    ("-0800", "-08:00", "-08:00", "-08:00 (fixed offset, no DST)"),
    ("UTC+9", "+09:00", "+09:00", "+09:00 (fixed offset, no DST)"),
    ("-00:00", "+00:00", "+00:00", "+00:00 (fixed offset, no DST)"),
])
def test_each_kind_of_zone_name_is_kept_keyed_and_shown(
    written: str, kept: str, key: str, label: str
) -> None:
    assert canonical_zone(written) == kept
    assert zone_key(kept) == key
    assert zone_label(kept) == label


def test_a_rails_name_fires_exactly_as_its_iana_zone_across_dst() -> None:
    after, until = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    for expr in ("30 2 * * *", "30 1 * * *", "*/30 * * * *"):
        rails = parse_cron(f"{expr} Eastern Time (US & Canada)")
        assert rails.zone_name == "Eastern Time (US & Canada)"
        assert rails.key == parse_cron(expr, "America/New_York").key
        assert rails.between(after, until) == parse_cron(expr, "America/New_York").between(
            after, until)
        assert parse_cron(expr, "Eastern Time (US & Canada)").between(
            after, until) == rails.between(after, until)


def test_a_fixed_offset_has_no_dst_and_fires_at_one_utc_time_all_year() -> None:
    cron = parse_cron("30 9 * * *", "-08:00")
    ticks = cron.between(datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert len(ticks) == 365 and {(t.hour, t.minute) for t in ticks} == {(17, 30)}
    assert zone("+05:30").utcoffset(None) == timedelta(hours=5, minutes=30)


def test_rails_and_offset_zones_are_read_in_a_document_everywhere_a_zone_goes() -> None:
    config = load_config_text("""
time_zone: Eastern Time (US & Canada)
schedules:
  close:   {cron: "0 18 L * *", class: Close}
  tokyo:   {cron: "0 9 * * *", class: Open, tz: Tokyo}
  india:   {cron: "0 9 * * * +05:30", class: Open}
  offset:  {cron: "0 9 * * *", class: Open, tz: "-08:00"}
  phrase:  {cron: "every day at 9am", class: Open, tz: Tokyo}
""")
    timings = {s.name: s.timing for s in config.schedules}
    assert timings == {
        "close": "0 18 L * * (Eastern Time (US & Canada) (America/New_York))",
        "tokyo": "0 9 * * * (Tokyo (Asia/Tokyo))",
        "india": "0 9 * * * (+05:30 (fixed offset, no DST))",
        "offset": "0 9 * * * (-08:00 (fixed offset, no DST))",
        "phrase": "every day at 9am → 0 9 * * * (Tokyo (Asia/Tokyo))",
    }
    close = next(s for s in config.schedules if s.name == "close")
    assert close.timetable.next_after(datetime(2026, 3, 1, tzinfo=UTC)) == datetime(
        2026, 3, 31, 22, tzinfo=UTC)  # 18:00 EDT on the last day of March


@pytest.mark.parametrize(("value", "message"), [
    ("Eastern Time", "unknown time zone 'Eastern Time'"),
    ("GMT+9", "'GMT+9' is ambiguous: POSIX's 'Etc/GMT+9' is 9 hours west of UTC"),
    ("+5", "'+5' has no minutes; write a UTC offset with them, as fugit reads it: '+05:00'"),
])
def test_a_zone_that_is_none_of_the_three_kinds_is_refused_saying_what_to_write(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("+", r"\+")):
        load_config_text(f"schedules:\n  a: {{cron: '0 9 * * *', class: A, tz: '{value}'}}\n")


def test_an_unquoted_offset_yaml_reads_as_a_number_is_refused_saying_to_quote_it() -> None:
    with pytest.raises(ConfigError, match="YAML reads an unquoted"):
        load_config_text("time_zone: +5:30\nschedules:\n  a: {cron: '0 9 * * *', class: A}\n")


def _hourly_changes(name: str, year: int) -> list[tuple[int, int, int]]:
    """A zone's offset changes in (1 Jan, next 1 Jan] of `year` by the plain scan: the
    offset at every hour, each change found to the second by bisection."""
    tz = ZoneInfo(name)

    def offset_s(instant_s: int) -> int:
        offset = datetime.fromtimestamp(instant_s, tz).utcoffset()
        return 0 if offset is None else int(offset.total_seconds())

    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []
    for t in range(start, end, 3600):
        nxt = min(t + 3600, end)
        before, after = offset_s(t), offset_s(nxt)
        if before != after:
            lo, hi = t, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset_s(mid) == before else (lo, mid)
            found.append((hi, before, after))
    return found


@pytest.mark.parametrize("name", ["Europe/Paris", "America/New_York", "Australia/Lord_Howe",
                                  "America/Sao_Paulo", "Africa/Casablanca", "Pacific/Apia",
                                  "Europe/London", "Asia/Tehran"])
@pytest.mark.parametrize("year", [1916, 1942, 1996, 2011, 2026, 2099])
def test_a_zones_changes_in_a_year_are_the_hourly_scans(name: str, year: int) -> None:
    """The scan of a zone's year samples a day apart and then, within a day whose ends
    differ, an hour apart: the changes it finds are those of sampling every hour."""
    from kiqbeat.core.zones import _changes_in_year

    assert list(_changes_in_year(name, year)) == _hourly_changes(name, year)


def test_no_zone_changes_its_offset_twice_within_two_days() -> None:
    """What the day-apart scan relies on, for every zone of the tz database: two changes of
    UTC offset are never within two days of each other (a day that changed and changed
    back would show no change at its ends). Read from the transitions the pure-Python
    zoneinfo loads from the same files."""
    from zoneinfo import _zoneinfo

    close = []
    for name in sorted(available_timezones()):
        tz = _zoneinfo.ZoneInfo.no_cache(name)
        if tz._fixed_offset:
            continue
        offsets = [tz._tti_before.utcoff] + [t.utcoff for t in tz._ttinfos]
        changes = [when for i, when in enumerate(tz._trans_utc) if offsets[i] != offsets[i + 1]]
        close += [(name, a) for a, b in pairwise(changes)
                  if b - a < 2 * 86_400]
    assert close == []


# The last whole second kiqbeat plans (9999-12-31T23:59:59Z, limits.MAX_PLANNABLE_MS).
LAST_S = 253_402_300_799


def _real_offset_s(tz: ZoneInfo, instant_s: int) -> int | None:
    """The zone's offset at `instant_s`, None where its local time is past the year 9999."""
    try:
        offset = datetime.fromtimestamp(instant_s, tz).utcoffset()
    except OverflowError:
        return None
    return 0 if offset is None else int(offset.total_seconds())


@pytest.mark.parametrize("name", ["Europe/Paris", "America/New_York", "Australia/Lord_Howe",
                                  "America/Sao_Paulo", "Pacific/Kiritimati", "Pacific/Apia",
                                  "America/Adak", "Asia/Tehran"])
def test_a_zones_changes_in_the_year_9999_are_the_hourly_scans_up_to_the_end(
        name: str) -> None:
    """The year 9999 ends at the last instant kiqbeat plans: its changes are found as any
    year's (no date of the year 10000 is built), up to that instant."""
    from kiqbeat.core.zones import _changes_in_year

    tz = ZoneInfo(name)
    start = int(datetime(9999, 1, 1, tzinfo=UTC).timestamp())
    found = []
    for t in range(start, LAST_S - 86_400, 3600):
        before, after = _real_offset_s(tz, t), _real_offset_s(tz, t + 3600)
        if before != after:
            lo, hi = t, t + 3600
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _real_offset_s(tz, mid) == before else (lo, mid)
            found.append((hi, before, after))
    assert list(_changes_in_year(name, 9999)) == found


def test_no_zone_changes_its_offset_in_the_last_week_of_the_year_9999() -> None:
    """What `zones._offset_s` relies on past LAST_S - 1 day (where a zone east of UTC has no
    local date to look an offset up at): every zone keeps one offset through the last week
    of 9999, sampled each 10 minutes wherever its local time is still a date."""
    moved = []
    for name in sorted(available_timezones()):
        tz = ZoneInfo(name)
        seen = {_real_offset_s(tz, t) for t in range(LAST_S - 7 * 86_400, LAST_S + 1, 600)}
        if len(seen - {None}) != 1:
            moved.append(name)
    assert moved == []


def test_a_zoned_cron_fires_across_the_turn_of_the_year_9999() -> None:
    """The first ticks of the year 9999 in a DST zone (its changes of 9999 looked up), each
    instant at the zone's winter offset; once failed with 'year 10000 is out of range'."""
    for name, hour_utc in (("America/New_York", 14), ("Australia/Sydney", 22)):
        ticks = parse_cron("0 9 * * *", name).between(
            datetime(9998, 12, 30, tzinfo=UTC), datetime(9999, 1, 3, tzinfo=UTC))
        assert [t.hour for t in ticks] == [hour_utc] * 4
        assert len({t.date() for t in ticks}) == 4


def test_no_rails_name_with_a_space_ends_as_the_table_free_shortcut_assumes() -> None:
    """zones.trailing_rails_zone answers None without the Rails table for an expression
    ending in a digit or a cron sign: no Rails name holding a space ends so."""
    from kiqbeat.core.zones import _NO_RAILS_END, trailing_rails_zone

    spaced = [name for name in rails_zones() if " " in name]
    assert spaced and not [name for name in spaced if name[-1] in _NO_RAILS_END]
    for name in spaced:
        assert trailing_rails_zone(f"0 9 * * 1-5 {name}") == ("0 9 * * 1-5", name)
    assert trailing_rails_zone("0 9 * * 1-5") is None


def test_every_zone_name_starts_with_a_letter_or_a_sign_as_is_zone_name_assumes() -> None:
    """zones.is_zone_name refuses a token starting otherwise ('*', '5', '1-5') without the
    zone database: no IANA, Rails or offset name starts so."""
    from kiqbeat.core.zones import is_zone_name

    names = set(available_timezones()) | set(rails_zones()) | {"+05:30", "-0800", "\u221203:00"}
    assert [n for n in names if not (n[:1].isalpha() or n[:1] in "+-\u2212")] == []
    assert all(is_zone_name(n) for n in ("UTC", "+05:30", "\u221203:00", "Asia/Tokyo", "Tokyo"))
    assert not any(is_zone_name(n) for n in ("*", "5", "1-5", "*/15", "?"))


def test_an_iana_name_is_known_exactly_as_the_zone_listing_says_without_listing() -> None:
    """`_is_iana` answers as `name in available_timezones()` for every file and folder under
    each TZPATH root and for names the listing leaves out (right/, posix/, posixrules,
    paths not normalized or leading out); a listed zone is answered without the listing."""
    import os
    import zoneinfo

    from kiqbeat.core import zones

    listed = available_timezones()
    names = {"UTC", "posixrules", "right/UTC", "posix/UTC", "../zoneinfo/UTC", "./UTC",
             "America//New_York", "America/", "/usr/share/zoneinfo/UTC", "../../etc/passwd",
             "Eastern Time (US & Canada)", "Tokyo", "+05:30", "Europe/Paris\x00", ".",
             "america/new_york", "Right/UTC", "POSIXRULES", "Europe/\u212aiev"}
    for root in zoneinfo.TZPATH:
        for folder, folders, files in os.walk(root):
            names.update(os.path.relpath(os.path.join(folder, n), root) for n in folders + files)
    assert len(names) > len(listed)  # every zone, and more
    assert {n for n in names if zones._is_iana(n)} == names & (listed | {"UTC"})
    assert all(zones._listed_alone(n) for n in listed & names)  # (tzdata's own: the listing)


def test_reading_an_iana_zone_in_a_new_process_does_not_list_the_zone_database() -> None:
    """A cold process's first zoned schedules (`America/New_York`, a Rails name) cost no
    listing of the zone database (30-70 ms here: available_timezones opens every file of
    it) and no importlib.resources (the Rails table is read as a file). With the tzdata
    package installed, a Rails name is told by the listing (tzdata may hold any name)."""
    import importlib.util

    listings = "0" if importlib.util.find_spec("tzdata") is None else "1"
    code = ("import sys\n"
            "from kiqbeat.core import zones\n"
            "zones.zone('America/New_York'), zones.zone_key('Asia/Kolkata')\n"
            "zones.zone('Eastern Time (US & Canada)'), zones.zone_label('Tokyo')\n"
            "print(zones._zone_names.cache_info().currsize, 'importlib.resources' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == [listings, "False"]
