"""AWS Lambda entrypoint: EventBridge invokes it about once a minute; it runs one invocation.

Which ticks are due comes from the Redis clock and kiqbeat's watermarks, never from the
event: a late, retried or doubled delivery pushes nothing twice. The event only supplies
a correlation id and the time it was meant to fire, logged as trigger lateness.

Settings come from the KIQBEAT_* variables of `kiqbeat.settings` (the same knobs as the
CLI's flags; template.yaml sets ENVIRONMENT, empty means unset), plus POWERTOOLS_SERVICE_NAME,
POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_LOG_LEVEL, read by Powertools. One `Engine` lives
across warm invocations: client, caches, warnings already logged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from kiqbeat.core.report import Report
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError
from kiqbeat.settings import VARIABLES, Settings

POWERTOOLS_VARIABLES = ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE",
                        "POWERTOOLS_LOG_LEVEL")
ENVIRONMENT = VARIABLES + POWERTOOLS_VARIABLES
# Stop pushing this long before Lambda's own timeout, so the invocation ends with a report.
DEADLINE_MARGIN_S = 3.0

# Defaults for runs outside Lambda (`kiqbeat invoke`, tests); template.yaml sets both.
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "kiqbeat"
logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE,
                  namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "Kiqbeat")


@dataclass(frozen=True)
class Trigger:
    """What the event says about itself: who sent it, when it was meant to fire, which attempt."""

    kind: str  # "scheduler", "rule" or "manual"
    correlation_id: str | None
    scheduled_time: datetime | None
    attempt: int | None


def trigger(event: Any) -> Trigger:
    """Read an EventBridge Scheduler `Input`, a classic `Scheduled Event`, or anything else."""
    if not isinstance(event, Mapping):
        return Trigger("manual", None, None, None)
    if "scheduled_time" in event or "execution_id" in event:
        attempt = str(event.get("attempt", ""))
        return Trigger("scheduler", _text(event.get("execution_id")),
                       _instant(event.get("scheduled_time")),
                       int(attempt) if attempt.isdigit() else None)
    if event.get("detail-type") == "Scheduled Event":
        return Trigger("rule", _text(event.get("id")), _instant(event.get("time")), None)
    return Trigger("manual", _text(event.get("id")), None, None)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _instant(value: Any) -> datetime | None:
    try:
        instant = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return instant.astimezone(UTC) if instant.tzinfo else None


_engine: Engine | None = None  # kept across warm invocations; built on the first


def _warm_engine() -> Engine:
    global _engine
    if _engine is None:
        _engine = Engine.from_environ(os.environ)
    return _engine


def _lambda_left_s(context: Any) -> float | None:
    """Seconds this invocation may still use, keeping the margin; None outside Lambda."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else float(remaining()) / 1000 - DEADLINE_MARGIN_S


def _record(report: Report, lateness_s: float | None) -> None:
    count, seconds_ = MetricUnit.Count, MetricUnit.Seconds
    metrics.add_metric(name="TicksPushed", unit=count, value=report.pushed)
    metrics.add_metric(name="TicksAlreadyPushed", unit=count, value=report.already_pushed)
    metrics.add_metric(name="TicksMissed", unit=count, value=report.missed)
    metrics.add_metric(name="LargestLag", unit=seconds_, value=report.lag_s)
    metrics.add_metric(name="Schedules", unit=count, value=report.schedules)
    metrics.add_metric(name="DefinitionsSetAside", unit=count, value=report.set_aside)
    if lateness_s is not None:
        metrics.add_metric(name="TriggerLateness", unit=seconds_, value=lateness_s)


def invoke(event: Any, context: Any) -> dict[str, Any]:
    """One invocation: build settings, client and schedule (reused when warm), run, report."""
    # The deadline counts from here: fetching the document and the Redis secret spends it
    # as pushing does, and each AWS call is bounded by what is left of it.
    started = time.monotonic()
    lambda_left_s = _lambda_left_s(context)
    fired = trigger(event)
    if fired.correlation_id:
        logger.set_correlation_id(fired.correlation_id)
    logger.append_keys(trigger=fired.kind, attempt=fired.attempt,
                       scheduled_time=fired.scheduled_time.isoformat() if fired.scheduled_time
                       else None)
    engine = None
    try:
        engine = _warm_engine()
        budget_s = engine.settings.deadline_s
        if lambda_left_s is not None:
            budget_s = min(budget_s, lambda_left_s)
        deadline = started + budget_s
        with engine.sources.until(deadline):
            config = engine.config()
            report = engine.run(config, deadline_s=max(0.0, deadline - time.monotonic()))
    except Exception:
        metrics.add_metric(name="InvocationsFailed", unit=MetricUnit.Count, value=1)
        logger.exception("kiqbeat invocation failed",
                         extra={"config_source": os.environ.get("KIQBEAT_CONFIG"),
                                "redis": engine.redis_where() if engine else None})
        raise
    # Lateness against the Redis clock, the one clock kiqbeat trusts (DESIGN §1).
    lateness_s = ((report.now - fired.scheduled_time).total_seconds()
                  if fired.scheduled_time else None)
    _record(report, lateness_s)
    for warning in report.warnings:  # each new one once; an invocation's own each time
        logger.warning(warning)
    summary = report.as_dict() | {"trigger_lateness_s":
                                  round(lateness_s, 3) if lateness_s is not None else None}
    logger.info(report.summary(), extra={"report": summary})
    return summary


def _wrap(function: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
    wrapped: Callable[[Any, Any], dict[str, Any]] = metrics.log_metrics(
        capture_cold_start_metric=True)(logger.inject_lambda_context(clear_state=True)(function))
    try:  # read as every KIQBEAT_* setting is (true/false/1/0/yes/no)
        tracing = Settings.load({"KIQBEAT_TRACING": os.environ.get("KIQBEAT_TRACING", "")}).tracing
    except ConfigError:
        tracing = False  # the first invocation's settings report the bad value
    if tracing:
        # Imported only when switched on: the X-Ray SDK costs cold-start time.
        from aws_lambda_powertools import Tracer

        wrapped = Tracer().capture_lambda_handler(wrapped)
    return wrapped


lambda_handler = _wrap(invoke)


def forget_warm() -> None:
    """Drop the warm engine (tests; a changed environment)."""
    global _engine
    if _engine is not None:
        _engine.close()
    _engine = None
