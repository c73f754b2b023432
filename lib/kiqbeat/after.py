"""After an invocation's pushes: the workers' outcomes folded into the outcome records, and
the call workers fold their own reports with published (docs/store.md, "The worker
protocol")."""

from __future__ import annotations

from typing import Any

from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.deployment import Deployment
from kiqbeat.errors import RedisRefusedError
from kiqbeat.redis import keys


def fold_outcomes(deployment: Deployment, config: Config, report: Report, deadline: float,
                  reported: Any) -> None:
    """Fold what the workers reported (`reported`: the inbox's length, as read) into the
    outcome records, in bounded slices, none past the deadline once one ran; a store that
    refuses it (a Redis user without the outcome keys) costs a warning, not the report."""
    if isinstance(reported, Exception):
        report.warnings.append(f"the workers' outcomes were not folded: reading "
                               f"{keys.outcomes_inbox(config.namespace)} was refused "
                               f"({reported}); grant LLEN and RPOP (docs/deploy.md)")
        return
    if not (isinstance(reported, int) and reported > 0):
        return  # nothing reported: no round trip (and nothing to import)
    from kiqbeat.outcomes.records import Folded
    from kiqbeat.outcomes.records import fold_outcomes as fold

    folded = Folded()
    try:
        fold(deployment.client, config.namespace, history=deployment.settings.history,
             lua=deployment.lua, deadline=deadline, folded=folded)
    except RedisRefusedError as exc:
        report.warnings.append(f"the workers' outcomes were not folded: {exc}")
    report.outcomes_folded = folded.taken - folded.dropped
    report.outcomes_waiting = folded.left
    report.round_trips += folded.calls


def publish_fold(deployment: Deployment, config: Config, report: Report, published: Any,
                 reported: bool) -> None:
    """Publish the call workers fold their own reports with, when not current; refused, a
    warning: workers then write to the inbox, which the invocations fold."""
    if isinstance(published, Exception):
        published = None
    if published is None and not reported:
        return  # no middleware reports here: nothing to publish (and nothing to import)
    from kiqbeat.outcomes.records import publish_fold as publish

    try:
        if publish(deployment.client, config.namespace, deployment.settings.history,
                   deployment.lua, published, reported=reported):
            report.round_trips += 1
    except RedisRefusedError as exc:
        report.warnings.append(f"workers fold their reports through the inbox: {exc}")
