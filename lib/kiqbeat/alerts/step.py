"""The alert step of an invocation (DESIGN §10): after the pushes, fold the outcomes, decide
the incidents, pause the schedules that asked for it, and give each sink its turn.

An `AlertStep` is owned by the engine, built from the settings' sinks; `watch` notes the due
schedules with expectations as the invocation plans them, and `run` does the rest. It adds
one round trip to an invocation whose sinks have nothing waiting (the decision), one per
schedule paused, and two or three per sink with events waiting (delivery.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kiqbeat.alerts.delivery import deliver_all
from kiqbeat.alerts.health import Folds, fold_outcomes
from kiqbeat.alerts.incidents import Watch, decide
from kiqbeat.alerts.sinks import Sink
from kiqbeat.core.pause import Pause
from kiqbeat.core.plan import Entry, to_ms
from kiqbeat.core.report import Report
from kiqbeat.redis.side import RedisSide


@dataclass
class AlertStep:
    """One engine's alert step: its sinks, the outcome fold, and the watch of the invocation
    at hand."""

    sinks: Sequence[Sink] = ()
    fold: Folds = fold_outcomes
    _watch: Watch = field(default_factory=Watch)

    def begin(self) -> None:
        """Start an invocation's watch afresh."""
        self._watch = Watch()

    def watch(self, entries: Sequence[Entry]) -> None:
        """Note the planned entries that have expectations."""
        self._watch.add(entries)

    def run(self, side: RedisSide, report: Report) -> None:
        """Fold, decide, pause and deliver (module docstring); delivery failures are
        warnings, retried by the next invocation."""
        watch, self._watch = self._watch, Watch()
        now_ms = to_ms(report.now)
        changed = self.fold(side, now_ms)
        decision = decide(side.client, side.namespace, now_ms, watch, report, changed,
                          [s.name for s in self.sinks], side.lua)
        report.round_trips += 1
        report.alert_events += decision.events
        for name in decision.to_pause:
            side.write_pause(name, Pause(
                note="paused by kiqbeat: pause_after_failures reached (failed ticks in a "
                     "row); resume clears the streak", by="kiqbeat", at_ms=now_ms),
                now_ms=now_ms)
            report.round_trips += 1
        for turn in deliver_all(side.client, side.namespace, self.sinks, decision.backlog):
            report.alerts_delivered += turn.sent
            if turn.error:
                waiting = decision.backlog.get(turn.sink, (0, 0))
                report.warnings.append(
                    f"alert delivery to the {turn.sink} failed ({turn.error}); "
                    f"{max(1, sum(w for w in waiting if w > 0) - turn.sent)} event(s) wait "
                    "for the next invocation (kiqbeat status shows the backlog)")
