"""kiqbeat's reading of fugit's day-field forms (L, -N, day#n) against Ruby's fugit itself.

Runs only where Ruby's fugit is installed (Debian's ruby-fugit, which ruby-sidekiq-cron
pulls in; scripts/setup installs it). Debian's fugit may be older than the 1.14 kiqbeat
follows: the forms checked here are the ones both read alike (1.7 added '&'; 1.5 reads
'1-L' as a restricted day-of-month, 1.14 as '*'; 1.5 keeps one '#' per weekday, so
'5#4,5#5', the 4th and 5th Fridays in 1.14's README, fires on the 4th only there).
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from kiqbeat.core.cron import parse_cron
from kiqbeat.errors import ConfigError
from tests.support.tools import missing, tool

FORMS = [
    "0 0 L * *", "0 0 last * *", "0 0 -2 * *", "0 0 -7-L * *", "0 0 -1--3 * *",
    "0 0 -10--1/3 * *", "0 0 1,L * *", "0 0 28-L * *", "0 5 * * mon#1", "0 7 * * fri#-1",
    "0 7 * * 5#L", "0 7 * * fri#last", "0 6 * * 5#4,sat#5", "0 23 * * mon#2,tue",
    "0 0 L * mon#1", "0 0 15 * fri#-2", "0 0 -3 2,3 *", "30 4 -1,15 * 5",
]
REFUSED_BY_BOTH = ["0 0 L/2 * *", "0 0 L-3 * *", "0 0 * * mon-fri#1"]
SCRIPT = """
require "fugit"
STDIN.read.split("\\n").each do |c|
  cron = Fugit::Cron.parse(c + " UTC")
  if cron.nil? then puts "nil"; next end
  t = EtOrbi.parse("2023-12-31 23:59:59 UTC")
  puts((1..8).map { t = cron.next_time(t); t.utc.strftime("%Y-%m-%dT%H:%M:%SZ") }.join(","))
rescue ArgumentError
  puts "nil"
end
"""


def _fugit(exprs: list[str]) -> list[str]:
    ruby = tool("ruby", "it")
    done = subprocess.run([ruby, "-e", SCRIPT], input="\n".join(exprs), capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0 and "fugit" in done.stderr:
        missing("Ruby's fugit is not installed (ruby-sidekiq-cron pulls it in)")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _kiqbeat(expr: str) -> str:
    instant, found = datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC), []
    cron = parse_cron(expr)
    for _ in range(8):
        instant = cron.next_after(instant)
        found.append(instant.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return ",".join(found)


def test_kiqbeat_fires_fugits_day_forms_at_fugits_instants() -> None:
    theirs = _fugit(FORMS)
    assert [(e, _kiqbeat(e)) for e in FORMS] == list(zip(FORMS, theirs, strict=True))


def test_forms_fugit_refuses_are_refused() -> None:
    assert _fugit(REFUSED_BY_BOTH) == ["nil"] * len(REFUSED_BY_BOTH)
    for expr in REFUSED_BY_BOTH:
        with pytest.raises(ConfigError):
            parse_cron(expr)
