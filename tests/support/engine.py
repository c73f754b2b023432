"""Helpers for tests of invocations: configs from YAML text, what Redis holds, expected ticks,
racing invokers, a script caller that meddles between a read and the script."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from kiqbeat import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import Entry, Plan, plan_due
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.imported import ImportOptions
from kiqbeat.document.read import read_file
from kiqbeat.engine import Document, run
from kiqbeat.redis import progress, pushes, scripts
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import definition_sha
from kiqbeat.redis.side import RedisSide


@dataclass(frozen=True)
class Meddling(scripts.Caller):
    """Runs kiqbeat's Lua as usual, after `before(script name)`, whether the call is run now
    or started (sent, its reply read later): a writer, a delay or a fault between a read
    and the script; and `after(script name, the started call)` once a started call is sent,
    before its reply is read (a fault while it is in flight)."""

    before: Callable[[str], None] = lambda name: None
    after: Callable[[str, scripts.Pending], None] = lambda name, pending: None

    def call(self, lua: scripts.Lua, client: redis.Redis, keys: Sequence[str],
             args: Sequence[scripts.Arg], **options: Any) -> Any:
        self.before(lua.name)
        return super().call(lua, client, keys, args, **options)

    def start(self, lua: scripts.Lua, client: redis.Redis, keys: Sequence[str],
              args: Sequence[scripts.Arg], **options: Any) -> scripts.Pending:
        self.before(lua.name)
        pending = super().start(lua, client, keys, args, **options)
        self.after(lua.name, pending)
        return pending


def load_config_file(path: str | Path, options: ImportOptions | None = None,
                     now: datetime | None = None) -> Config:
    """The validated Config of a schedule file (`options`: how to import another tool's;
    `now`: as `document.parse_config`), as a file source reads it."""
    return load_config_text(read_file(str(path)), source=str(path), options=options, now=now)


def config(text: str) -> Config:
    """A Config from a YAML document."""
    return load_config_text(text, source="test")


def pushed_jobs(client: redis.Redis, namespace: str = "") -> list[dict[str, Any]]:
    """Every job in every queue listed in the queues set, oldest first, plus the schedule set."""
    jobs: list[dict[str, Any]] = []
    for queue in sorted(client.smembers(f"{namespace}queues")):
        name = queue.decode() if isinstance(queue, bytes) else queue
        raws = client.lrange(f"{namespace}queue:{name}", 0, -1)
        jobs += [json.loads(raw) for raw in reversed(raws)]
    jobs += [json.loads(raw) for raw in client.zrange(f"{namespace}schedule", 0, -1)]
    return jobs


def marks(client: redis.Redis, cfg: Config) -> dict[str, int | None]:
    """Stored watermarks by schedule name."""
    names = [s.name for s in cfg.schedules]
    stored = progress.read_marks(client, cfg.namespace, names)
    return {name: m.mark_ms if isinstance(m := stored.get(name), progress.Mark) else None
            for name in names}


def store(client: redis.Redis, cfg: Config) -> dict[str, str]:
    """Apply the document to the store, as an invocation meeting it does; each schedule's
    definition SHA1 (what a plan made from the store carries)."""
    doc = Document.of(cfg)
    RedisSide(client, cfg.namespace).apply_document(doc.source, doc.definitions,
                                                    doc.digest, now_ms=None)
    return {name: definition_sha(d) for name, d in doc.definitions.items()}


def plan_stored(client: redis.Redis, cfg: Config, marks: dict[str, int | None],
                now: datetime) -> Plan:
    """What one invocation reading these marks at `now` would push (the document stored):
    the groups with something to do (one whose mark stays where it was only carries the
    schedule's next index entry)."""
    shas = store(client, cfg)
    entries = [Entry(s, marks.get(s.name), shas[s.name]) for s in cfg.schedules]
    plan = plan_due(entries, now, cfg.missed_jobs_window_s)
    plan.groups = [g for g in plan.groups if g.mark_ms != g.stored_ms]
    return plan


def push_plan(client: redis.Redis, plan: Plan, cfg: Config, report: Report,
              deadline: float) -> None:
    """Carry out `plan` as an invocation does (redis/pushes.py `Pusher`): a push call a
    chunk, the report filled in."""
    pusher = pushes.Pusher(client, "", cfg, report, deadline)
    for chunk in plan.chunks():
        if not pusher.send(chunk, plan.now_ms):
            break
    pusher.wait()


def race(redis_url: str, cfg: Config, instants: list[datetime], invokers: int = 4) -> None:
    """`invokers` threads, each with its own client, each running every instant in turn
    against the same Redis: racing copies of kiqbeat."""

    def invoker() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            for now in instants:
                run(client, cfg, now=now)
        finally:
            client.close()

    threads = [threading.Thread(target=invoker) for _ in range(invokers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def cron_jids(name: str, cron: str, after: datetime, until: datetime,
              tz: str = "UTC") -> list[str]:
    """The jids of `cron`'s ticks in (after, until], by the reference `fire_times`."""
    return [jid(name, t) for t in fire_times(cron, tz=tz, after=after, until=until)]


def push_call(client: redis.Redis, namespace: str, due_key: str, now_ms: int,
              chunk: Sequence[Any], history: int) -> tuple[list[int], str]:
    """One push.lua call (an atomic chunk of a plan) as `Pusher` sends it: its counts
    (pushed, already, missed, skipped, new, stale, recorded) and flags, one "1"/"0" per job
    in order."""
    script_keys, args = pushes._push_args(namespace, due_key, now_ms, chunk, history)
    with redis_errors(client, "pushing jobs"):
        reply = scripts.SCRIPTS.call(scripts.PUSH, client, script_keys, args)
    return [int(c) for c in reply[:7]], reply_text(reply[7])
