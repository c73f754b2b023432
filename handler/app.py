"""AWS Lambda entrypoint: EventBridge invokes it about once a minute; it runs one invocation.

Which ticks are due comes from the Redis clock and kiqbeat's watermarks, never from the
event: a late, retried or doubled delivery pushes nothing twice. The event supplies a
correlation id and the time it was meant to fire, logged as trigger lateness, and may
name the shard to run ("shard": "I/N", as KIQBEAT_SHARD; it wins over that variable).
template.yaml runs N shards with N schedules, each naming its own.

An operator's event ({"kiqbeat": "status" | "missed" | "backfill" | "trigger" | "history"
| "report" | "add" | "put" | "update" | "remove" | "pause" | "resume" | "skip" | "get" |
"reindex", ...}: kiqbeat.entrypoints.requests.FIELDS) runs
that request on the schedule store instead, over every shard, and returns its result: the
way to act on a Redis only the function can reach (docs/operations.md). It is read into the
request model the CLI reads its command lines into (kiqbeat.entrypoints.requests), checked
and run by the same code (kiqbeat.entrypoints.outcomes); a failed one is logged as a
clipped summary, never whole. `{"kiqbeat": "reindex", "shards": N}` (N the function's
KIQBEAT_SHARD_COUNT) splits the store once before a sharded function runs: invocations
never record the count themselves.

Settings come from the KIQBEAT_* variables of `kiqbeat.settings` (the same knobs as the
CLI's flags, the shard count included; template.yaml sets ENVIRONMENT, empty means unset),
plus POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_LOG_LEVEL, read
by Powertools. One `Engine` per shard lives across warm invocations (client, caches,
warnings already logged); they share the fetched document and secret.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from kiqbeat.core.instants import utc_instant
from kiqbeat.core.report import REPORT_METRICS, Report
from kiqbeat.devices import Devices, DocumentMemo
from kiqbeat.document.sources import Sources
from kiqbeat.engine import Engine
from kiqbeat.entrypoints import requests
from kiqbeat.entrypoints.requests import OPERATOR
from kiqbeat.errors import ConfigError, shown
from kiqbeat.settings import VARIABLES, Settings, parse_shard

POWERTOOLS_VARIABLES = ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE",
                        "POWERTOOLS_LOG_LEVEL")
ENVIRONMENT = VARIABLES + POWERTOOLS_VARIABLES
Shard = tuple[int, int] | None  # None: the whole store (as is any I/1)
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
                       # ASCII digits, bounded: int() refuses '²' and thousands of digits
                       int(attempt) if attempt.isascii() and attempt.isdigit()
                       and len(attempt) < 10 else None)
    if event.get("detail-type") == "Scheduled Event":
        return Trigger("rule", _text(event.get("id")), _instant(event.get("time")), None)
    return Trigger("manual", _text(event.get("id")), None, None)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _instant(value: Any) -> datetime | None:
    """The event's time (core.instants); None when it has none kiqbeat can use."""
    try:
        return utc_instant(str(value).replace("Z", "+00:00"))
    except ConfigError:
        return None


def event_shard(event: Any) -> Shard:
    """The shard an event names ("shard": "I/N"); None when it names none. ConfigError
    for anything but a valid I/N string."""
    if not isinstance(event, Mapping) or "shard" not in event:
        return None
    value = event["shard"]
    try:
        if not isinstance(value, str):
            raise ConfigError(f"invalid shard {shown(value)}: expected a string INDEX/COUNT, "
                              "e.g. \"0/4\"")
        return parse_shard(value)  # as KIQBEAT_SHARD is read
    except ConfigError as exc:
        raise ConfigError(f"the event's \"shard\": {exc}") from None


class _Warm:
    """What warm invocations keep: the settings, the sources they share (document, secret),
    and one Engine per shard run so far, each with its client and caches."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.settings = Settings.load(environ)
        self.sources = Sources(self.settings.max_age_s)
        self.documents = DocumentMemo()  # the document's stored form, encoded once for all
        self.engines: dict[Shard, Engine] = {}

    def engine(self, shard: Shard) -> Engine:
        engine = self.engines.get(shard)
        if engine is None:
            engine = Engine(replace(self.settings, shard=shard), sources=self.sources,
                            devices=Devices(reference=self.settings.reference,
                                            documents=self.documents))
            self.engines[shard] = engine
        return engine

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()


_warm: _Warm | None = None  # kept across warm invocations; built on the first


def _warm_state() -> _Warm:
    global _warm
    if _warm is None:
        _warm = _Warm(os.environ)
    return _warm


def _lambda_left_s(context: Any) -> float | None:
    """Seconds this invocation may still use, keeping the margin; None outside Lambda."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else float(remaining()) / 1000 - DEADLINE_MARGIN_S


def _record(report: Report, lateness_s: float | None) -> None:
    # An invocation's numbers as metrics (kiqbeat.core.report's table, which `kiqbeat run
    # --metrics-port` reads too), each the field of `Report.as_dict` that `kiqbeat run-once
    # --json` prints, so other deployments log the same.
    numbers = report.as_dict()
    for metric in REPORT_METRICS:
        metrics.add_metric(name=metric.cloudwatch, value=metric.value(numbers),
                           unit=MetricUnit.Seconds if metric.seconds else MetricUnit.Count)
    if lateness_s is not None:
        metrics.add_metric(name="TriggerLateness", unit=MetricUnit.Seconds, value=lateness_s)


# --- an operator's event: {"kiqbeat": OPERATION, FIELD: VALUE, ...} ----------------------------
# Read into the request model the CLI reads its command line into, checked and run by the
# same code (kiqbeat.entrypoints.requests).


def _operate(event: Mapping[str, Any], started: float, lambda_left_s: float | None,
             function_name: str) -> dict[str, Any]:
    # The operator's store and audit trail: loaded by the events that run them, not by a
    # scheduled invocation's cold start.
    from kiqbeat.entrypoints.outcomes import execute

    engine = None
    try:
        request = requests.from_event(event)
        # The whole store's engine: operations run no shard's invocation.
        engine = _warm_state().engine(None)
        # Who asks, for the audit trail: the event's "actor", else KIQBEAT_ACTOR, else the
        # function itself.
        if not (request.actor or engine.settings.actor):
            request = replace(request, actor=f"lambda:{function_name}")
        deadline = _deadline(engine, started, lambda_left_s)
        with engine.sources.until(deadline):
            outcome = execute(request, engine, deadline=deadline)
    except Exception:
        # A clipped summary, never the whole event (its values may be megabytes).
        logger.exception("kiqbeat operation failed",
                         extra={"operation": requests.summary(event),
                                "redis": engine.redis_where() if engine else None})
        raise
    done = outcome.backfill
    if done is not None:  # a dry run's 0 included: the metric is there for every backfill
        metrics.add_metric(name="Backfilled", unit=MetricUnit.Count, value=done.pushed)
    # Stopped early, what was pushed is out of the record already (and counted in
    # Backfilled); the result says "finished": false, and invoking it again pushes the rest.
    for problem in outcome.warnings + outcome.problems:
        logger.warning(problem)
    result = {OPERATOR: request.kind} | outcome.result
    # Not logged: the pushed jobs (up to 1,000), status's rows, a schedule's definition.
    listed = {k: v for k, v in result.items() if k not in ("jobs", "schedules", "definition")}
    logger.info(f"kiqbeat {request.kind}", extra={"operation": listed})
    return result


def _deadline(engine: Engine, started: float, lambda_left_s: float | None) -> float:
    budget_s = engine.settings.deadline_s
    if lambda_left_s is not None:
        budget_s = min(budget_s, lambda_left_s)
    return started + budget_s


def invoke(event: Any, context: Any) -> dict[str, Any]:
    """One invocation: build settings, client and schedule (reused when warm), run, report;
    or, for an operator's event, run its operation."""
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
    if isinstance(event, Mapping) and OPERATOR in event:
        return _operate(event, started, lambda_left_s,
                        str(getattr(context, "function_name", "") or "kiqbeat"))
    engine = None
    try:
        warm = _warm_state()
        shard = warm.settings.shard_to_run(event_shard(event), by="the event")
        shard_name = f"{shard[0]}/{shard[1]}" if shard else None  # None: the whole store
        logger.append_keys(shard=shard_name)
        engine = warm.engine(shard)
        deadline = _deadline(engine, started, lambda_left_s)
        with engine.sources.until(deadline):
            # No config passed: a cold start with an unchanged document does not parse it.
            report = engine.run(deadline_s=max(0.0, deadline - time.monotonic()))
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
    summary = report.as_dict() | {
        "shard": shard_name,
        "trigger_lateness_s": round(lateness_s, 3) if lateness_s is not None else None}
    logger.info(report.summary(), extra={"report": summary})
    return summary


def _wrap(function: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
    measured: Callable[[Any, Any], dict[str, Any]] = metrics.log_metrics(
        capture_cold_start_metric=True)(logger.inject_lambda_context(clear_state=True)(function))

    def wrapped(event: Any, context: Any) -> dict[str, Any]:
        # An operator's event other than a backfill publishes no metric, on purpose.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "No application metrics to publish")
            return measured(event, context)

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
    """Drop the warm engines and settings (tests; a changed environment)."""
    global _warm
    if _warm is not None:
        _warm.close()
    _warm = None
