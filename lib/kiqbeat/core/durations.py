"""The one duration grammar, for `every`, `missed_jobs_window`, `lookahead`, `wait_timeout`,
`retry_for` and the KIQBEAT_* settings.

A duration is a non-negative number of seconds (`90`, `90.5`, `"90"`) or a sequence of
number-unit parts (`"90s"`, `"15m"`, `"1h30m"`, `"1.5h"`, `"2d"`, `"1w"`), units `s m h d w`
in either case, spaces allowed between parts. Only ASCII digits are numbers.

`M`, `mo` and `y` are refused everywhere: rufus-scheduler (sidekiq-scheduler) reads `15M` as
fifteen *months*, other tools as minutes, and months and years have no fixed length anyway;
one reading everywhere means a file never changes meaning with the field it is in.
"""

from __future__ import annotations

import math
import re

from kiqbeat.errors import ConfigError, shown

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_PART = re.compile(rf"({_NUMBER})([smhdw])", re.ASCII)
_PLAIN = re.compile(_NUMBER, re.ASCII)
_CALENDAR = re.compile(r"[0-9]\s*(M|mo|y)", re.ASCII)
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
HINT = "write e.g. '90s', '15m', '1h30m', '1.5h', '2d', '1w' or a number of seconds"


def positive_duration_s(value: object) -> float:
    """A duration longer than 0."""
    seconds = duration_s(value)
    if seconds <= 0:
        raise ConfigError(f"{shown(value)} must be longer than 0")
    return seconds


def duration_s(value: object) -> float:
    """Seconds of a duration (see the module docstring); ConfigError saying what is valid."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{shown(value)} is not a duration; {HINT}")
    if isinstance(value, str):
        if _CALENDAR.search(value):
            raise ConfigError(f"{shown(value)}: months and years have no fixed length "
                              "(and 'M' means months to rufus, minutes to others); use a cron "
                              "expression for calendar schedules")
        text = value.replace(" ", "")
        if _PLAIN.fullmatch(text):
            seconds = float(text)
        else:
            lowered = text.lower()
            if not lowered or _PART.sub("", lowered):
                raise ConfigError(f"{shown(value)} is not a duration; {HINT}")
            seconds = sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(lowered))
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{shown(value)} must be a finite, non-negative duration")
    return seconds

