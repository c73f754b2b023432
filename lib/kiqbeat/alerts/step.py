"""The alert step of an invocation (DESIGN §12): after the pushes and the outcome fold, decide
the incidents, pause the schedules that asked for it, and give each sink its turn.

An `AlertStep` is owned by the engine, built from the settings' sinks; `reads` rides the
invocation's first pipeline (the earliest deadline, and the sinks' backlog when there are
sinks), `watch` notes the due schedules with expectations as the invocation plans them, and
`run` does the rest. The health it judges is that of the changed names the folds left
(outcomes/records.py; a worker's own fold or the invocation's fold of the inbox adds a name
only when the decision could act on it), read on the first pipeline, again after the
invocation folded the inbox, and then the records of those names (one round trip). The
decision costs one round trip, and only when there is something to decide: a schedule with
expectations pushed, a changed name, a deadline due or an event waiting for a sink; then one
more per schedule paused, and two or three per sink with events waiting (delivery.py). An
invocation with none of these costs what it cost before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import redis

from kiqbeat.core.instants import to_ms
from kiqbeat.core.limits import CHANGED_PER_INVOCATION, MAX_CHANGED_NAMES
from kiqbeat.core.report import Report
from kiqbeat.errors import RedisRefusedError, StateError
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.due import Reads, Replies
from kiqbeat.redis.side import RedisSide

if TYPE_CHECKING:  # the decision's modules: loaded once there is something to decide
    from kiqbeat.alerts.incidents import Watch
    from kiqbeat.alerts.sinks import Sink
    from kiqbeat.core.outcomes import Health
    from kiqbeat.core.plan import Entry


# Slices of changed names judged in one invocation at most (a storm: the set drained whole).
MAX_JUDGED_ROUNDS = max(1, MAX_CHANGED_NAMES // CHANGED_PER_INVOCATION)


class Changed(NamedTuple):
    """A name of the changed names (`keys.outcomes_changed`: a fold, a worker's own or an
    invocation's of the inbox, redis/lua/fold.lua, marked it for the decision to judge) and
    its sequence number there (the decision takes it away only while the number is still
    this one)."""

    name: str
    seq: str


def queue_changed_names(pipe: redis.client.Pipeline, namespace: str) -> None:
    """Queue the read of the oldest CHANGED_PER_INVOCATION changed names (parse with
    `changed_names`): on every invocation's first pipeline, so the outcome records
    themselves load only when there is something to judge."""
    pipe.zrange(keys.outcomes_changed(namespace), 0, CHANGED_PER_INVOCATION - 1,
                withscores=True, score_cast_func=reply_text)


def changed_names(reply: object) -> list[Changed]:
    """The changed names of a `queue_changed_names` reply (none when it is no list)."""
    if not isinstance(reply, list):
        return []
    return [Changed(reply_text(name), reply_text(score)) for name, score in reply]


def read_changed_names(client: redis.Redis, namespace: str) -> list[Changed]:
    """The oldest CHANGED_PER_INVOCATION changed names (one round trip)."""
    pipe = client.pipeline(transaction=False)
    queue_changed_names(pipe, namespace)
    with redis_errors(client, f"reading {keys.outcomes_changed(namespace)}"):
        (reply,) = pipe.execute()
    return changed_names(reply)


@dataclass
class AlertStep:
    """One engine's alert step: its sinks, the outcome fold, and the watch of the invocation
    at hand."""

    sinks: Sequence[Sink] = ()
    _watch: Watch | None = None  # None: nothing planned yet
    # From the first pipeline: the earliest deadline (None: none), a sink has events waiting.
    _earliest_ms: int | None = None
    _waiting: bool = True
    _expecting: bool = True  # some schedule has expectations (health is worth judging)
    _changed: list[Changed] = field(default_factory=list)  # as the first pipeline read them

    def begin(self) -> None:
        """Start an invocation's watch afresh."""
        self._watch = None
        self._earliest_ms, self._waiting, self._expecting = None, True, True
        self._changed = []

    def reads(self, reads: Reads, namespace: str) -> None:
        """Queue the step's reads on the invocation's first pipeline."""
        deadlines, expectations = keys.deadlines(namespace), keys.expectations(namespace)
        reads.add("alerts:deadline",
                  lambda pipe: pipe.zrange(deadlines, 0, 0, withscores=True))
        reads.add("alerts:expecting", lambda pipe: pipe.hlen(expectations))
        reads.add("alerts:changed", lambda pipe: queue_changed_names(pipe, namespace))
        if self.sinks:
            outbox = keys.outbox(namespace)
            reads.add("alerts:outbox", lambda pipe: pipe.xinfo_groups(outbox))

    def read(self, replies: Replies) -> None:
        """Keep what the first pipeline's reads say (an error reply: look anyway)."""
        expecting = replies.one("alerts:expecting")
        self._expecting = not (isinstance(expecting, int) and expecting == 0)
        self._changed = changed_names(replies.one("alerts:changed"))
        earliest = replies.one("alerts:deadline")
        self._earliest_ms = None
        if isinstance(earliest, list) and earliest:
            from kiqbeat.core.outcomes import deadline_ms

            # 0 when it is no instant (written by hand; issue 27): decide now, and the
            # decision step drops it.
            self._earliest_ms = deadline_ms(earliest[0][1]) or 0
        if not self.sinks:
            self._waiting = False
            return
        groups = replies.one("alerts:outbox")
        if isinstance(groups, redis.ResponseError) and "no such key" in str(groups).lower():
            self._waiting = False  # no outbox yet: nothing was ever decided
        elif isinstance(groups, list):
            found = {reply_text(g["name"]): g for g in groups}  # as delivery.backlogs reads
            self._waiting = any(s.name not in found or found[s.name].get("pending")
                                or found[s.name].get("lag") != 0 for s in self.sinks)

    def watch(self, entries: Sequence[Entry]) -> None:
        """Note the planned entries that have expectations."""
        if self._watch is None:
            from kiqbeat.alerts.incidents import Watch

            self._watch = Watch()
        self._watch.add(entries)

    def run(self, side: RedisSide, report: Report) -> None:
        """Decide on the health of the changed names and the deadlines due, pause, and
        deliver (module docstring); delivery failures are warnings, retried by the next
        invocation, and so is a store that refuses the decision (a key of the wrong type, an
        ACL without the alert keys): the pushes' report stands."""
        watch, self._watch = self._watch, None
        planned = {} if watch is None else watch.planned
        now_ms = to_ms(report.now)
        try:
            judged = self._judged(side, report)
        except (RedisRefusedError, StateError) as exc:  # the pushes stand: a warning
            report.warnings.append(f"alert incidents were not decided: {exc}")
            return
        # No schedule has expectations (none was ever pushed with any): nothing to judge,
        # but the changed names are still taken away.
        changed = report.changed_health if self._expecting else []
        pushed = any(run[0] in planned for run in report.pushed_runs)
        if not (pushed or judged or self._waiting or any(
                rules is None for _sha, rules in planned.values())
                or (self._earliest_ms is not None and self._earliest_ms <= now_ms)):
            return
        from kiqbeat.alerts.incidents import Watch, decide
        from kiqbeat.core.pause import Pause

        watch = Watch() if watch is None else watch
        sinks = [s.name for s in self.sinks]
        for more in range(MAX_JUDGED_ROUNDS):
            try:
                if more:  # the last slice was full (a storm): the next names, the arms done
                    judged = read_changed_names(side.client, side.namespace)
                    changed = self._health(side, judged, report) if self._expecting else []
                    report.round_trips += 1
                    watch = Watch()
                decision = decide(side.client, side.namespace, now_ms, watch, report, changed,
                                  sinks, side.lua, judged=judged)
            except (RedisRefusedError, StateError) as exc:  # the pushes stand: a warning
                report.warnings.append(f"alert incidents were not decided: {exc}")
                return
            report.round_trips += 1
            report.alert_events += decision.events
            for name in decision.to_pause:
                side.write_pause(name, Pause(
                    note="paused by kiqbeat: pause_after_failures reached (failed ticks in a "
                         "row); resume clears the streak", by="kiqbeat", at_ms=now_ms),
                    now_ms=now_ms)
                report.round_trips += 1
            if len(judged) < CHANGED_PER_INVOCATION:
                break
        from kiqbeat.alerts.delivery import deliver_all  # loads the sinks' modules

        try:
            turns = deliver_all(side.client, side.namespace, self.sinks, decision.backlog)
        except (RedisRefusedError, StateError) as exc:  # decided and kept: delivered later
            report.warnings.append(f"alert events were not delivered: {exc}")
            return
        for turn in turns:
            report.alerts_delivered += turn.sent
            report.warnings += [f"alert delivery to the {turn.sink}: {why}"
                                for why in turn.dropped]
            if turn.error:
                waiting = decision.backlog.get(turn.sink, (0, 0))
                report.warnings.append(
                    f"alert delivery to the {turn.sink} failed ({turn.error}); "
                    f"{max(1, sum(w for w in waiting if w > 0) - turn.sent)} event(s) wait "
                    "for the next invocation (kiqbeat status shows the backlog)")

    def _judged(self, side: RedisSide, report: Report) -> list[Changed]:
        """The changed names to judge (read again when this invocation folded the inbox,
        which may have added some), their health kept in `report.changed_health`."""
        judged = self._changed
        if report.outcomes_folded:
            judged = read_changed_names(side.client, side.namespace)
            report.round_trips += 1
        if judged and self._expecting:
            report.changed_health = self._health(side, judged, report)
        return judged

    @staticmethod
    def _health(side: RedisSide, judged: Sequence[Changed], report: Report) -> list[Health]:
        """The health of the judged names (one round trip; none without names)."""
        if not judged:
            return []
        from kiqbeat.outcomes.records import read_health  # only when there is a name

        report.round_trips += 1
        return list(read_health(side.client, side.namespace, [c.name for c in judged]).values())
