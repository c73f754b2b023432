"""A schedule's health as the fold of its jobs' outcomes leaves it (the outcomes records).

The outcomes fold owns these records; the decision step (alerts/incidents.py) reads only the
`Health` of the schedules whose health changed since the last look (`fold_outcomes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Health:
    """One schedule's health: its last outcome and streaks."""

    name: str
    last_outcome: str | None  # succeeded | failed | running | expired | None
    last_tick_ms: int | None
    last_success_tick_ms: int | None
    consecutive_failures: int  # failed ticks in a row (a retry that succeeds resets)
    last_duration_ms: int | None
    last_error: str | None  # "Class: message"
    last_jid: str | None


class Folds(Protocol):
    """What folds the outcome inbox: the changed schedules' health (the outcomes module)."""

    def __call__(self, side: object, now_ms: int) -> list[Health]:
        """Fold the outcomes written since the last look; the health that changed."""
        ...


def fold_outcomes(side: object, now_ms: int) -> list[Health]:
    """The health that changed since the last look: none until the outcome fold is built
    (the outcomes module replaces this)."""
    del side, now_ms
    return []
