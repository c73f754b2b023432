"""The invocation's performance devices, each behind one narrow interface, and their off switch.

Nothing here changes what an invocation does, only how fast: the same store, definitions
and instants give the same Redis state with every device off (`reference`: the setting
`KIQBEAT_REFERENCE`, proved by tests/integration/test_reference_mode.py). Each device, and
what it does when on:

- `parsed`: stored definitions kept parsed (bounded), for schedules due again soon
  (`keeps`). (A document's own schedules are planned from the document's parse in either
  mode: that is a rule, not a device, since it carries the Recurring Jobs tab's toggles;
  invocation.py `_parse`);
- `memo`: the tick memo (core/plan.py's TickMemo: next ticks and job templates), kept
  from one invocation to the next;
- `checks`: the content-keyed definition checks (document/validate.py's `Checks`);
- `read_ahead`: the next due batch read on the push line while this one is planned
  (redis/due.py's `StartedDue`);
- `plan_slice`: a batch planned a push call's worth at a time, each call sent before the
  next slice is planned;
- `paused_gc`: the cyclic garbage collector paused in the push loop;
- `document`: a config's document form kept, shared by the engines given these devices
  (one per shard in a Lambda, which share their sources and so their configs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from kiqbeat.core.collector import collector_paused
from kiqbeat.core.limits import (
    MAX_PARSED_DEFINITION_BYTES,
    MAX_PARSED_DEFINITIONS,
    MAX_REASON_CHARS,
    PUSH_CALL_BUDGET_US,
    PUSH_US_PER_GROUP,
    PUSH_US_PER_JOB,
)
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.errors import ConfigError
from kiqbeat.redis.definitions import definition_sha

if TYPE_CHECKING:
    from kiqbeat.core.plan import TickMemo
    from kiqbeat.document.validate import Checks

# Entries planned at a time: one push call's worth of one-job schedules (core/limits.py's
# time budget), so the next slice is planned while Redis runs the call made from this one.
PLAN_SLICE = max(1, int(PUSH_CALL_BUDGET_US // (PUSH_US_PER_GROUP + PUSH_US_PER_JOB)))
# What one stored definition parses to: its schedule or why it is refused, and its SHA1.
Parsed = tuple[Schedule | str, str]
D = TypeVar("D")
E = TypeVar("E")


class Devices:
    """One engine's performance devices (shared by the engines of one process's shards);
    with `reference` each is off, and the invocation runs the plain way."""

    def __init__(self, *, reference: bool = False, documents: DocumentMemo | None = None
                 ) -> None:
        self.reference = reference
        self.documents = documents or DocumentMemo()
        self.checks: Checks | None = None  # made by `_load`
        self.plan_slice = 0 if reference else PLAN_SLICE  # 0: a whole batch at once
        self.read_ahead = not reference
        # (name, stored definition) -> its `Parsed`; `_parsed_bytes`: the definitions held.
        self._parsed: dict[tuple[str, bytes], Parsed] = {}
        self._parsed_bytes = 0
        self._window_parsed_s: float | None = None  # the window `_parsed` was filled with
        self._memo: TickMemo | None = None
        self._read: Callable[..., Schedule] | None = None  # validate.read_definition (`_load`)
        self._keep_warm_ms = 0

    # -- parsed definitions -------------------------------------------------------------

    def parse(self, name: str, definition: bytes, window_s: float, now_ms: int) -> Parsed:
        """The checked schedule of a stored definition, or why it is refused; and its SHA1.

        Kept parsed only when the schedule's next tick after `now_ms` is at most
        KEEP_WARM_MS (core/plan.py) away: a schedule due again only in an hour (most of a
        large store) would be pushed out by then; it is read again through the content-keyed
        checks (`checks`), nearly as fast. A refusal is kept. The parses kept with another
        missed-jobs window (which lookaheads are checked against) are dropped first."""
        if window_s != self._window_parsed_s:
            self.forget_parsed()
            self._window_parsed_s = window_s
        known = self._parsed.get((name, definition))
        if known is not None:
            return known
        read = self._read or self._load()
        sha = definition_sha(definition)
        parsed: Schedule | str
        try:
            parsed = read(name, definition, window_s=window_s, checks=self.checks)
        except ConfigError as exc:
            parsed = "; ".join(exc.problems)[:MAX_REASON_CHARS]
        if self.reference:
            return parsed, sha
        if isinstance(parsed, Schedule):
            try:
                soon = self.memo().next_ms(parsed.timetable, now_ms) - now_ms <= self._keep_warm_ms
            except (ValueError, OverflowError):  # planning says why (beyond the year 9999)
                soon = False
            if not soon:
                return parsed, sha
        self._keep_parsed(name, definition, (parsed, sha))
        return parsed, sha

    def _load(self) -> Callable[..., Schedule]:
        """The definition reader and what keeping parses needs, loaded at the first parse: a
        process with nothing due loads no reader and no plan core (test_cold_start.py)."""
        from kiqbeat.core.plan import KEEP_WARM_MS
        from kiqbeat.document.validate import Checks, read_definition

        self.checks = None if self.reference else Checks()
        self._read, self._keep_warm_ms = read_definition, KEEP_WARM_MS
        return read_definition

    def _keep_parsed(self, name: str, definition: bytes, parsed: Parsed) -> None:
        """Keep a parse, within MAX_PARSED_DEFINITIONS and MAX_PARSED_DEFINITION_BYTES (past
        either, all are dropped: a store that large is read afresh)."""
        if (len(self._parsed) >= MAX_PARSED_DEFINITIONS
                or self._parsed_bytes + len(definition) > MAX_PARSED_DEFINITION_BYTES):
            self.forget_parsed()
        self._parsed[(name, definition)] = parsed
        self._parsed_bytes += len(definition)

    def forget_parsed(self) -> None:
        """Drop every kept parse (the window changed, and the lookaheads checked with it)."""
        self._parsed.clear()
        self._parsed_bytes = 0

    def parsed_names(self) -> set[str]:
        """The names of the definitions kept parsed (for tests and benchmarks)."""
        return {name for name, _ in self._parsed}

    # -- the tick memo ------------------------------------------------------------------

    def memo(self) -> TickMemo:
        """The tick memo to plan with: the one kept, or a fresh one (reference)."""
        if self._memo is None or self.reference:
            from kiqbeat.core.plan import TickMemo  # loaded with the first plan

            self._memo = TickMemo()  # in reference mode, a fresh one each time
        return self._memo

    # -- the document form --------------------------------------------------------------

    def document(self, config: Config, build: Callable[[Config], D]) -> D:
        """`build(config)`: the config's document form, kept for the last config asked
        about (by any engine sharing `documents`)."""
        return build(config) if self.reference else self.documents.get(config, build)

    # -- the push loop ------------------------------------------------------------------

    def slices(self, entries: Sequence[E]) -> list[Sequence[E]]:
        """The slices `entries` are planned in, in order (one, whole, in reference mode)."""
        size = self.plan_slice or max(len(entries), 1)
        return [entries[first:first + size] for first in range(0, len(entries), size)]

    def paused_gc(self) -> AbstractContextManager[None]:
        """The cyclic collector paused for the push loop (core/collector.py): it makes no
        cycles, and full collections over the engine's caches cost more than the loop."""
        return collector_paused(not self.reference)


class DocumentMemo:
    """The last config's document form, shared by the engines of one process that share
    their sources (one per shard in a Lambda: the document is encoded once, not per shard)."""

    def __init__(self) -> None:
        self._last: tuple[Config, Any] | None = None

    def get(self, config: Config, build: Callable[[Config], D]) -> D:
        """`build(config)`, or what it gave when `config` (the same object) was last asked."""
        last = self._last
        if last is not None and last[0] is config:
            return last[1]  # type: ignore[no-any-return]
        document = build(config)
        self._last = (config, document)
        return document
