"""The knobs of every entrypoint, in one table: each is a flag and an environment variable.

The CLI (`kiqbeat run-once`, `run`, `status`), the loop and the Lambda handler all build a
`Settings` from the same table, so a knob the Lambda has the CLI has too, under the same
name. A flag wins over its variable; an empty variable counts as unset. Values are checked
once, here, with messages naming the flag or variable; so is the one rule between two of
them (`Settings.shard_to_run`: a shard is one of the deployment's shard count).
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from kiqbeat.core.durations import duration_s, positive_duration_s
from kiqbeat.core.limits import DEFAULT_HISTORY, MAX_HISTORY, MAX_SHARDS, MAX_SHOWN_CHARS
from kiqbeat.document.sources import DEFAULT_MAX_AGE_S
from kiqbeat.errors import ConfigError, shown
from kiqbeat.redis.urls import describe

DEFAULT_DEADLINE_S = 40.0


def parse_shard(value: str) -> tuple[int, int]:
    """A shard written I/N (--shard, KIQBEAT_SHARD, a Lambda event's "shard"); ConfigError
    otherwise."""
    index, _, count = value.partition("/")
    if not (index.isascii() and index.isdigit() and count.isascii() and count.isdigit()):
        raise ConfigError(f"invalid shard {shown(value)}: expected INDEX/COUNT, e.g. 0/4")
    if len(index) > 9 or len(count) > 9:  # far beyond MAX_SHARDS: no giant int() to show
        raise ConfigError(f"invalid shard {shown(value)}: at most {MAX_SHARDS:,} shards")
    i, n = int(index), int(count)
    if n > MAX_SHARDS:  # a typo such as 0/100000000 must not reach the store
        raise ConfigError(f"invalid shard {i}/{n}: at most {MAX_SHARDS:,} shards "
                          "(kiqbeat.core.limits.MAX_SHARDS)")
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"invalid shard {i}/{n}: expected INDEX/COUNT with "
                          "0 <= INDEX < COUNT")
    return i, n


def _whole(value: str, least: int, most: int, must: str) -> int:
    """`value` as a whole number from `least` to `most`; ConfigError saying it `must` be
    that otherwise (digits counted first: Python refuses int() of thousands of digits with
    an error of its own)."""
    text = value.strip()
    digits = text.lstrip("0") or "0"  # leading zeros are no larger a number
    if text.isascii() and text.isdigit() and len(digits) < 10 and least <= int(digits) <= most:
        return int(digits)
    raise ConfigError(f"{shown(value)} must be {must}")


def _shard_count(value: str) -> int:
    return _whole(value, 1, MAX_SHARDS, f"a whole number of shards, 1 to {MAX_SHARDS:,}")


def _history(value: str) -> int:
    return _whole(value, 0, MAX_HISTORY, f"a whole number from 0 to {MAX_HISTORY}")


def _namespace(value: str) -> str:
    from kiqbeat.document.fields import namespace  # the document's rule, when one is set

    return namespace(value.strip())


def _actor(value: str) -> str:
    """Who the audit trail records: the bound a request's "actor" has (MAX_SHOWN_CHARS)."""
    text = value.strip()
    if len(text) > MAX_SHOWN_CHARS:
        raise ConfigError(f"{shown(value)} is longer than {MAX_SHOWN_CHARS} characters")
    return text


def _webhook_url(value: str) -> str:
    text = value.strip()
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError("must be an http:// or https:// URL, e.g. "
                          "'https://hooks.slack.com/services/...'")
    return text


def _topic_arn(value: str) -> str:
    text = value.strip()
    if not text.startswith("arn:") or text.count(":") != 5:
        raise ConfigError(f"{shown(value)} must be an SNS topic ARN, e.g. "
                          "'arn:aws:sns:us-east-1:123456789012:kiqbeat-alerts'")
    return text


def _true(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"{shown(value)} must be true or false")
    return lowered in ("true", "1", "yes")


@dataclass(frozen=True)
class Knob:
    """One setting: its attribute, environment variable, flag and parser."""

    name: str
    variable: str
    flag: str
    parse: Callable[[str], Any]  # ConfigError; the flag or variable is named by `load`
    metavar: str
    help: str


KNOBS: tuple[Knob, ...] = (
    Knob("config_source", "KIQBEAT_CONFIG", "--config", str.strip, "SOURCE",
         "schedule document: a file, s3://BUCKET/KEY, ssm:/NAME or appconfig:APP/ENV/PROFILE"),
    Knob("redis_url", "KIQBEAT_REDIS_URL", "--redis-url", str, "URL",
         "Redis URL (then $REDIS_URL); without its password when the secret holds it"),
    Knob("redis_secret", "KIQBEAT_REDIS_SECRET", "--redis-secret", str, "SECRET_ID",
         "Secrets Manager secret holding the Redis URL or password"),
    Knob("max_age_s", "KIQBEAT_CONFIG_MAX_AGE", "--config-max-age", duration_s,
         "DURATION", "how long a remote document or secret is reused (default 60s; 0: "
         "fetched every invocation)"),
    Knob("window_s", "KIQBEAT_MISSED_JOBS_WINDOW", "--missed-jobs-window", positive_duration_s,
         "DURATION", "override the document's missed_jobs_window"),
    Knob("namespace", "KIQBEAT_NAMESPACE", "--namespace", _namespace, "PREFIX",
         "key prefix of the store and the queues without a document ('exq:' for Exq); "
         "with one, it must agree with the document's"),
    Knob("shard", "KIQBEAT_SHARD", "--shard", parse_shard, "I/N",
         "only schedules of shard I of N (by a stable hash of their name)"),
    Knob("shard_count", "KIQBEAT_SHARD_COUNT", "--shard-count", _shard_count, "N",
         "how many shards the deployment runs: a shard run must be one of N (I/N), and "
         "`schedules reindex` splits the store into N (the template's ShardCount)"),
    Knob("history", "KIQBEAT_HISTORY", "--history", _history, "N",
         "pushes kept per schedule for `kiqbeat history` (default 10; 0: none; each costs "
         "about 30 bytes of Redis memory)"),
    Knob("deadline_s", "KIQBEAT_DEADLINE", "--deadline", positive_duration_s, "DURATION",
         "stop pushing after this long; the next invocation does the rest (default 40s)"),
    Knob("redis_insecure_tls", "KIQBEAT_REDIS_INSECURE_TLS", "--redis-insecure-tls", _true,
         "BOOL", "accept a rediss:// URL that turns verification off (warned about each time)"),
    Knob("redis_functions", "KIQBEAT_REDIS_FUNCTIONS", "--redis-functions", _true, "BOOL",
         "call kiqbeat's Redis 7 function library (FCALL) instead of scripts (EVALSHA)"),
    Knob("actor", "KIQBEAT_ACTOR", "--actor", _actor, "NAME",
         "who the audit trail records operator actions for (default USER@HOST; at most "
         f"{MAX_SHOWN_CHARS} characters)"),
    # `run-once --replay` is the flag (it takes no value); this is its variable: set it
    # where replays are the point (a test suite, a rehearsal on a copy of the store).
    Knob("replay", "KIQBEAT_ALLOW_REPLAY", "--replay", _true, "BOOL",
         "run-once only: allow --now further back than the missed-jobs window"),
    Knob("alert_webhook", "KIQBEAT_ALERT_WEBHOOK", "--alert-webhook", _webhook_url, "URL",
         "POST each alert event (failing, silent, recovered, paused) here as JSON (a Slack "
         "incoming webhook shows its text)"),
    Knob("alert_secret", "KIQBEAT_ALERT_SECRET", "--alert-secret", str.strip, "SECRET",
         "sign each webhook body: HMAC-SHA256 in the X-Kiqbeat-Signature header"),
    Knob("alert_sns_topic", "KIQBEAT_ALERT_SNS_TOPIC", "--alert-sns-topic", _topic_arn, "ARN",
         "publish each alert event to this SNS topic"),
    Knob("reference", "KIQBEAT_REFERENCE", "--reference", _true, "BOOL",
         "run invocations with every performance device off (the same result, slower: to "
         "check a suspected device fault)"),
    Knob("tracing", "KIQBEAT_TRACING", "--tracing", _true, "BOOL",
         "Lambda only (no command flag): trace with X-Ray through Powertools Tracer"),
)
VARIABLES = tuple(k.variable for k in KNOBS)


@dataclass(frozen=True)
class Settings:
    """What an entrypoint was asked to do, validated."""

    config_source: str = ""
    redis_url: str = ""
    redis_secret: str = ""
    max_age_s: float = DEFAULT_MAX_AGE_S
    window_s: float | None = None
    namespace: str | None = None
    shard: tuple[int, int] | None = None
    shard_count: int | None = None  # None: any (each shard names its own count)
    history: int = DEFAULT_HISTORY
    deadline_s: float = DEFAULT_DEADLINE_S
    redis_insecure_tls: bool = False
    redis_functions: bool = False
    actor: str = ""
    replay: bool = False  # `run-once --now` may go back further than the window
    tracing: bool = False
    reference: bool = False  # every performance device off (devices.py)
    alert_webhook: str = ""
    alert_secret: str = ""
    alert_sns_topic: str = ""
    # REDIS_URL, the last resort for the Redis address (often the app's own Redis).
    fallback_redis_url: str = ""

    @classmethod
    def load(cls, environ: Mapping[str, str],
             flags: Mapping[str, str | None] | None = None) -> Settings:
        """Settings from flags (by attribute name) over environment variables."""
        values: dict[str, Any] = {}
        for knob in KNOBS:
            flag = (flags or {}).get(knob.name)
            raw, what = (flag, knob.flag) if flag not in (None, "") else (
                environ.get(knob.variable) or "", knob.variable)
            if raw:
                try:
                    values[knob.name] = knob.parse(str(raw))
                except ConfigError as exc:
                    raise ConfigError(f"{what}: {exc}") from None
        return cls(**values, fallback_redis_url=environ.get("REDIS_URL") or "")

    def __repr__(self) -> str:
        """The settings, each Redis URL named by where it points (`urls.describe`): a repr
        or a log line never shows the URL's password."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("redis_url", "fallback_redis_url"):
            if values[name]:
                values[name] = f"<{describe(values[name])}>"
        for name in ("alert_webhook", "alert_secret"):  # a Slack webhook's URL is a secret
            if values[name]:
                values[name] = "<set>"
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in values.items())})"

    def shard_to_run(self, named: tuple[int, int] | None = None, *, by: str = "",
                     required: bool = True) -> tuple[int, int] | None:
        """The shard an invocation runs: `named` (given `by` an event, say) over --shard;
        None for the whole store (as is any I/1). ConfigError unless it is one of
        --shard-count's N, or, with `required`, when N > 1 and none is named.

        The shard count decides which index a changed document is written to: an
        invocation under another count would file its schedules where this deployment
        never looks.
        """
        shard = named if named is not None else self.shard
        count = self.shard_count
        if count is not None and (shard[1] if shard else 1) != count and (shard or required):
            if shard is None:
                where = (f"in {by}, e.g. {{\"shard\": \"0/{count}\"}}, or " if by else "") + \
                    f"with --shard I/{count} (KIQBEAT_SHARD)"
                raise ConfigError(f"this deployment runs {count} shards (KIQBEAT_SHARD_COUNT, "
                                  f"--shard-count): name one {where}")
            where = f"{by}'s shard" if named is not None else "--shard (KIQBEAT_SHARD)"
            raise ConfigError(f"{where} {shard[0]}/{shard[1]} is not one of this deployment's "
                              f"{count} shards (KIQBEAT_SHARD_COUNT, --shard-count); expected "
                              f"I/{count}")
        return shard if shard and shard[1] > 1 else None

    def redis_environ(self) -> dict[str, str]:
        """The variables `Sources.redis_url` reads, as these settings give them."""
        return {"KIQBEAT_REDIS_URL": self.redis_url, "KIQBEAT_REDIS_SECRET": self.redis_secret,
                "REDIS_URL": self.fallback_redis_url}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the knobs' flags to a command's parser (default: its environment variable);
    tracing is the Lambda's alone, so commands skip it, and `run-once` adds --replay
    itself (a flag without a value)."""
    for knob in KNOBS:
        if knob.name in ("tracing", "replay"):
            continue
        parser.add_argument(knob.flag, dest=knob.name, metavar=knob.metavar,
                            help=f"{knob.help} [${knob.variable}]")


def flags_of(args: argparse.Namespace) -> dict[str, str | None]:
    """The knob values a parsed command line holds."""
    return {k.name: getattr(args, k.name, None) for k in KNOBS}
