"""One duration grammar for every field that takes one (and the KIQBEAT_* settings)."""

from __future__ import annotations

import pytest

from kiqbeat.core.cron import parse_every
from kiqbeat.document import load_config_text
from kiqbeat.errors import ConfigError
from kiqbeat.settings import Settings

WINDOW = "missed_jobs_window: {v}\nschedules:\n  s: {{cron: '* * * * *', class: A}}\n"
LOOKAHEAD = ("missed_jobs_window: 2w\n"
             "schedules:\n  s: {{cron: '* * * * *', class: A, lookahead: {v}}}\n")
EVERY = "schedules:\n  s: {{every: '{v}', class: A}}\n"
WAIT = "wait_timeout: {v}\nschedules: {{}}\n"


def seconds_read_by_every_field(value: str) -> dict[str, float]:
    """The seconds each field makes of `value` (the ones that accept it)."""
    read = {
        "missed_jobs_window": lambda: load_config_text(WINDOW.format(v=value))
        .missed_jobs_window_s,
        "lookahead": lambda: load_config_text(LOOKAHEAD.format(v=value)).schedules[0]
        .lookahead_s,
        "every": lambda: float(parse_every(value).seconds),
        "KIQBEAT_MISSED_JOBS_WINDOW": lambda: Settings.load(
            {"KIQBEAT_MISSED_JOBS_WINDOW": value}).window_s or 0.0,
    }
    return {name: f() for name, f in read.items()}


@pytest.mark.parametrize(("value", "seconds"), [
    ("1w", 604_800), ("1.5h", 5400), ("1h30m", 5400), ("90", 90), ("15m", 900), ("2D", 172_800),
])
def test_every_duration_field_reads_a_duration_the_same_way(value: str, seconds: float) -> None:
    assert set(seconds_read_by_every_field(value).values()) == {seconds}


@pytest.mark.parametrize("value", ["15M", "1mo", "1y"])
def test_months_and_years_are_refused_by_every_duration_field(value: str) -> None:
    for text in (WINDOW, LOOKAHEAD, EVERY, WAIT):
        with pytest.raises(ConfigError, match="months and years have no fixed length"):
            load_config_text(text.format(v=value))
    with pytest.raises(ConfigError, match="months and years have no fixed length"):
        Settings.load({"KIQBEAT_DEADLINE": value})
