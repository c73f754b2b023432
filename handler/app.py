"""AWS Lambda entrypoint: EventBridge invokes it about once a minute; it runs one invocation.

Which ticks are due comes from the Redis clock and kiqbeat's watermarks, never from the
event: a late, retried or doubled delivery pushes nothing twice. The event only supplies
a correlation id and the time it was meant to fire, logged as trigger lateness.

Environment (template.yaml sets exactly ENVIRONMENT; empty means unset):
  KIQBEAT_CONFIG              schedule source: a file in the package, s3://, ssm: or appconfig:
  KIQBEAT_CONFIG_MAX_AGE      seconds a remote document or secret is reused (default 60)
  KIQBEAT_REDIS_URL           Redis URL, or the URL without its password when the secret has it
  KIQBEAT_REDIS_SECRET        Secrets Manager id of the Redis URL or password
  KIQBEAT_MISSED_JOBS_WINDOW  overrides the document's missed_jobs_window ("90m", "3600")
  KIQBEAT_TRACING             "true" loads Powertools Tracer (X-Ray); otherwise it is not imported
  POWERTOOLS_SERVICE_NAME, POWERTOOLS_METRICS_NAMESPACE, POWERTOOLS_LOG_LEVEL  read by Powertools
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.document import sources
from kiqbeat.document.config import duration_s, with_window
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError, RedisUnavailableError
from kiqbeat.redis.connection import connect, scrub

KIQBEAT_VARIABLES = ("KIQBEAT_CONFIG", "KIQBEAT_CONFIG_MAX_AGE", "KIQBEAT_REDIS_URL",
                     "KIQBEAT_REDIS_SECRET", "KIQBEAT_MISSED_JOBS_WINDOW", "KIQBEAT_TRACING")
POWERTOOLS_VARIABLES = ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE",
                        "POWERTOOLS_LOG_LEVEL")
ENVIRONMENT = KIQBEAT_VARIABLES + POWERTOOLS_VARIABLES
# Stop pushing this long before Lambda's own timeout, so the invocation ends with a report.
DEADLINE_MARGIN_S = 3.0
MAX_DEADLINE_S = 40.0

# Defaults for runs outside Lambda (`kiqbeat invoke`, tests); template.yaml sets both.
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "kiqbeat"
logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE,
                  namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "Kiqbeat")


@dataclass(frozen=True)
class Settings:
    """What the environment asks for, validated once per cold start."""

    config_source: str
    max_age_s: float
    window_s: float | None
    tracing: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read and check the KIQBEAT_* variables; ConfigError names the bad one."""
        source = environ.get("KIQBEAT_CONFIG") or ""
        if not source:
            raise ConfigError("KIQBEAT_CONFIG is not set: name the schedule document "
                              "(a packaged file, s3://BUCKET/KEY, ssm:/NAME or appconfig:A/E/P)")
        max_age = environ.get("KIQBEAT_CONFIG_MAX_AGE") or ""
        window = environ.get("KIQBEAT_MISSED_JOBS_WINDOW") or ""
        return cls(
            config_source=source,
            max_age_s=duration_s(max_age, what="KIQBEAT_CONFIG_MAX_AGE") if max_age
            else sources.DEFAULT_MAX_AGE_S,
            window_s=duration_s(window, what="KIQBEAT_MISSED_JOBS_WINDOW") if window else None,
            tracing=(environ.get("KIQBEAT_TRACING") or "").strip().lower() == "true",
        )


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


# Kept across warm invocations: the Redis client (rebuilt if the URL changes, e.g. after a
# secret rotation), the settings, and warnings already logged. The parsed schedule document
# is cached by kiqbeat.document.sources.
_warm: dict[str, Any] = {}


def _settings() -> Settings:
    if "settings" not in _warm:
        _warm["settings"] = Settings.from_environ(os.environ)
    settings: Settings = _warm["settings"]
    return settings


def _client(url: str) -> redis.Redis:
    if _warm.get("url") != url:
        old = _warm.pop("client", None)
        if old is not None:
            old.close()
        _warm["client"] = connect(url)
        _warm["url"] = url
    client: redis.Redis = _warm["client"]
    return client


def _config(settings: Settings) -> Config:
    config = sources.load_config(settings.config_source, max_age_s=settings.max_age_s)
    if settings.window_s is not None:
        config = with_window(config, settings.window_s, what="KIQBEAT_MISSED_JOBS_WINDOW")
    return config


def _deadline_s(context: Any) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return MAX_DEADLINE_S
    return max(1.0, min(MAX_DEADLINE_S, float(remaining()) / 1000 - DEADLINE_MARGIN_S))


def _record(report: Report, lateness_s: float | None) -> None:
    count, seconds_ = MetricUnit.Count, MetricUnit.Seconds
    metrics.add_metric(name="TicksPushed", unit=count, value=report.pushed)
    metrics.add_metric(name="TicksAlreadyPushed", unit=count, value=report.already_pushed)
    metrics.add_metric(name="TicksMissed", unit=count, value=report.missed)
    metrics.add_metric(name="LargestLag", unit=seconds_, value=report.lag_s)
    metrics.add_metric(name="Schedules", unit=count, value=report.schedules)
    if lateness_s is not None:
        metrics.add_metric(name="TriggerLateness", unit=seconds_, value=lateness_s)


def invoke(event: Any, context: Any) -> dict[str, Any]:
    """One invocation: build settings, client and schedule (reused when warm), run, report."""
    fired = trigger(event)
    if fired.correlation_id:
        logger.set_correlation_id(fired.correlation_id)
    logger.append_keys(trigger=fired.kind, attempt=fired.attempt,
                       scheduled_time=fired.scheduled_time.isoformat() if fired.scheduled_time
                       else None)
    url = ""
    try:
        settings = _settings()
        config = _config(settings)
        url = sources.redis_url(os.environ, max_age_s=settings.max_age_s)
        report = run(_client(url), config, deadline_s=_deadline_s(context))
    except Exception as exc:
        if isinstance(exc, RedisUnavailableError):
            _forget_client()  # the next invocation connects afresh (see cli's `run`)
        metrics.add_metric(name="InvocationsFailed", unit=MetricUnit.Count, value=1)
        logger.exception("kiqbeat invocation failed",
                         extra={"config_source": os.environ.get("KIQBEAT_CONFIG"),
                                "redis": scrub(url) if url else None})
        raise
    # Lateness against the Redis clock, the one clock kiqbeat trusts (DESIGN §1).
    lateness_s = ((report.now - fired.scheduled_time).total_seconds()
                  if fired.scheduled_time else None)
    _record(report, lateness_s)
    for warning in report.warnings:
        if warning not in _warm.setdefault("warned", set()):
            _warm["warned"].add(warning)
            logger.warning(warning)
    summary = report.as_dict() | {"trigger_lateness_s":
                                  round(lateness_s, 3) if lateness_s is not None else None}
    logger.info(report.summary(), extra={"report": summary})
    return summary


def _wrap(function: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
    wrapped: Callable[[Any, Any], dict[str, Any]] = metrics.log_metrics(
        capture_cold_start_metric=True)(logger.inject_lambda_context(clear_state=True)(function))
    if (os.environ.get("KIQBEAT_TRACING") or "").strip().lower() == "true":
        # Imported only when switched on: the X-Ray SDK costs cold-start time.
        from aws_lambda_powertools import Tracer

        wrapped = Tracer().capture_lambda_handler(wrapped)
    return wrapped


lambda_handler = _wrap(invoke)


def _forget_client() -> None:
    client = _warm.pop("client", None)
    _warm.pop("url", None)
    if client is not None:
        client.close()


def forget_warm() -> None:
    """Drop what warm invocations reuse (tests; a changed environment)."""
    _forget_client()
    _warm.clear()
    sources.forget_cached()
