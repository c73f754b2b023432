"""A schedule's daylight-saving policy: what a fixed-time cron does when the clocks change.

A fixed-time cron (neither minute nor hour starts with '*') names wall times; a change of
UTC offset repeats some of them (clocks go back) and skips others (clocks go forward). The
policy chooses, per schedule (DESIGN §3):

- `repeated`: `first` fires in the first pass only (cron's rule, the default), `last` in the
  second pass only, `both` in each pass (two ticks, two jobs);
- `skipped`: `shift` fires once when the gap ends (cron's rule, the default), `skip` does
  not fire that day.

Presets: `cron` (first, shift) and `fugit` (both, skip), the reading of fugit, and so of
sidekiq-cron and sidekiq-scheduler (core/fugit.py). Wildcard crons fire at every real
instant whose wall time matches whatever the policy: both passes, nothing in a gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kiqbeat.errors import ConfigError, did_you_mean, shown

Repeated = Literal["first", "last", "both"]
Skipped = Literal["shift", "skip"]
REPEATED: tuple[Repeated, ...] = ("first", "last", "both")
SKIPPED: tuple[Skipped, ...] = ("shift", "skip")


@dataclass(frozen=True)
class DstPolicy:
    """What a fixed-time cron fires in a repeated hour and for a wall time in a gap."""

    repeated: Repeated = "first"
    skipped: Skipped = "shift"

    @property
    def preset(self) -> str:
        """The preset's name when the policy is one ('cron', 'fugit'), else ''."""
        return next((n for n, p in PRESETS.items() if p == self), "")

    @property
    def written(self) -> str | dict[str, str]:
        """The policy as a document writes it: a preset's name, or the mapping."""
        return self.preset or {"repeated": self.repeated, "skipped": self.skipped}

    @property
    def text(self) -> str:
        """A short label: 'fugit (repeated: both, skipped: skip)'."""
        pair = f"repeated: {self.repeated}, skipped: {self.skipped}"
        return f"{self.preset} ({pair})" if self.preset else pair

    def pick(self, passes: list[int]) -> list[int]:
        """Of a repeated wall time's real instants (ascending), those that fire."""
        if self.repeated == "both":
            return passes
        return [passes[0] if self.repeated == "first" else passes[-1]]


CRON = DstPolicy()
FUGIT = DstPolicy("both", "skip")
PRESETS: dict[str, DstPolicy] = {"cron": CRON, "fugit": FUGIT}
_HINT = ("a preset ('cron': repeated first, skipped shift; 'fugit': repeated both, skipped "
         "skip) or a mapping such as {repeated: first, skipped: shift} (repeated: "
         f"{', '.join(REPEATED)}; skipped: {', '.join(SKIPPED)})")


def dst_policy(value: object) -> DstPolicy:
    """A `dst:` value as a DstPolicy: a preset's name or a mapping of `repeated` and
    `skipped` (either may be left out: cron's rule); ConfigError saying what is valid."""
    if isinstance(value, DstPolicy):
        return value
    if isinstance(value, str):
        if value in PRESETS:
            return PRESETS[value]
        raise ConfigError(f"{shown(value)} is not a preset{did_you_mean(value, PRESETS)} "
                          f"(write {_HINT})")
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"{shown(value)} must be {_HINT}")
    unknown = [k for k in value if k not in ("repeated", "skipped")]
    if unknown:
        raise ConfigError(f"unknown key {shown(unknown[0])}"
                          f"{did_you_mean(str(unknown[0]), ('repeated', 'skipped'))} "
                          f"(write {_HINT})")
    checked: dict[str, Any] = {}
    for key, valid in (("repeated", REPEATED), ("skipped", SKIPPED)):
        found = checked[key] = value.get(key, valid[0])  # the first: cron's rule
        if found not in valid:
            raise ConfigError(f"{key} {shown(found)} is not one of {', '.join(valid)}"
                              + (did_you_mean(found, valid) if isinstance(found, str) else ""))
    return DstPolicy(**checked)
