"""The operator's reads and a manual run: `missed` (recorded missed ticks), `trigger` (run
now), `history` (last pushes) and `report` (every tick of a span with its one outcome).
Each public call reads the Redis clock at most once; a manual run is one atomic script."""

from __future__ import annotations

import builtins
import json
import secrets
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.core.limits import MAX_WAITING_SCAN
from kiqbeat.core.payload import jid_ms, job_json
from kiqbeat.core.records import (
    Push,
    Range,
    count_ticks,
    held_tick_ms,
    parse_ranges,
)
from kiqbeat.core.schedule import Schedule
from kiqbeat.core.ticks import ClassifiedTick, TickReport, classify_ticks
from kiqbeat.document.validate import read_definition
from kiqbeat.errors import ConfigError, shown
from kiqbeat.outcomes.records import read_outcomes
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_bytes
from kiqbeat.redis.definitions import Oversized, definition_sha
from kiqbeat.redis.operator_reads import read_history, read_missed, read_stored
from kiqbeat.redis.pauses import read_pauses
from kiqbeat.redis.progress import bucket
from kiqbeat.store.context import StoreContext, as_mapping
from kiqbeat.store.results import MissedRange, Triggered


class Operations:
    """The operator's reads and manual runs on one store."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    def missed(self, names: Sequence[str] = (),
               garbled: builtins.list[tuple[str, str]] | None = None
               ) -> builtins.list[MissedRange]:
        """The recorded missed ticks of `names` (default: every schedule), as ranges. A
        record that is garbled (written by hand) raises ConfigError naming it; with a
        `garbled` list, it is added there as (name, why) instead and the others are listed."""
        records = dict(read_missed(self.ctx.client, self.ctx.namespace, names))
        definitions = self.ctx.side.read_present(builtins.list(records))
        out = []
        for name, text in sorted(records.items()):
            schedule = self.ctx.schedule(name, definitions.get(name))
            try:
                ranges = recorded_ranges(name, text)
            except ConfigError as exc:
                if garbled is None:
                    raise
                garbled.append((name, str(exc)))
                continue
            for r in ranges:
                count: tuple[int | None, bool] = (None, False)
                if not isinstance(schedule, str):
                    count = count_ticks(schedule.timetable, r.after_ms, r.through_ms)
                out.append(MissedRange(name, from_ms(r.after_ms), from_ms(r.through_ms),
                                       r.reason, *count))
        return out

    def trigger(self, name: str, args: builtins.list[Any] | None = None) -> Triggered:
        """Push one job of schedule `name` now ("run now"), with `args` instead of its own if
        given, paused or not. Its jid is "manual" and 18 random hex digits: never a tick's
        (24 hex digits), so it neither stands for nor hides any tick. Recorded in the
        schedule's history as manual."""
        stored = self.ctx.side.read_present([name]).get(name)
        if stored is None:
            raise self.ctx.no_schedule([name])
        if isinstance(stored, Oversized):
            raise ConfigError(f"schedule {shown(name)}: {stored.why()}")
        data = stored
        if args is not None:
            raw = as_mapping(stored) or {}
            raw["args"] = args
            data = json.dumps(raw).encode()
        schedule = read_definition(name, data, window_s=self.ctx.window_s,
                                   checks=self.ctx.checks)
        now = self.ctx.side.clock()
        jid = "manual" + secrets.token_hex(9)
        job = job_json(schedule, now, pushed_at=now, job_id=jid)
        if not self.ctx.side.push_manual(name, definition_sha(stored),
                           schedule.queue, jid, to_ms(now), job, self.ctx.keep_history):
            raise ConfigError(f"schedule {shown(name)} changed or was removed while being run; "
                              "nothing was pushed")
        self.ctx.audit("trigger", name, f"jid {jid}" + ("" if args is None else ", own args"))
        return Triggered(name, jid, schedule.queue, now)

    def report(self, name: str, *, since: datetime | None = None,
               until: datetime | None = None) -> TickReport:
        """Every nominal tick of schedule `name` in (since, until] (default: the last day,
        up to now), each with exactly one outcome (core/ticks.py), from where kiqbeat's
        knowledge starts; ConfigError when there is no such schedule or its definition is
        set aside. A few pipelined reads, whatever the span: the stored state, the
        history, the missed ranges, the pause, the outcome record, then one bounded look for
        the jobs still waiting (the first 1,000 of its queue, and the `schedule` set around
        the ticks)."""
        now = self.ctx.side.clock()
        until = until or now
        since = since or until - timedelta(days=1)
        if since >= until:
            raise ConfigError(f"--since {since.isoformat()} is not before --until "
                              f"{until.isoformat()}")
        client, namespace = self.ctx.client, self.ctx.namespace
        stored = next(iter(read_stored(client, namespace, [name], self.ctx.side.lua)), None)
        if stored is None or stored.definition is None:
            raise self.ctx.no_schedule([name])
        schedule = self.ctx.schedule(name, stored.definition)
        if isinstance(schedule, str):
            raise ConfigError(f"schedule {shown(name)}: {schedule}")
        history, _ = read_history(client, namespace, name)
        pushes = history if isinstance(history, list) else []
        missed = dict(read_missed(client, namespace, [name])).get(name)
        ranges = recorded_ranges(name, missed) if missed else []
        pause = read_pauses(client, namespace, [name]).get(name)
        record, last_error = read_outcomes(client, namespace, [name])[name]
        held_key = keys.held(namespace)
        with redis_errors(client, f"reading {held_key}"):
            held = held_tick_ms(reply_bytes(client.hget(held_key, name)))

        def classified(waiting: Collection[str]) -> TickReport:
            return classify_ticks(
                name, schedule.timetable, since_ms=to_ms(since), until_ms=to_ms(until),
                now_ms=to_ms(now), mark_ms=stored.mark_ms, first_seen_ms=stored.first_seen_ms,
                history=pushes, keep=self.ctx.keep_history, outcomes=record,
                last_error=last_error, missed=ranges, pause=pause, enabled=schedule.enabled,
                waiting=waiting, jid_of=jid_ms, held_ms=held)

        found = classified(())
        unreported = [t for t in found.ticks if t.outcome in ("pushed", "backfilled")]
        if not unreported:
            return found
        return classified(self._waiting(schedule, unreported))

    def _waiting(self, schedule: Schedule, ticks: Sequence[ClassifiedTick]) -> set[str]:
        """The jids of `ticks` still waiting: among the first MAX_WAITING_SCAN jobs of the
        schedule's queue (its oldest are at the tail: both ends are looked at), or in the
        `schedule` set scored between the first tick and the last (plus its jitter and
        lookahead). One pipelined round trip, bounded."""
        jids = {t.jid for t in ticks if t.jid}
        low_s = ticks[0].tick_ms / 1000 - 1
        high_s = ticks[-1].tick_ms / 1000 + schedule.jitter_s + 1
        pipe = self.ctx.client.pipeline(transaction=False)
        queue = keys.queue(self.ctx.namespace, schedule.queue)
        pipe.lrange(queue, 0, MAX_WAITING_SCAN - 1)
        pipe.lrange(queue, -MAX_WAITING_SCAN, -1)
        pipe.zrangebyscore(keys.schedule(self.ctx.namespace), low_s, high_s, start=0,
                           num=MAX_WAITING_SCAN)
        found: set[str] = set()
        with redis_errors(self.ctx.client, f"looking for waiting jobs in {queue}"):
            replies = pipe.execute()
        for jobs in replies:
            for job in jobs:
                raw = job.decode(errors="replace") if isinstance(job, bytes) else str(job)
                found |= {j for j in jids if f'"jid":"{j}"' in raw}
        return found

    def history(self, name: str) -> builtins.list[Push]:
        """Schedule `name`'s last pushes, newest first; ConfigError when there is no such
        schedule and no history."""
        history, exists = read_history(self.ctx.client, self.ctx.namespace, name)
        if history is None and not exists:
            raise self.ctx.no_schedule([name])
        if isinstance(history, bytes):
            raise ConfigError(f"the history of schedule {shown(name)} in "
                              f"{keys.progress_bucket(self.ctx.namespace, bucket(name))} is "
                              f"garbled: {shown(repr(history))}")
        return history or []


def recorded_ranges(name: str, text: str) -> builtins.list[Range]:
    try:
        return parse_ranges(text)
    except ValueError:
        raise ConfigError(f"the missed-ticks record of schedule {shown(name)} is garbled: "
                          f"{shown(text)}") from None
