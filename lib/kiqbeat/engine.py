"""The engine: one deployment's invocations against the schedule store — read, plan, push.

An `Engine` is built from `Settings` (and, in tests or libraries, a ready client). It owns
everything kept from one invocation to the next, so that its meaning is visible here:

- the Redis client, built from the settings' URL (rebuilt when the URL changes, as after a
  secret rotation) and the startup checks done on it (once per client);
- the tick memo (the next tick of each timetable, and what one invocation's plans share)
  and the parsed definitions (stored bytes to a checked Schedule and its SHA1, bounded, of
  the schedules due again within KEEP_WARM_MS), so a warm process plans a schedule that
  is due every minute or few without parsing it;
- the last config whose neighbours (sidekiq-scheduler, sidekiq-cron) passed the check, and
  the digest of its definitions, compared with the one the store records;
- the warnings already reported: a config or startup warning is reported once per engine,
  while an invocation's own (a `wait_replicas` shortfall) is reported every time;
- the document sources and their caches.

An invocation (DESIGN §1, §7): one pipeline reads the Redis clock, the first batch of due
index entries (definition and watermark of each) and the digest of the document as last
applied; a changed document is applied as a diff first (then the batch is read again);
each batch is planned and pushed by the push script, which moves each schedule's index
entry in the same step; the next batch is read until one says nothing more is due.
A new process whose document's bytes are those last applied does not parse them at all
(`_invoke_unchanged`, document/fingerprint.py): the same first round trip reads the record
of those bytes, and the due schedules are planned from their stored definitions; when the
record does not hold, the batch read is dropped and the document is parsed (one more round
trip, only on the invocation that meets a changed document). A batch
carries at most MAX_BATCH_DEFINITION_BYTES of definitions, and a definition over
MAX_DEFINITION_BYTES is set aside without being read, so an invocation's memory is bounded
whatever the store holds (core/limits.py). The same first round trip counts the index
entries scored beyond any instant kiqbeat plans (a warning), and says when the index next
comes due (the report's `next_due_ms`, which paces `kiqbeat run`: the lowest entry above
now, and those the pushes move). Round trips:
one when nothing is due, two for an ordinary minute (one batch); a minute of more batches
reads each next batch while planning the one before (`_push_due`), and once more at the end.
Extras, each said where it happens:
the startup checks (one pipelined INFO) and script loads on a new client or server; the
neighbour check rides in the first pipeline whenever the engine meets a new parsed
config; an invocation that parsed the document records its fingerprint once (one write);
setting aside invalid definitions takes one write; `wait_replicas` adds a WAIT per push
call; `sidekiq_scheduler_ui` adds the tab's toggles to the first pipeline and one write.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis

from kiqbeat.alerts.step import AlertStep
from kiqbeat.core.limits import (
    MAX_PARSED_DEFINITION_BYTES,
    MAX_PARSED_DEFINITIONS,
    MAX_PLANNABLE_MS,
    MAX_REASON_CHARS,
    PUSH_CALL_BUDGET_US,
    PUSH_US_PER_GROUP,
    PUSH_US_PER_JOB,
)
from kiqbeat.core.pause import Pause
from kiqbeat.core.plan import KEEP_WARM_MS, Entry, TickMemo, plan_due, to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document.fingerprint import Applied, fingerprint, namespace_guess
from kiqbeat.document.sources import Sources
from kiqbeat.document.validate import encode_definition, read_definition, with_window
from kiqbeat.errors import (
    ConfigError,
    DeadlineError,
    RedisRefusedError,
    StateError,
    shown,
    shown_text,
)
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import connect, redis_errors, reply_text, startup_warnings
from kiqbeat.redis.definitions import Op, Oversized, definition_sha
from kiqbeat.redis.documents import document_digest
from kiqbeat.redis.due import Due, DueBatch, DueRead, Reads, StartedDue
from kiqbeat.redis.migrate import migrate_layout
from kiqbeat.redis.neighbours import Neighbours
from kiqbeat.redis.progress import bucket
from kiqbeat.redis.side import RedisSide
from kiqbeat.redis.urls import describe, parse_url
from kiqbeat.settings import DEFAULT_DEADLINE_S, Settings

if TYPE_CHECKING:  # loaded by the commands and invocations that use them
    from kiqbeat.alerts.sinks import Sink
    from kiqbeat.store import Status, Store

# Parsed definitions kept by a warm engine, and at most MAX_PARSED_DEFINITION_BYTES of
# definitions in all (core/limits.py).
MAX_PARSED = MAX_PARSED_DEFINITIONS
# Entries planned at a time: one push call's worth of one-job schedules (core/limits.py's
# time budget), so the next slice is planned while Redis runs the call made from this one.
PLAN_SLICE = max(1, int(PUSH_CALL_BUDGET_US // (PUSH_US_PER_GROUP + PUSH_US_PER_JOB)))
# The source a document without a location is stored as (a Config built in a test).
UNNAMED_DOCUMENT = "document"


@dataclass(frozen=True)
class Document:
    """A config's schedules in their stored form, and the digest of them all."""

    source: str
    definitions: dict[str, bytes]
    digest: str
    schedules: dict[str, Schedule]

    @classmethod
    def of(cls, config: Config) -> Document:
        """The document form of a config; the last one is kept for all engines of the process
        (one per shard in a Lambda), which share their sources and so their configs."""
        last = _LAST_DOCUMENT.get("config")
        if last is not None and last[0] is config:
            return last[1]
        document = cls._of(config)
        _LAST_DOCUMENT["config"] = (config, document)
        return document

    @classmethod
    def _of(cls, config: Config) -> Document:
        source = config.source or UNNAMED_DOCUMENT
        definitions = {s.name: encode_definition(s.definition, source)
                       for s in config.schedules}
        return cls(source, definitions, document_digest(definitions),
                   {s.name: s for s in config.schedules})


_LAST_DOCUMENT: dict[str, tuple[Config, Document]] = {}
_NO_DOCUMENT = Config(schedules=())


@dataclass
class _Probe:
    """An invocation's look for the record of its document's bytes (document/fingerprint.py):
    `mark` is their fingerprint, `namespace` where the record is looked for (`guessed`: from
    the bytes, not from the settings)."""

    source: str
    mark: str
    namespace: str
    guessed: bool
    confirmed: bool = False  # the record held: the invocation runs on it

    def queue(self, pipe: Any) -> None:
        pipe.hmget(keys.documents(self.namespace),
                   [keys.document_bytes_field(self.source), self.source])

    def holds(self, reply: Any) -> Applied | None:
        """The record, when it is of these bytes in this namespace and the store still holds
        the definitions it applied; None otherwise (then the document is parsed)."""
        if isinstance(reply, Exception):
            return None
        record, applied = reply
        found = Applied.decode(record)
        if (found is None or found.mark != self.mark or found.namespace != self.namespace
                or applied is None or reply_text(applied) != found.definitions_digest):
            return None
        self.confirmed = True
        return found


class Engine:
    """One deployment's invocations: builds or holds the client, owns what they share."""

    def __init__(self, settings: Settings | None = None, *, client: redis.Redis | None = None,
                 sources: Sources | None = None) -> None:
        self.settings = settings or Settings()
        self.sources = sources or Sources(self.settings.max_age_s)
        self._given_client = client
        self._client: redis.Redis | None = None  # built from the URL, when none was given
        self._url = ""
        self._unverified_tls = False  # the URL turns TLS verification off (allowed)
        self._checked_client: redis.Redis | None = None  # startup checks done on it
        self._checked_config: Config | None = None  # neighbours passed with it
        self._document: Document | None = None  # the current config's (Document.of caches)
        self._overridden: tuple[Config, Config] | None = None  # loaded -> with the overrides
        # (name, stored definition) -> (its schedule or why it is refused, its SHA1)
        self._parsed: dict[tuple[str, bytes], tuple[Schedule | str, str]] = {}
        self._parsed_bytes = 0  # the definitions `_parsed` holds, in bytes
        self._memo = TickMemo()
        self._invocations = 0  # that pushed (`_warm_up`)
        self._window_parsed_s: float | None = None  # the window `_parsed` was filled with
        self._reported: set[str] = set()
        self._lua = scripts.Caller(functions=self.settings.redis_functions)
        self._checked_keys: set[str] = set()  # RedisSide.checked
        # Expectations and alerts after the pushes (alerts/step.py), to the settings' sinks.
        self._alerts = AlertStep(_sinks(self.settings))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None,
                     flags: Mapping[str, str | None] | None = None) -> Engine:
        """An engine from flags over KIQBEAT_* variables (the process environment by default)."""
        return cls(Settings.load(os.environ if environ is None else environ, flags))

    def config(self) -> Config:
        """The settings' document with the window and namespace overrides applied; without
        a document, the store's settings alone (a deployment whose schedules are all written
        at runtime)."""
        source = self.settings.config_source
        loaded = self.sources.load_config(source) if source else _NO_DOCUMENT
        if self._overridden is not None and self._overridden[0] is loaded:
            return self._overridden[1]  # the same object each time: its document is cached
        config = loaded
        if self.settings.window_s is not None:
            config = with_window(config, self.settings.window_s,
                                 what="KIQBEAT_MISSED_JOBS_WINDOW / --missed-jobs-window")
        namespace = self.settings.namespace
        if namespace is not None and namespace != config.namespace:
            if source and config.namespace:
                raise ConfigError(f"KIQBEAT_NAMESPACE / --namespace {namespace!r} differs from "
                                  f"the document's namespace {config.namespace!r}",
                                  source=source)
            config = replace(config, namespace=namespace)
        self._overridden = (loaded, config)
        return config

    @property
    def shards(self) -> int:
        """How many shards the store is split into (1: not split)."""
        return self.settings.shard[1] if self.settings.shard else 1

    @property
    def client(self) -> redis.Redis:
        """The Redis client: the one given, or one built from the settings' current URL."""
        if self._given_client is not None:
            return self._given_client
        url = self.sources.redis_url(self.settings.redis_environ())
        if self._client is None or url != self._url:
            self._close_own_client()
            insecure = self.settings.redis_insecure_tls
            self._client, self._url = connect(url, insecure_tls=insecure), url
            self._unverified_tls = parse_url(url).insecure
        return self._client

    def redis_where(self) -> str:
        """Where Redis is, without any secret, for log lines ("" before the first connect)."""
        return describe(self._url) if self._url else ""

    def run(self, config: Config | None = None, *, now: datetime | None = None,
            deadline_s: float | None = None, replay: bool = True) -> Report:
        """One invocation: apply the document if it changed, push every due tick exactly
        once, and report what happened.

        `config` defaults to the settings' document, which is then not parsed when its
        bytes are those the store records as applied (`_invoke_unchanged`); `now` replays
        an invocation at an earlier instant (tests, rehearsals) and may not be later than
        the Redis clock; with `replay` False (the CLI without --replay) nor more than the
        missed-jobs window before it. With more than one shard, the store must record the
        count (`reindex`): an invocation never records it.
        Raises KiqbeatError subclasses; anything pushed before an error is pushed with its
        watermark, anything not pushed is left for the next invocation. The client is kept
        after Redis was unavailable: redis-py reconnects, and behind Sentinel it asks for
        the master on every new connection (a kept client reaches a new master 0.01-0.3 s
        after a failover settles, measured in tests/faults/test_sentinel_client.py).
        """
        if now is not None and now.timestamp() < 0:
            raise ConfigError(f"--now {now.isoformat()} is before 1970: the Redis clock, the "
                              "watermarks and Sidekiq's timestamps count from 1970")
        started = time.monotonic()
        limit_s = self.settings.deadline_s if deadline_s is None else deadline_s
        deadline = started + limit_s
        report = self._invoke_unchanged(now, deadline, replay) if config is None else None
        if report is None:
            config = self.config() if config is None else config
            report = self._invoke(config, now, deadline, replay)
            assert report is not None  # only a probe's invocation gives up
        report.duration_s = time.monotonic() - started
        return report

    def store(self, config: Config | None = None) -> Store:
        """The schedule store API on this engine's client, with the namespace, window and
        shard count of its settings."""
        from kiqbeat.store import Store

        config = self.config() if config is None else config
        # The deployment's count (--shard, --shard-count), else the one the store records.
        shards = self.settings.shard[1] if self.settings.shard else self.settings.shard_count
        return Store(self.client, namespace=config.namespace, shards=shards,
                     window_s=config.missed_jobs_window_s, history=self.settings.history,
                     lua=self._lua, actor=self.settings.actor or None)

    def document_applied(self, config: Config | None = None) -> tuple[Document, bool] | None:
        """The settings' document (None without one), and whether the store holds it as it
        is now (False: the next invocation applies its changes); one round trip."""
        config = self.config() if config is None else config
        document = self._document_of(config)
        if document is None:
            return None
        return document, self._side(config).applied_digest(document.source) == document.digest

    def load_functions(self) -> str:
        """Load (replace) kiqbeat's function library into Redis: an administrator's step."""
        client = self.client
        with redis_errors(client, "loading kiqbeat's function library"):
            name = client.function_load(scripts.library(), replace=True)
        return reply_text(name)

    def close(self) -> None:
        """Close the client this engine built (a given client stays its owner's)."""
        self._close_own_client()

    def _document_of(self, config: Config) -> Document | None:
        """The config's document form (None when there is no document), cached per config."""
        if not config.source and not config.schedules:
            self._document = None
            return None
        document = Document.of(config)
        if document is not self._document:
            self._document = document
            self._forget_parsed()  # the window may have changed, and lookaheads with it
        return document

    def _mark_of(self, config: Config) -> str | None:
        """The fingerprint of the bytes `config` was parsed from, when it is the settings'
        document as this engine read it (and may be recorded: no Recurring Jobs tab)."""
        source = self.settings.config_source.strip()
        loaded = self._overridden
        if not source or config.sidekiq_scheduler_ui or loaded is None or loaded[1] is not config:
            return None
        parsed = self.sources.parsed(source)
        if parsed is None or parsed[1] is not loaded[0]:
            return None
        return fingerprint(parsed[0], source, window_s=self.settings.window_s,
                           namespace=self.settings.namespace)

    def _invoke_unchanged(self, now: datetime | None, deadline: float,
                          replay: bool) -> Report | None:
        """An invocation of the settings' document without parsing it, when a new process
        meets the bytes last applied (document/fingerprint.py): no validation, no neighbour
        check, no document warnings (`kiqbeat validate` shows them); the due schedules are
        read from the store as any stored one is. None when the document must be parsed:
        no document, a parse of these very bytes at hand (a warm process plans faster with
        it), or no record that holds (then nothing was written)."""
        source = self.settings.config_source
        if not source:
            return None
        raw = self.sources.read_document(source)
        parsed = self.sources.parsed(raw.source)
        if parsed is not None and parsed[0] == raw.digest:
            return None
        namespace = self.settings.namespace
        probe = _Probe(raw.source, fingerprint(raw.digest, raw.source,
                                               window_s=self.settings.window_s,
                                               namespace=namespace),
                       namespace_guess(raw.data) if namespace is None else namespace,
                       guessed=namespace is None)
        stand_in = Config(schedules=(), namespace=probe.namespace)  # until the record says
        try:
            return self._invoke(stand_in, now, deadline, replay, probe)
        except (RedisRefusedError, StateError):
            # A guessed namespace may be one this user may not read, or whose keys are not
            # kiqbeat's: the document says which, once parsed.
            if probe.confirmed or not probe.guessed:
                raise
            self._checked_client = None  # the next attempt reports startup warnings again
            return None

    def _side(self, config: Config) -> RedisSide:
        """The store this engine's invocations of `config` run on (its client, the config's
        namespace, the settings' shard count and way of running scripts)."""
        return RedisSide(self.client, config.namespace, self.shards, self._lua,
                         self._checked_keys)  # push pre-flight: once per engine (pushes.py)

    def _invoke(self, config: Config, now: datetime | None, deadline: float,
                replay: bool, probe: _Probe | None = None) -> Report | None:
        """One invocation of `config`, or (with `probe`) of the document the record found
        names; None when the probe's record does not hold (nothing was written)."""
        client = self.client
        side = self._side(config)
        warnings = list(config.warnings)
        if self._checked_client is not client:
            with redis_errors(client, "running startup checks"):
                warnings += startup_warnings(client)
            warnings += migrate_layout(client, config.namespace, self._lua)  # once, if any
            self._checked_client, self._checked_config = client, None
        namespace, shard = config.namespace, self.settings.shard
        # One shard (the first) applies the document, for all: the diff is the same for
        # every shard, and N copies of it would only multiply the load.
        applies = shard is None or shard[0] == 0
        document = self._document_of(config)
        last = self._checked_config
        neighbours = Neighbours(config, check=last is not config and last != config)
        mark = None if probe is not None or document is None or not applies else (
            self._mark_of(config))
        marked = document.source if document is not None else ""

        due_key = keys.due(namespace, shard)

        def more_reads(reads: Reads) -> None:
            if probe is not None:
                reads.add("probe", probe.queue)
            if mark is not None:
                reads.add("recorded", lambda pipe: pipe.hget(
                    keys.documents(namespace), keys.document_bytes_field(marked)))
            reads.add("neighbours", neighbours.queue)
            # Read, never recorded here: only `kiqbeat schedules reindex` records the count,
            # so a typo in a first invocation's --shard is refused, not kept for good.
            reads.add("shards", lambda pipe: pipe.get(keys.shards(namespace)))
            if document is not None and applies:
                reads.add("applied", lambda pipe: pipe.hget(keys.documents(namespace),
                                                            document.source))
            # Whether the workers reported anything: folded after the pushes only then, so
            # a deployment without the middleware pays no round trip for it.
            reads.add("outcomes", lambda pipe: pipe.llen(keys.outcomes_inbox(namespace)))
            # The call workers fold their own reports with: published when not current.
            reads.add("outcomes:script", lambda pipe: pipe.get(keys.outcomes_script(namespace)))
            reads.add("unplannable",  # never planned: say so
                      lambda pipe: pipe.zcount(due_key, f"({MAX_PLANNABLE_MS}", "+inf"))
            self._alerts.reads(reads, namespace)

        upto_ms = None if now is None else to_ms(now)
        self._alerts.begin()
        read = side.read_due(shard, upto_ms=upto_ms, more=more_reads)
        redis_now, replies = read.now, read.replies
        self._alerts.read(replies)
        batch: DueBatch | None = read.batch
        unplannable = replies.one("unplannable")
        applied = replies.one("applied")
        indexed_for = replies.one("shards")
        recorded = None
        if probe is not None:
            found = probe.holds(replies.one("probe"))
            if found is None:
                self._checked_client = None  # the next attempt reports startup warnings again
                return None
            config = found.config()
            if config.missed_jobs_window_s != self._window_parsed_s:
                self._forget_parsed()  # parsed with another window (lookaheads depend on it)
                self._window_parsed_s = config.missed_jobs_window_s
        else:
            recorded = replies.one("recorded")
            config = neighbours.apply(replies.all("neighbours"))
        self._checked_config = neighbours.config
        warnings += neighbours.warnings
        if now is None:
            now = redis_now
        elif now > redis_now:
            raise ConfigError(f"--now {now.isoformat()} is later than the Redis clock "
                              f"{redis_now.isoformat()}: that would push ticks early")
        elif not replay and now < redis_now - timedelta(seconds=config.missed_jobs_window_s):
            raise ConfigError(
                f"--now {now.isoformat()} is more than the missed-jobs window "
                f"({config.missed_jobs_window_s:g} s) before the Redis clock "
                f"{redis_now.isoformat()}: an invocation there would register schedules as "
                "first seen then and record everything since as missed. To replay on "
                "purpose (a test, a rehearsal on a copy), pass --replay or set "
                "KIQBEAT_ALLOW_REPLAY=1; nothing was written")
        if indexed_for is None and self.shards > 1:
            raise ConfigError(
                f"this invocation runs {self.shards} shards but the store records no shard "
                f"count ({keys.shards(namespace)}): run `kiqbeat schedules reindex --shard "
                f"0/{self.shards}` once to split it (a Lambda: the event {{\"kiqbeat\": "
                f"\"reindex\", \"shards\": {self.shards}}}; docs/deploy.md, \"Shards\"); "
                "nothing was written")
        if (indexed_for is not None and not isinstance(indexed_for, Exception)
                and reply_text(indexed_for) != str(self.shards)):
            raise ConfigError(
                f"the store's due index is split into {reply_text(indexed_for)} shard(s) "
                f"({keys.shards(namespace)}) but this invocation runs with {self.shards}: it "
                f"would plan the wrong index. Run with --shard I/{reply_text(indexed_for)} "
                "(KIQBEAT_SHARD), or, after changing the shard count, run `kiqbeat schedules "
                f"reindex --shard 0/{self.shards}` once (docs/store.md); nothing was written")
        report = Report(now=now, round_trips=1, next_due_ms=read.next_due_ms)
        if isinstance(unplannable, int) and unplannable:
            warnings.append(
                f"{unplannable:,} entries of the due index {due_key} are scored beyond the "
                "year 9999 (written by hand or by another language?), so they are never "
                "planned; `kiqbeat schedules reindex` rescores them to be planned "
                "(`kiqbeat status` names them)")
        if isinstance(applied, Exception):
            with redis_errors(client, f"reading {keys.documents(namespace)}"):
                raise applied
        if document is not None and applies and (
                applied is None or reply_text(applied) != document.digest):
            # At most half the time left: the rest is for pushing what is due.
            clock = time.monotonic()
            applied_warnings, finished = self._apply(side, document, report,
                                                     clock + max(0.0, deadline - clock) / 2)
            warnings += applied_warnings
            applied = document.digest.encode() if finished else None
            batch = None
        report.warnings = self._not_yet_reported(warnings)
        if self._unverified_tls:  # said every time, on purpose
            report.warnings.append(f"TLS to Redis at {describe(self._url)} is not verified "
                                   "(KIQBEAT_REDIS_INSECURE_TLS): anyone on the path can read "
                                   "the password and push jobs")
        self._push_due(side, config, batch, report, deadline)
        reported = replies.one("outcomes")
        if isinstance(reported, int) and reported > 0:
            self._fold_outcomes(config, report, deadline)
        elif isinstance(reported, Exception):
            report.warnings.append(f"the workers' outcomes were not folded: reading "
                                   f"{keys.outcomes_inbox(namespace)} was refused "
                                   f"({reported}); grant LLEN and RPOP (docs/deploy.md)")
        self._publish_fold(config, report, replies.one("outcomes:script"),
                           isinstance(reported, int) and reported > 0)
        self._alerts.run(side, report)
        if config.sidekiq_scheduler_ui:
            neighbours.write_tab(client, config, report)
        if (mark is not None and document is not None and applied is not None
                and reply_text(applied) == document.digest):
            self._record(Applied.of(config, mark, document.digest), document.source, recorded,
                         report)
        return report

    def _fold_outcomes(self, config: Config, report: Report, deadline: float) -> None:
        """Fold what the workers reported since the last invocation into the outcome records
        (after the pushes, in bounded slices, none past the deadline once one ran); a store
        that refuses it (a Redis user without the outcome keys) costs a warning, not the
        pushes' report."""
        from kiqbeat.outcomes.records import Folded, fold_outcomes

        folded = Folded()
        try:
            fold_outcomes(self.client, config.namespace, history=self.settings.history,
                          lua=self._lua, deadline=deadline, folded=folded)
        except RedisRefusedError as exc:
            report.warnings.append(f"the workers' outcomes were not folded: {exc}")
        report.outcomes_folded = folded.taken - folded.dropped
        report.outcomes_waiting = folded.left
        report.round_trips += folded.calls

    def _publish_fold(self, config: Config, report: Report, published: Any,
                      reported: bool) -> None:
        """Publish the call workers fold their own reports with (publish_fold says when;
        docs/store.md, "The worker protocol"); refused, a warning: workers then write to the
        inbox, which this invocation folds."""
        if isinstance(published, Exception):
            published = None
        if published is None and not reported:
            return  # no middleware reports here: nothing to publish (and nothing to import)
        from kiqbeat.outcomes.records import publish_fold
        try:
            if publish_fold(self.client, config.namespace, self.settings.history, self._lua,
                            published, reported=reported):
                report.round_trips += 1
        except RedisRefusedError as exc:
            report.warnings.append(f"workers fold their reports through the inbox: {exc}")

    def _record(self, applied: Applied, source: str, recorded: Any, report: Report) -> None:
        """Record that the document's bytes are applied, unless the store says so already:
        new processes then run it without parsing it (one write, after the push)."""
        if isinstance(recorded, Exception) or Applied.decode(recorded) == applied:
            return
        key = keys.documents(applied.namespace)
        with redis_errors(self.client, f"writing {key}"):
            self.client.hset(key, keys.document_bytes_field(source), applied.encode())
        report.round_trips += 1

    def _apply(self, side: RedisSide, document: Document, report: Report,
               deadline: float) -> tuple[list[str], bool]:
        """Apply a changed document to the store; warnings for what it may not change, and
        whether it is applied in full."""
        change = side.apply_document(document.source, document.definitions, document.digest,
                                     deadline=deadline, now_ms=to_ms(report.now))
        report.round_trips += change.round_trips
        report.documents_applied += 1
        if not change.finished:
            return [f"the document {document.source} is applied in part (the invocation's "
                    "deadline came first); the next invocation goes on"], False
        return [f"schedule {shown(name)} of the document was not applied: the store's schedule "
                f"of that name belongs to {shown_text(owner) if owner else 'the API'}; remove "
                "it there, or rename this one"
                for name, owner in change.refused], True

    def _push_due(self, side: RedisSide, config: Config, batch: DueBatch | None,
                  report: Report, deadline: float) -> None:
        """Plan and push the due entries, a batch at a time, until a read made after every
        push of the invocation says no more are due (a batch cut short by the bytes of its
        definitions does not end the invocation).

        The promise: an invocation that ends without an error has read every index entry
        due at its instant that was in the index when it began, unless someone else moved
        or removed index entries meanwhile (a racing invocation, a writer: then it may read
        past some, left for the next invocation, never pushed twice: push.lua re-checks
        every schedule's mark and SHA). Entries written meanwhile (a "plan me" score 0 from
        `Store.put`) are read when its reads reach them (always when no entry was left
        alone: the read that ends the invocation then starts at the first entry), else by
        the next invocation. It never loops: a read that finds nothing new (no fresh entry,
        none met again for the first time) after every push sent before it has the next
        read start past its entries. A deadline passed mid-way raises DeadlineError: what
        was pushed stays pushed with its watermarks, the rest is for the next invocation.

        Redis and Python overlap: as soon as a batch is read, the read of the next one is
        sent (`RedisSide.start_due`) on the line of the pushes (`Pusher.line`: Redis runs one
        connection's commands in order), so it runs after the pushes of the batches before
        and before this batch's, while Python plans this batch. It therefore skips, beyond
        the entries met again (left alone by their pushes: another copy planned further, a
        definition changed meanwhile; each counted once, and only when met by a read that
        ran after its push), this batch's fresh entries, which its pushes have not moved yet.
        An early read whose reply is lost (a failed connection) is made again after the
        pushes, as is the read that would end the invocation (`_Ahead`), so an entry
        written meanwhile is read as the pushes leave the index. A definition is set aside
        only after the early read in flight has run: its write moves an index entry the
        read counts on. Once the pusher stops (the byte bound), nothing more is sent.

        A batch is planned a slice at a time (PLAN_SLICE entries, about one push call), and
        each call is sent before the next slice is planned: Python plans while Redis pushes
        (`Pusher`: one call in flight, read before the next is sent). The cyclic garbage
        collector is paused meanwhile (the loop makes no cycles; its full collections over
        the engine's caches cost more than the loop itself), and the engine's long-lived
        objects are frozen out of its reach once it is warm (`_warm_up`).
        """
        shard = self.settings.shard
        upto_ms = to_ms(report.now)
        seen: set[str] = set()
        counted: set[str] = set()  # entries met again by a read made after their push
        passed = 0  # entries passed over by reads that found nothing new (others moved them)
        # The document's schedules as this invocation runs them (the tab's toggles applied).
        document = self._document
        own = (document.schedules if document is not None and not config.sidekiq_scheduler_ui
               else {s.name: s for s in config.schedules})
        pusher = side.pusher(config, report, deadline, shard=shard,
                             history=self.settings.history)
        ahead: _Ahead | None = None  # the next batch's read, sent early
        unpushed: set[str] = set()  # the fresh entries whose pushes ran after `batch`'s read
        late = True  # `batch` was read after every push sent before it
        collecting = gc.isenabled()
        gc.disable()
        try:
            while True:
                if batch is None:
                    if time.monotonic() > deadline:
                        raise DeadlineError(f"invocation deadline passed after {report.pushed} "
                                            "jobs pushed; the next invocation pushes the rest")
                    read = ahead.read() if ahead is not None else None
                    late = read is None
                    if read is None:  # none sent, or lost: read as the pushes leave the index
                        pusher.wait()
                        read = side.read_due(shard, upto_ms=upto_ms,
                                             offset=len(counted) + passed)
                        unpushed = set()
                    else:
                        unpushed = ahead.fresh if ahead is not None else set()
                    ahead = None
                    batch = read.batch
                    report.round_trips += 1
                    report.next_due_ms = _earlier(report.next_due_ms, read.next_due_ms)
                fresh = []
                known = len(counted)
                for due in batch.entries:
                    name = due.name
                    if name not in seen:
                        fresh.append(due)
                    elif name not in unpushed:
                        counted.add(name)  # left alone: it stays where it is
                if not fresh and not unpushed and len(counted) == known:
                    passed += len(batch.entries)  # all counted before: moved up by others
                seen.update(due.name for due in fresh)
                if batch.more and not pusher.stopped:
                    ahead = _Ahead(side.start_due(
                        shard, pusher.line, upto_ms=upto_ms,
                        offset=len(counted) + passed + len(fresh)),
                        {due.name for due in fresh})
                settle = ahead.read if ahead is not None else None
                entries = self._entries(side, fresh, config, own, report, settle)
                self._alerts.watch(entries)
                report.schedules += len(fresh)
                for first in range(0, len(entries), PLAN_SLICE):
                    plan = plan_due(entries[first:first + PLAN_SLICE], report.now,
                                    config.missed_jobs_window_s, self._memo)
                    if plan.failed:
                        self._set_aside(side, [Op("reject", name, why.encode(), expect=sha)
                                               for name, sha, why in plan.failed], report,
                                        settle)
                    for chunk in plan.chunks():
                        if not pusher.send(chunk, plan.now_ms):
                            break
                    if plan.groups:  # where the push moves their index entries
                        report.next_due_ms = _earlier(
                            report.next_due_ms, min(g.next_due_ms for g in plan.groups))
                    if pusher.stopped:
                        break
                if pusher.stopped or (not batch.more and late):
                    break
                batch = None
            if ahead is not None:
                ahead.read()  # its reply read: the line's connection goes back to the pool
                ahead = None
            pusher.wait()
        finally:
            if ahead is not None:
                ahead.abandon()
            if collecting:
                gc.enable()
        self._warm_up()

    def _warm_up(self) -> None:
        """Once the engine is warm (its second invocation: a process that runs one, as
        `kiqbeat run-once` does, gains nothing and pays a collection), move what it holds
        (parsed definitions, the tick memo, templates, imported modules) out of the cyclic
        collector's generations (`gc.freeze`): later full collections skip them. Once per
        engine: what is frozen is never collected, and little of it ever becomes garbage."""
        self._invocations += 1
        if self._invocations == 2:
            gc.collect()
            gc.freeze()

    def _entries(self, side: RedisSide, batch: Sequence[Due], config: Config,
                 own: Mapping[str, Schedule], report: Report,
                 settle: Callable[[], object] | None = None) -> list[Entry]:
        """The batch's schedules to plan; invalid definitions are set aside (one write,
        after `settle`)."""
        entries: list[Entry] = []
        aside: list[Op] = []
        now_ms = to_ms(report.now)
        parse = self._parse
        for due in batch:
            name, definition = due.name, due.definition
            if definition is None:  # removed by a plain HDEL: forget the rest
                aside.append(Op("reject", name))
                continue
            if isinstance(definition, Oversized):  # not read: set aside by its length
                why = f"schedule {shown(name)}: {definition.why()}"
                aside.append(Op("reject", name, why.encode(),
                                expect=f"big:{definition.size_bytes}"))
                continue
            if due.garbled:  # its progress record is not one: never counted on
                why = (f"schedule {shown(name)}: its progress record (in "
                       f"{keys.progress_bucket(side.namespace, bucket(name))}) is garbled, "
                       "written by hand? Fix or HDEL that field (without it the schedule "
                       "starts afresh from its next tick), then `ZADD kiqbeat:due 0 NAME` or "
                       "write the definition again")
                aside.append(Op("reject", name, why.encode(),
                                expect=definition_sha(definition)))
                continue
            parsed, sha = parse(name, definition, config, own, now_ms)
            if isinstance(parsed, str):
                aside.append(Op("reject", name, parsed.encode(), expect=sha))
            else:
                pause = due.pause
                entries.append(Entry(parsed, due.mark_ms, sha,
                                     None if pause is None else Pause.decode(pause)))
        if aside:
            self._set_aside(side, aside, report, settle)
        return entries

    def _set_aside(self, side: RedisSide, aside: list[Op], report: Report,
                   settle: Callable[[], object] | None = None) -> None:
        """Set definitions aside (or forget removed ones), one write at the invocation's
        instant, after `settle` (the early due read in flight has run: the write removes
        index entries it counts on); warn for each."""
        if settle is not None:
            settle()
        results = side.write(aside, now_ms=to_ms(report.now))
        report.round_trips += 1
        for op, (code, _) in zip(aside, results, strict=True):
            if code == "+" and op.definition:
                report.set_aside += 1
                report.warnings.append(f"schedule {shown(op.name)} set aside (fix its definition "
                                       f"to run it again): "
                                       f"{shown_text(op.definition, MAX_REASON_CHARS)}")

    def _parse(self, name: str, definition: bytes, config: Config,
               own: Mapping[str, Schedule], now_ms: int) -> tuple[Schedule | str, str]:
        """The checked schedule of a stored definition, or why it is refused; and the
        definition's SHA1.

        Kept parsed (`_parsed`) only when the schedule's next tick after `now_ms` is at most
        KEEP_WARM_MS (core/plan.py) away: a schedule due again only in an hour (most of a
        large store) would be pushed out of the cache by then, and keeping it meanwhile only
        costs memory and the garbage collector's time; it is read again through the
        content-keyed checks (document/validate.py), nearly as fast. A refusal is kept."""
        document = self._document
        if document is not None and document.definitions.get(name) == definition:
            return own[name], definition_sha(definition)  # the document's own: checked
        key = (name, definition)
        known = self._parsed.get(key)
        if known is not None:
            return known
        sha = definition_sha(definition)
        parsed: Schedule | str
        try:
            parsed = read_definition(name, definition, window_s=config.missed_jobs_window_s)
        except ConfigError as exc:
            parsed = "; ".join(exc.problems)[:MAX_REASON_CHARS]
        if isinstance(parsed, Schedule):
            try:
                soon = self._memo.next_ms(parsed.timetable, now_ms) - now_ms <= KEEP_WARM_MS
            except (ValueError, OverflowError):  # planning says why (beyond the year 9999)
                soon = False
            if not soon:
                return parsed, sha
        if (len(self._parsed) >= MAX_PARSED
                or self._parsed_bytes + len(definition) > MAX_PARSED_DEFINITION_BYTES):
            self._forget_parsed()
        self._parsed[key] = (parsed, sha)
        self._parsed_bytes += len(definition)
        return parsed, sha

    def _forget_parsed(self) -> None:
        self._parsed.clear()
        self._parsed_bytes = 0

    def _not_yet_reported(self, warnings: Sequence[str]) -> list[str]:
        fresh = [w for w in dict.fromkeys(warnings) if w not in self._reported]
        self._reported.update(fresh)
        return fresh

    def _close_own_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None  # `_url` stays: it names the Redis in a failure's log line
        self._checked_client = None


class _Ahead:
    """The next batch's due read, sent early (`Engine._push_due`), and the fresh entries of
    the batch it skips (their pushes were sent after it); `read` reads its reply once,
    and again gives the same (None: lost, read it again after the pushes)."""

    def __init__(self, started: StartedDue, fresh: set[str]) -> None:
        self.started, self.fresh = started, fresh
        self._read: DueRead | None = None
        self._done = False

    def abandon(self) -> None:
        """Drop the read if its reply is not read yet (an invocation ending in an error)."""
        if not self._done:
            self._done = True
            self.started.abandon()

    def read(self) -> DueRead | None:
        if not self._done:
            self._done = True
            self._read = self.started.result()
        return self._read


def _sinks(settings: Settings) -> list[Sink]:
    """The alert sinks the settings name; their modules (urllib's, boto3's) are loaded only
    when one is set."""
    if not (settings.alert_webhook or settings.alert_sns_topic):
        return []
    from kiqbeat.alerts.delivery import sinks_of

    return sinks_of(settings.alert_webhook, settings.alert_secret, settings.alert_sns_topic,
                    os.environ)


def _earlier(a: int | None, b: int | None) -> int | None:
    """The earlier of two instants that may be unknown (None)."""
    return b if a is None else a if b is None else min(a, b)


def run(client: redis.Redis, config: Config, *, now: datetime | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S) -> Report:
    """One invocation by a new engine on `client`: as a cold start (scripts, tests)."""
    return Engine(client=client).run(config, now=now, deadline_s=deadline_s)


def status(client: redis.Redis, config: Config) -> Status:
    """`Store.status` through a new engine on `client`, with the config's namespace and
    window."""
    return Engine(client=client).store(config).status()
