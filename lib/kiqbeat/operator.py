"""The operator's commands' former home, kept so that what it exported keeps working.

`status`, `missed`, `backfill`, `trigger`, `history` and `report` are methods of every
`kiqbeat.store.Store`, which is composed of one part per role (kiqbeat/store/). `Operator`,
once the class `Store` inherited, is now another name of `Store`: `Operator(client, ...)`
builds a store, and every store is one. New code imports from `kiqbeat.store`.
"""

from __future__ import annotations

from kiqbeat.store import (
    MAX_LISTED,
    OVERLAP_HELD,
    Backfill,
    MissedRange,
    ScheduleStatus,
    Status,
    Store,
    Triggered,
)
from kiqbeat.store.context import as_mapping
from kiqbeat.store.status import SHOWN_UNPLANNABLE

Operator = Store

__all__ = ["MAX_LISTED", "OVERLAP_HELD", "SHOWN_UNPLANNABLE", "Backfill", "MissedRange",
           "Operator", "ScheduleStatus", "Status", "Triggered", "as_mapping"]
