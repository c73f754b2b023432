"""Instants: the one reader of an instant written by a person or another program (a
definition's `start_at`/`end_at`/`at`, a document's, the CLI's `--since`/`--until`/`--from`/
`--now`, the API's and a Lambda event's), and the epoch milliseconds Redis holds them in.

An instant written is ISO 8601 with a UTC offset, range-checked BEFORE it is converted to UTC,
so an instant in range as written but out of range once converted (`9999-12-31T23:59:59-23:59`,
`0001-01-01T00:00:00+14:00`) is a message, never an OverflowError that stops every schedule
(issue 26)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.errors import ConfigError, shown

# Instants kiqbeat accepts anywhere: from the epoch (where `every` counts from) to the start
# of the year 9999 (past which no tick is planned).
FIRST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LAST_INSTANT = datetime(9999, 1, 1, tzinfo=UTC)
# A UTC offset is less than a day, so a wall time inside these bounds converts without
# overflow; the exact range is checked after the (then safe) conversion.
_FIRST_WALL = datetime(1969, 12, 30)  # noqa: DTZ001 - a naive wall time on purpose
_LAST_WALL = datetime(9999, 1, 3)  # noqa: DTZ001 - a naive wall time on purpose
_DAY = timedelta(days=1)
INSTANT_HINT = ("an ISO 8601 instant with its UTC offset, e.g. '2026-03-01T09:00:00+01:00' "
                "or '2026-03-01T08:00:00Z'")
_RANGE = "must be from 1970-01-01 to before 9999-01-01 (UTC)"
_MS = timedelta(milliseconds=1)
# An ended schedule's index score (core/lifecycle.py): the last instant kiqbeat plans, where
# nothing is ever due.
ENDED_MS = MAX_PLANNABLE_MS
# The same, as the datetime a timetable with no tick left answers `next_after` with: the last
# instant Python represents, past every tick (ticks are whole seconds, ENDED_MS is not).
ENDED = datetime.max.replace(tzinfo=UTC)


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded down: a mark taken at `now` must
    never cover a tick that comes after `now`."""
    return (instant - FIRST_INSTANT) // _MS


def to_ms_up(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded up: the first whole millisecond at or
    after it (a bound "at or after `instant`")."""
    return -((FIRST_INSTANT - instant) // _MS)


def from_ms(ms: int) -> datetime:
    """Aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def z_text(instant: datetime, timespec: str = "auto") -> str:
    """An aware instant as ISO 8601 in UTC, written with 'Z' ('2026-03-01T08:00:00Z'), to
    `timespec` (`datetime.isoformat`'s)."""
    return instant.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def utc_instant(value: object, *, naive_is_utc: bool = False) -> datetime:
    """`value` (an ISO 8601 string or a datetime) as aware UTC, from 1970-01-01 to before
    9999-01-01. ConfigError (naming the value) for anything else: not an instant, no offset
    (unless `naive_is_utc`), an offset of a day or more, out of range as written or once
    converted."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(f"{shown(value)} is not {INSTANT_HINT}") from None
    else:
        raise ConfigError(f"{shown(value)} must be {INSTANT_HINT}")
    try:
        offset = moment.utcoffset()
    except (ValueError, OverflowError, TypeError) as exc:  # a datetime's own tzinfo
        raise ConfigError(f"{shown(value)} has an unusable UTC offset: {exc}") from None
    if offset is None:
        if not naive_is_utc:
            raise ConfigError(f"{shown(value)} has no UTC offset; add 'Z' or '+hh:mm' "
                              f"({INSTANT_HINT})")
        offset = timedelta(0)
    if not -_DAY < offset < _DAY:
        raise ConfigError(f"{shown(value)} has an offset of a day or more")
    wall = moment.replace(tzinfo=None)
    if not _FIRST_WALL <= wall <= _LAST_WALL:
        raise ConfigError(f"{shown(value)} {_RANGE}")
    utc = (wall - offset).replace(tzinfo=UTC)
    if not FIRST_INSTANT <= utc < LAST_INSTANT:
        raise ConfigError(f"{shown(value)} {_RANGE}")
    return utc


def option_instant(text: object, option: str, *, naive_is_utc: bool = False) -> datetime:
    """`utc_instant` of an operator's option or field, its message prefixed with `option`
    (`--until`, `the event's "since"`)."""
    try:
        return utc_instant(text, naive_is_utc=naive_is_utc)
    except ConfigError as exc:
        raise ConfigError(f"{option} {exc}") from None
