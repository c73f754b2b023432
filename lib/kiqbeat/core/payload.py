"""Sidekiq job hashes for a schedule's tick (DESIGN §4): the exact JSON kiqbeat pushes.

Pure: the tick and the push instant are arguments. Every job carries the fields that
Sidekiq's client writes and Exq's middlewares read: `class`, `args`, `queue`, `jid`,
`retry`, `created_at` and `enqueued_at`.

- `created_at` is when the job was pushed (Sidekiq's `normalize_item` sets it at push time,
  for scheduled jobs too).
- `enqueued_at` is the push instant for a job that goes straight into its queue (Sidekiq's
  `atomic_push`, Exq's `to_job_serialized`). A job pushed ahead into the `schedule` set
  carries its tick instead, the instant it becomes due (with `jitter`, its release instant,
  tick + offset: it becomes due then, and that is what Exq's `enqueue_at` would have written
  for it). Exq needs one there: its scheduler
  (`script.ex` `scheduler_dequeue`) moves the job to its queue unchanged, and
  `Exq.Middleware.Telemetry` computes `round(enqueued_at * 1000)` for every job it runs (a
  job without it crashes the worker and stays parked in Exq's backup queue). The tick is what
  Exq's own `enqueue_at` writes (`Time.unix_seconds(time)`, the scheduled instant), so Exq's
  latency figures mean the same for kiqbeat's jobs as for its own, and no job ever claims to
  have been enqueued before its tick. Sidekiq ignores the value: its poller pushes the job
  again through `Client#push`, whose `atomic_push` overwrites `enqueued_at` with the
  release instant (Sidekiq 7's client even drops it from jobs it schedules itself).
- `retry` defaults to true, as Sidekiq's `default_job_options` do.
- Timestamps are float epoch seconds (Sidekiq 6/7, Exq) or, with `timestamp_format: ms`,
  integer epoch milliseconds (Sidekiq 8 only: Exq's Telemetry reads seconds).

Every job also names what it was pushed for, so that a worker middleware can record its
outcome (docs/store.md, "The worker protocol"): `kiqbeat_schedule` (the schedule's name) and
`kiqbeat_tick` (the tick, integer epoch ms; a manual run's: its trigger instant); a schedule
with `expires_after` adds `kiqbeat_expires_at` (epoch ms: tick + expires_after), past which
the middleware does not run it. They follow Sidekiq's keys and precede `extra`'s.

The `jid` depends on the schedule name and the tick instant only, never on the payload, so
copies whose configs briefly differ during a deploy still agree on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from hashlib import blake2b
from typing import Any

from kiqbeat.core.limits import MAX_PARSED_DEFINITIONS
from kiqbeat.core.schedule import Schedule

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The job keys naming what a job was pushed for (docs/store.md, "The worker protocol").
SCHEDULE_KEY = "kiqbeat_schedule"
TICK_KEY = "kiqbeat_tick"
EXPIRES_KEY = "kiqbeat_expires_at"
_MS = timedelta(milliseconds=1)
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# The standard library's C encoder, when it has one (CPython does), built once and called
# directly: `JSONEncoder.encode` builds its float formatter and a new C encoder in Python on
# every call, and checks each container against the ones being written (for a cycle): most
# of the ~5 us it costs for a schedule's args (a cold invocation encodes each due schedule's
# args once). This one keeps no such record (None), so it holds no state between calls. A
# cycle, which no checked definition holds (its nesting is bounded), ends in RecursionError
# ("or worse", says the standard library of an encoder without the record: only values
# never checked could hold one), and `_encode` then asks `_JSON.encode`, which raises what
# it always did. Same text, same
# errors: tests/unit/test_payload.py.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE = None if _C_ENCODER is None else _C_ENCODER(
    None, _JSON.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
_BASESTRING = json.encoder.encode_basestring  # what `_JSON.encode` calls for a str


def _encode(value: Any) -> str:
    """`value` as `_JSON.encode` writes it (compact, UTF-8 kept, no NaN); a string (each
    job's schedule name) through the one function `_JSON.encode` calls for it, without an
    encoder built around it."""
    if type(value) is str:
        return _BASESTRING(value)
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(value, 0))
        except RecursionError:  # a cycle, or nesting too deep: the reference says which
            pass
    return _JSON.encode(value)


def _epoch_ms(instant: datetime, what: str) -> int:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got naive {instant!r}")
    return (instant - _EPOCH) // _MS


def jid(schedule_name: str, tick: datetime) -> str:
    """The job id of a tick: 24 lowercase hex characters from (schedule name, tick instant)."""
    # Unambiguous: the digits after the last NUL are the instant, everything before is the
    # name (config.py refuses control characters in names anyway).
    return jid_ms(schedule_name, _epoch_ms(tick, "tick"))


def jid_ms(schedule_name: str, tick_ms: int) -> str:
    """`jid` of a tick given in epoch milliseconds."""
    return blake2b(f"{schedule_name}\x00{tick_ms}".encode(), digest_size=12).hexdigest()


def active_job_id(job_id: str) -> str:
    """The ActiveJob `job_id` (a version-4-shaped UUID) derived from a Sidekiq jid."""
    import uuid  # ActiveJob schedules only (uuid loads platform)

    digest = blake2b(b"kiqbeat-activejob\x00" + job_id.encode(), digest_size=16).digest()
    return str(uuid.UUID(bytes=digest, version=4))


def _stamp(instant: datetime, fmt: str) -> float | int:
    if fmt == "ms":
        return _epoch_ms(instant, "timestamp")
    return instant.timestamp()


def _iso9(instant: datetime) -> str:
    """Ruby's `Time#utc.iso8601(9)`, as ActiveJob writes `enqueued_at`: nanosecond digits, Z."""
    return instant.astimezone(UTC).isoformat(timespec="microseconds")[:26] + "000Z"


def _arguments(schedule: Schedule, tick: datetime) -> list[Any]:
    args = list(schedule.args)
    if schedule.include_metadata:
        # sidekiq-scheduler's convention: one more argument, the tick as float seconds.
        args.append({"scheduled_at": tick.timestamp()})
    return args


def job_payload(
    schedule: Schedule, tick: datetime, *, pushed_at: datetime, scheduled: bool = False,
    job_id: str | None = None, released_at: datetime | None = None,
) -> dict[str, Any]:
    """The Sidekiq job hash for one tick pushed at `pushed_at`, into its queue or, if
    `scheduled`, into the `schedule` set, released at `released_at` (default: the tick; then
    `enqueued_at` is that instant: module docstring). Its jid, and `include_metadata`'s
    `scheduled_at`, are the tick's; its jid is the tick's unless `job_id` is given (a
    manual run's)."""
    job_id = job_id or jid(schedule.name, tick)
    due_at = released_at or tick
    fmt = schedule.timestamp_format
    if schedule.active_job_wrapper:
        job_args: list[Any] = [{
            "job_class": schedule.job_class,
            "job_id": active_job_id(job_id),
            # The Sidekiq adapter learns the provider id only after the push; ActiveJob
            # serializes it as nil and the wrapper fills it in when the job runs.
            "provider_job_id": None,
            "queue_name": schedule.queue,
            "priority": None,
            "arguments": _arguments(schedule, tick),
            "executions": 0,
            "exception_executions": {},
            "locale": "en",
            "timezone": "UTC",
            "enqueued_at": _iso9(pushed_at),
            "scheduled_at": _iso9(due_at) if scheduled else None,
        }]
        job: dict[str, Any] = {
            "class": schedule.active_job_wrapper,
            "wrapped": schedule.job_class,
            "args": job_args,
        }
    else:
        job = {"class": schedule.job_class, "args": _arguments(schedule, tick)}
    job["queue"] = schedule.queue
    job["jid"] = job_id
    job["retry"] = True
    job["created_at"] = _stamp(pushed_at, fmt)
    job["enqueued_at"] = _stamp(due_at if scheduled else pushed_at, fmt)
    # The worker middleware (clients/ruby, Kiqbeat::Middleware) records the job's outcome
    # under these, and marks `keys.running` while it runs (the push step checks it).
    tick_ms = _epoch_ms(tick, "tick")
    job[SCHEDULE_KEY] = schedule.name
    job[TICK_KEY] = tick_ms
    if schedule.expires_after_s:
        job[EXPIRES_KEY] = tick_ms + round(schedule.expires_after_s * 1000)
    # Validation keeps `extra` away from the keys set above, except `retry`.
    job.update(schedule.extra)
    return job


def job_json(
    schedule: Schedule, tick: datetime, *, pushed_at: datetime, scheduled: bool = False,
    job_id: str | None = None, released_at: datetime | None = None,
) -> str:
    """The compact JSON of `job_payload`: the exact bytes pushed to Redis."""
    return _encode(job_payload(schedule, tick, pushed_at=pushed_at, scheduled=scheduled,
                               job_id=job_id, released_at=released_at))


# Stand-ins for the per-job parts of a job; control characters keep them out of real values,
# and `job_template` checks that each appears exactly once anyway.
_ARGS = "\x00kiqbeat-args\x00"
_JID = "\x00kiqbeat-jid\x00"
_CREATED = "\x00kiqbeat-created_at\x00"
_ENQUEUED = "\x00kiqbeat-enqueued_at\x00"
_NAME = "\x00kiqbeat-name\x00"
_TICK = "\x00kiqbeat-tick\x00"


@dataclass(frozen=True)
class JobTemplate:
    """`job_json` of the schedules of one content — class, queue, options, timestamp format —
    with the per-job parts left open: the args, the jid, the stamps, the name and the tick.

    Rendering is one args encoding and a string join, a fraction of building and encoding
    the hash; one template serves every schedule of that content (per-tenant schedules
    differing only in name and args), so it stays cached however the due set rotates.
    """

    # The JSON around the open slots, which are in this order: the args, the jid, the push
    # instant (created_at), enqueued_at (the release instant if `scheduled`, else the push
    # instant), the schedule's name (a JSON string) and the tick (epoch ms).
    parts: tuple[str, str, str, str, str, str, str]
    scheduled: bool
    timestamp_format: str

    def render(self, name: str, args_json: str, job_id: str, pushed_at: datetime,
               tick: datetime, *, released: datetime | None = None) -> str:
        """The JSON of schedule `name`'s tick `tick` (jid `job_id`) with the args whose JSON
        is `args_json`, pushed at `pushed_at` (into the schedule set, released at `released`,
        default the tick, if the template is `scheduled`); equal to `job_json`'s for a
        schedule of this template's content with that name and those args."""
        fmt = self.timestamp_format
        pushed = _pushed_text(pushed_at, fmt)
        p0, p1, p2, p3, p4, p5, p6 = self.parts
        enqueued = _stamp_text(released or tick, fmt) if self.scheduled else pushed
        return (f"{p0}{args_json}{p1}{job_id}{p2}{pushed}{p3}{enqueued}{p4}{_encode(name)}"
                f"{p5}{_epoch_ms(tick, 'tick')}{p6}")


def _stamp_text(instant: datetime, fmt: str) -> str:
    """An instant as `job_json` writes it."""
    return str(_epoch_ms(instant, "timestamp")) if fmt == "ms" else float.__repr__(
        instant.timestamp())


# One invocation renders thousands of jobs pushed at the same instant.
_pushed_text = lru_cache(maxsize=8)(_stamp_text)


def job_template(schedule: Schedule, *, scheduled: bool) -> JobTemplate | None:
    """The template of the jobs of schedules of this one's content (for the `schedule` set if
    `scheduled`), whatever their names and args; None when the args depend on the tick
    (`include_metadata`, the ActiveJob envelope) or the job carries a tick-dependent expiry
    (`expires_after`): those jobs are built one by one with `job_json`."""
    if _untemplated(schedule):
        return None
    probe = job_payload(schedule, _EPOCH, pushed_at=_EPOCH, scheduled=scheduled)
    probe["args"], probe["jid"] = _ARGS, _JID
    probe["created_at"], probe["enqueued_at"] = _CREATED, _ENQUEUED
    probe[SCHEDULE_KEY], probe[TICK_KEY] = _NAME, _TICK
    text = _encode(probe)
    # The jid is a string: its quotes stay in the parts; the rest are written bare.
    tokens = [_encode(_ARGS), _encode(_JID)[1:-1], _encode(_CREATED), _encode(_ENQUEUED),
              _encode(_NAME), _encode(_TICK)]
    if any(text.count(token) != 1 for token in tokens):
        return None
    pieces = re.split("(" + "|".join(map(re.escape, tokens)) + ")", text)
    if pieces[1::2] != tokens:  # `extra` cannot move them (validation), but say so here
        return None
    p0, p1, p2, p3, p4, p5, p6 = pieces[0::2]
    return JobTemplate((p0, p1, p2, p3, p4, p5, p6), scheduled, schedule.timestamp_format)


def _untemplated(schedule: Schedule) -> bool:
    """Whether the schedule's jobs differ by more than name, args, jid and instants: the args
    depend on the tick (`include_metadata`, the ActiveJob envelope), or the job carries an
    expiry (`expires_after`)."""
    return bool(schedule.include_metadata or schedule.active_job_wrapper
                or schedule.expires_after_s)


_ContentKey = tuple[str, str, str, int, bool]


class JobTemplates:
    """Job templates by content, so that schedules of one content share theirs (a template
    does not depend on a schedule's name or args): keyed by class, queue, timestamp format
    and the identity of the `extra` options (a template's schedules share that mapping; the
    entry keeps it, so the identity is never reused while cached)."""

    def __init__(self) -> None:
        # (class, queue, format, id(extra) or 0, scheduled) -> (extra, template or None)
        self._by_content: dict[_ContentKey, tuple[Mapping[str, Any], JobTemplate | None]] = {}
        # id(args) -> (args, their JSON): a warm process keeps its parsed schedules, and
        # each minute renders the same ones again (the entry keeps the args, so the id is
        # never reused while cached); no more than the engine keeps parsed.
        self._args: dict[int, tuple[tuple[Any, ...], str]] = {}
        # id(schedule) -> (the schedule, the bytes before its jobs' jid, the bytes between
        # the push instants and the tick (its name), its content key and template), for a
        # warm process's schedules (no more than the engine keeps parsed; the entry keeps
        # the schedule, so the id is never reused while cached).
        self._heads: dict[int, tuple[Schedule, bytes, bytes, _ContentKey, JobTemplate]] = {}
        # (content key) -> the bytes after the jid of a job pushed at `_tails_at`.
        self._tails: dict[_ContentKey, bytes] = {}
        self._tails_at: datetime | None = None

    def job(self, schedule: Schedule, tick: datetime, job_id: str, pushed_at: datetime,
            *, scheduled: bool, released: datetime | None = None) -> str:
        """`job_json` of the tick (a job for the schedule set released at `released`,
        default its tick), from the template of the schedule's content where there is one."""
        found = self._template(schedule, scheduled)
        if found is None:
            return job_json(schedule, tick, pushed_at=pushed_at, scheduled=scheduled,
                            job_id=job_id, released_at=released)
        return found[1].render(schedule.name, self._args_json(schedule.args, keep=True), job_id,
                               pushed_at, tick, released=released)

    def _template(self, schedule: Schedule, scheduled: bool
                  ) -> tuple[_ContentKey, JobTemplate] | None:
        """The template of the schedule's content, and its key; None when it has none."""
        if _untemplated(schedule):
            return None  # checked first: the content key does not tell these apart
        extra = schedule.extra
        key = (schedule.job_class, schedule.queue, schedule.timestamp_format,
               id(extra) if extra else 0, scheduled)
        entry = self._by_content.get(key)
        if entry is None:
            entry = self._by_content[key] = (extra, job_template(schedule, scheduled=scheduled))
        return None if entry[1] is None else (key, entry[1])

    def _args_json(self, args: tuple[Any, ...], *, keep: bool) -> str:
        """The args' JSON, kept by the args' identity when `keep`."""
        known = self._args.get(id(args))
        if known is not None and known[0] is args:
            return known[1]
        text = _encode(args)
        if keep:
            self._args[id(args)] = (args, text)
        return text

    def queued(self, schedule: Schedule, ticks_ms: Sequence[int], pushed_at: datetime,
               *, keep: bool = True) -> list[bytes] | None:
        """`job_json` of each tick, encoded, for jobs pushed into the schedule's queue at
        `pushed_at` (not scheduled), from its content's template; None when it has none.
        `keep` False: the schedule is not planned again soon, so nothing of it is kept (its
        args' JSON, the start of its jobs: the entry would keep the schedule alive)."""
        warm = self._heads.get(id(schedule))
        if warm is not None and warm[0] is schedule:
            _, head, named, key, template = warm
        else:
            found = self._template(schedule, False)
            if found is None:
                return None
            key, template = found
            args_json = self._args_json(schedule.args, keep=False)  # the head keeps it
            p0, p1 = template.parts[:2]
            # Everything before the jid: the same for every job of the schedule.
            head = f"{p0}{args_json}{p1}".encode()
            p4, p5 = template.parts[4:6]
            # From the end of enqueued_at to the tick: the same for every job of it too.
            named = f"{p4}{_encode(schedule.name)}{p5}".encode()
            if keep:
                self._heads[id(schedule)] = (schedule, head, named, key, template)
        if pushed_at != self._tails_at:
            self._tails.clear()
            self._tails_at = pushed_at
        # From the jid to the name: the same for every job pushed at that instant.
        tail = self._tails.get(key)
        if tail is None:
            pushed = _pushed_text(pushed_at, template.timestamp_format)
            _, _, p2, p3 = template.parts[:4]
            tail = self._tails[key] = f"{p2}{pushed}{p3}{pushed}".encode()
        name = schedule.name
        end = template.parts[6].encode()
        return [b"%s%s%s%s%d%s" % (head, jid_ms(name, tick_ms).encode(), tail, named, tick_ms,
                                   end) for tick_ms in ticks_ms]

    def forget_beyond(self, size: int) -> None:
        """Drop every template, or every args' JSON, once they outnumber `size` (configs
        come and go, due sets rotate)."""
        if len(self._by_content) > size:
            self._by_content.clear()
            self._tails.clear()  # keyed as the templates are
            self._heads.clear()
        if len(self._heads) > min(size, MAX_PARSED_DEFINITIONS):
            self._heads.clear()
        if len(self._args) > min(size, MAX_PARSED_DEFINITIONS):
            self._args.clear()
