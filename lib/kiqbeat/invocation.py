"""One invocation (DESIGN §1, §7): read what is due, decide per schedule, push each group
through one script, report.

Round trips: one when nothing is due, two for an ordinary minute (one batch). The first
pipeline reads the Redis clock, the first due batch (definition and watermark of each), the
digest of the document as last applied and what the steps after the pushes need; a changed
document is applied as a diff first (sync.py), then the batch is read again. Each batch is
planned (core/plan.py) and pushed by the push script, which moves each schedule's index
entry in the same step, until a read says nothing more is due. A batch carries at most
MAX_BATCH_DEFINITION_BYTES of definitions and one over MAX_DEFINITION_BYTES is set aside
unread: an invocation's memory is bounded whatever the store holds (core/limits.py).
Extras: startup checks on a new client (deployment.py), the neighbour check on a new config,
the document's record (one write), definitions set aside (one write), `wait_replicas` (a
WAIT per push call), the Recurring Jobs tab (one write). How fast it runs is devices.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from kiqbeat.after import fold_outcomes, publish_fold
from kiqbeat.core.instants import to_ms
from kiqbeat.core.limits import MAX_PLANNABLE_MS, MAX_REASON_CHARS
from kiqbeat.core.pause import Pause
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.deployment import Deployment
from kiqbeat.devices import Devices, Parsed
from kiqbeat.document.fingerprint import Applied
from kiqbeat.errors import DeadlineError, shown, shown_text
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import Op, Oversized, definition_sha
from kiqbeat.redis.due import Due, DueRead, Reads, StartedDue
from kiqbeat.redis.neighbours import Neighbours
from kiqbeat.redis.progress import bucket
from kiqbeat.redis.side import RedisSide
from kiqbeat.sync import Probe, Sync

if TYPE_CHECKING:
    from kiqbeat.core.plan import Entry


class Invocation:
    """A deployment's invocations, with the devices that make them fast."""

    def __init__(self, deployment: Deployment, sync: Sync, devices: Devices) -> None:
        self.deployment, self.sync, self.devices = deployment, sync, devices
        self._checked_config: Config | None = None  # neighbours passed with it

    def run(self, config: Config, now: datetime | None, deadline: float, replay: bool,
            probe: Probe | None = None) -> Report | None:
        """One invocation of `config`, or (with `probe`) of the document the record found
        names; None when the probe's record does not hold (nothing was written)."""
        deployment = self.deployment
        client, side = deployment.client, deployment.side(config)
        warnings = list(config.warnings)
        started = deployment.startup_warnings(client, config.namespace)
        if started is not None:  # a new client
            warnings += started
            self._checked_config = None
        namespace, shard = config.namespace, deployment.settings.shard
        applies = shard is None or shard[0] == 0  # the first shard applies it for all
        document = self.sync.document_of(config)
        last = self._checked_config
        neighbours = Neighbours(config, check=last is not config and last != config)
        mark = (self.sync.mark_of(config)
                if probe is None and document is not None and applies else None)
        due_key = keys.due(namespace, shard)

        def more_reads(reads: Reads) -> None:
            if probe is not None:
                reads.add("probe", probe.queue)
            if mark is not None and document is not None:
                reads.add("recorded", lambda pipe: pipe.hget(
                    keys.documents(namespace), keys.document_bytes_field(document.source)))
            reads.add("neighbours", neighbours.queue)
            # Read, never recorded here: only `kiqbeat schedules reindex` records the count,
            # so a typo in a first invocation's --shard is refused, not kept for good.
            reads.add("shards", lambda pipe: pipe.get(keys.shards(namespace)))
            if document is not None and applies:
                reads.add("applied", lambda pipe: pipe.hget(keys.documents(namespace),
                                                            document.source))
            # Folded after the pushes only when the workers reported anything.
            reads.add("outcomes", lambda pipe: pipe.llen(keys.outcomes_inbox(namespace)))
            reads.add("outcomes:script", lambda pipe: pipe.get(keys.outcomes_script(namespace)))
            reads.add("unplannable",  # never planned: say so
                      lambda pipe: pipe.zcount(due_key, f"({MAX_PLANNABLE_MS}", "+inf"))
            deployment.alerts.reads(reads, namespace)

        # 1. Read what is due (and what the rest of the invocation needs), in one round trip.
        deployment.alerts.begin()
        read = side.read_due(shard, upto_ms=None if now is None else to_ms(now),
                             more=more_reads)
        replies = read.replies
        deployment.alerts.read(replies)
        batch: DueRead | None = read
        applied, recorded = replies.one("applied"), None
        if probe is not None:
            found = probe.holds(replies.one("probe"))
            if found is None:
                deployment.recheck()  # the next attempt reports startup warnings again
                return None
            config = found.config()
        else:
            recorded = replies.one("recorded")
            config = neighbours.apply(replies.all("neighbours"))
        self._checked_config = neighbours.config
        warnings += neighbours.warnings
        now = deployment.check_instant(now, read.now, config.missed_jobs_window_s, replay)
        deployment.check_shards(namespace, replies.one("shards"))
        report = Report(now=now, round_trips=1, next_due_ms=read.next_due_ms)
        unplannable = replies.one("unplannable")
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
            clock = time.monotonic()  # at most half the time left: the rest is for pushing
            applied_warnings, finished = self.sync.apply(
                side, document, report, clock + max(0.0, deadline - clock) / 2)
            warnings += applied_warnings
            applied = document.digest.encode() if finished else None
            batch = None
        report.warnings = deployment.fresh(warnings)
        # 2-3. Decide per schedule and push, a batch at a time (none due: no plan core loaded).
        if batch is None or batch.entries or batch.more:
            self._push_due(side, config, batch, report, deadline)
        # 4. After the pushes: outcomes, alerts, the tab, the document's record; report.
        reported = replies.one("outcomes")
        fold_outcomes(deployment, config, report, deadline, reported)
        publish_fold(deployment, config, report, replies.one("outcomes:script"),
                     isinstance(reported, int) and reported > 0)
        deployment.alerts.run(side, report)
        if config.sidekiq_scheduler_ui:
            neighbours.write_tab(client, config, report)
        if (mark is not None and document is not None and applied is not None
                and reply_text(applied) == document.digest):
            self.sync.record(Applied.of(config, mark, document.digest), document.source,
                             recorded, report)
        return report

    def _push_due(self, side: RedisSide, config: Config, batch: DueRead | None,
                  report: Report, deadline: float) -> None:
        """Plan and push the due entries, a batch at a time, until a read made after every
        push of the invocation says no more are due.

        The promise: an invocation that ends without an error has read every index entry
        due at its instant that was in the index when it began, unless someone else moved
        or removed entries meanwhile (then it may read past some, left for the next
        invocation, never pushed twice: push.lua re-checks every schedule's mark and SHA).
        Entries written meanwhile (a "plan me" score 0) are read when its reads reach them,
        else by the next invocation. It never loops: a read that finds nothing new after
        every push sent before it has the next read start past its entries. A deadline
        passed mid-way raises DeadlineError: what was pushed stays pushed.

        With read-ahead (devices.py), the next batch's read is sent on the push line as soon
        as a batch is read: it runs after the pushes sent before and before this batch's,
        so it skips this batch's fresh entries (`unpushed`) beyond those met again. A lost
        early read, and the read that would end the invocation, are made again after the
        pushes. A definition is set aside only after the early read in flight has run.
        """
        from kiqbeat.core.plan import plan_due  # only when something may be due
        shard, devices = self.deployment.settings.shard, self.devices
        upto_ms = to_ms(report.now)
        seen: set[str] = set()
        counted: set[str] = set()  # entries met again by a read made after their push
        passed = 0  # entries passed over by reads that found nothing new (others moved them)
        document = self.sync.document  # its schedules as this invocation runs them
        own = (document.schedules if document is not None and not config.sidekiq_scheduler_ui
               else {s.name: s for s in config.schedules})
        pusher = side.pusher(config, report, deadline, shard=shard,
                             history=self.deployment.settings.history)
        memo = devices.memo()
        ahead: StartedDue | None = None  # the next batch's read, sent early
        skips: set[str] = set()  # the fresh entries of the batch `ahead` runs before
        unpushed: set[str] = set()  # the fresh entries whose pushes ran after `batch`'s read
        late = True  # `batch` was read after every push sent before it
        with devices.paused_gc():
            try:
                while True:
                    if batch is None:  # read the next batch
                        if time.monotonic() > deadline:  # the replies in flight read first
                            pusher.wait()  # (the early read's, sent before them, kept)
                            raise DeadlineError(f"invocation deadline passed after "
                                                f"{report.pushed} jobs pushed; the next "
                                                "invocation pushes the rest")
                        read = ahead.result() if ahead is not None else None
                        late = read is None
                        if read is None:  # none sent, or lost: read as pushes leave the index
                            pusher.wait()
                            read = side.read_due(shard, upto_ms=upto_ms,
                                                 offset=len(counted) + passed)
                        unpushed = set() if late else skips
                        ahead = None
                        batch = read
                        report.round_trips += 1
                        report.next_due_ms = _earlier(report.next_due_ms, read.next_due_ms)
                    fresh = []
                    known = len(counted)
                    for due in batch.entries:
                        if due.name not in seen:
                            fresh.append(due)
                        elif due.name not in unpushed:
                            counted.add(due.name)  # left alone: it stays where it is
                    if not fresh and not unpushed and len(counted) == known:
                        passed += len(batch.entries)  # all counted before: moved by others
                    seen.update(due.name for due in fresh)
                    if devices.read_ahead and batch.more and not pusher.stopped:
                        ahead = side.start_due(shard, pusher.line, upto_ms=upto_ms,
                                               offset=len(counted) + passed + len(fresh))
                        skips = {due.name for due in fresh}
                    settle = ahead.result if ahead is not None else None
                    entries = self._entries(side, fresh, config, own, report, settle)
                    self.deployment.alerts.watch(entries)
                    report.schedules += len(fresh)
                    for part in devices.slices(entries):  # decide, then push
                        plan = plan_due(part, report.now, config.missed_jobs_window_s, memo)
                        if plan.failed:
                            self._set_aside(side, [Op("reject", name, why.encode(), expect=sha)
                                                   for name, sha, why in plan.failed],
                                            report, settle)
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
                    ahead.result()  # its reply read: the line's connection goes back to the pool
                pusher.wait()
            finally:  # after an error, no reply (the early read's, a push's) left pending
                pusher.line.break_off()  # on a pooled connection; at the usual end, none is

    def _entries(self, side: RedisSide, batch: Sequence[Due], config: Config,
                 own: Mapping[str, Schedule], report: Report,
                 settle: Callable[[], object] | None = None) -> list[Entry]:
        """The batch's schedules to plan; invalid definitions are set aside (one write,
        after `settle`)."""
        from kiqbeat.core.plan import Entry
        entries: list[Entry] = []
        aside: list[Op] = []
        now_ms = to_ms(report.now)
        for due in batch:
            name, definition = due.name, due.definition
            if definition is None:  # removed by a plain HDEL: forget the rest
                aside.append(Op("reject", name))
            elif isinstance(definition, Oversized):  # not read: set aside by its length
                why = f"schedule {shown(name)}: {definition.why()}"
                aside.append(Op("reject", name, why.encode(),
                                expect=f"big:{definition.size_bytes}"))
            elif due.garbled:  # its progress record is not one: never counted on
                why = (f"schedule {shown(name)}: its progress record (in "
                       f"{keys.progress_bucket(side.namespace, bucket(name))}) is garbled, "
                       "written by hand? Fix or HDEL that field (without it the schedule "
                       "starts afresh from its next tick), then `ZADD kiqbeat:due 0 NAME` or "
                       "write the definition again")
                aside.append(Op("reject", name, why.encode(), expect=definition_sha(definition)))
            else:
                parsed, sha = self._parse(name, definition, config, own, now_ms)
                if isinstance(parsed, str):
                    aside.append(Op("reject", name, parsed.encode(), expect=sha))
                else:
                    pause = None if due.pause is None else Pause.decode(due.pause)
                    entries.append(Entry(parsed, due.mark_ms, sha, pause))
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
               own: Mapping[str, Schedule], now_ms: int) -> Parsed:
        """The checked schedule of a stored definition, or why it is refused; and its SHA1."""
        document = self.sync.document
        if document is not None and document.definitions.get(name) == definition:
            # The document's own, checked (and with the Recurring Jobs tab's toggles).
            return own[name], definition_sha(definition)
        return self.devices.parse(name, definition, config.missed_jobs_window_s, now_ms)


def _earlier(a: int | None, b: int | None) -> int | None:
    """The earlier of two instants that may be unknown (None)."""
    return b if a is None else a if b is None else min(a, b)
