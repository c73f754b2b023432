"""docs/reliability.md from the harness's JSON lines: `python -m tests.faults.report IN OUT`.

Every line in the file is taken, whoever wrote it: the fault scenarios here (group
`faults`, `input`) and the Sentinel and network scenarios (any other group), which land
in their own marked section.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from tests.support.invariants import iter_lines

HEADER = ("| scenario | runs | ticks expected | pushed | of which backfilled | duplicates | "
          "missed | early | p99 invocation | notes |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def _row(line: dict[str, Any]) -> str:
    p99 = line.get("p99_s")
    extra = [f"{k.replace('_', ' ')} {line[k]}" for k in ("unexpected", "watermark_regressions",
                                                       "cross_shard", "still_recorded",
                                                       "manual")
             if line.get(k)]
    notes = "; ".join([*extra, str(line.get("notes", ""))]).replace("|", "\\|").strip("; ")
    # Lines from before backfills were counted have no `backfilled`: none were.
    return (f"| {line['scenario']} | {line['runs']:,} | {line['expected']:,} | "
            f"{line['pushed']:,} | {line.get('backfilled', 0):,} | {line['duplicates']} | "
            f"{line['missed']} | {line['early']} | "
            f"{'' if p99 is None else f'{p99 * 1000:.0f} ms'} | {notes} |")


def _table(lines: list[dict[str, Any]]) -> str:
    return "\n".join([HEADER, *(_row(line) for line in lines)]) if lines else "_No results._"


def _machine() -> str:
    try:
        redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                       text=True, check=False).stdout.split()[2]
    except (OSError, IndexError):
        redis_version = "unknown"
    return (f"{os.cpu_count()} CPUs ({platform.machine()}, {platform.system()} "
            f"{platform.release()}), Python {platform.python_version()}, "
            f"redis-server {redis_version.removeprefix('v=')}")


GUARANTEES = """\
## What the figures show, and where the guarantees end

- **Exactly once.** In every scenario above, each expected tick (schedule, instant) was
  in Redis exactly once: concurrent, retried, killed and slow invocations, lost and late
  replies, a Redis killed and restarted under load with `appendonly yes` and
  `appendfsync always`. The check reads every queue and the `schedule` set and compares
  the jobs' ids (derived from schedule and instant) with the cron maths, from each
  schedule's first-seen mark on.
- **Never early.** Jobs in a queue carry an `enqueued_at` no earlier than their tick;
  lookahead jobs sit in the `schedule` set scored at their exact tick. The clock is Redis
  `TIME`, so a host clock 10 minutes fast or slow changes nothing.
- **No pre-history, bounded state.** No job from before a schedule was first seen was
  found, the sampled watermarks never moved back, and kiqbeat's own keys stayed the
  store's, with at most one entry per schedule in each.
- **Shards.** With the store split into 3 shards, invocations of every shard racing at
  once, and a shard's invocations killed mid catch-up then completed by a later run of
  that shard, pushed each tick once and only their own shard's schedules: every job an
  invocation reported pushing belongs to its shard (CRC-32 of the name), a shard's runs
  left the other shards' queues, watermarks, first-seen marks and index unchanged, and
  every due-index entry sat in its name's shard.
- **Missed, then backfilled.** With the invokers stopped for longer than the missed-jobs
  window, the ticks passed over were recorded with the watermark that passed over them,
  and `kiqbeat backfill --all` pushed each of them once: run by racing processes while
  invokers went on, or SIGKILLed part-way and run again. Ticks pushed by invocations plus
  ticks backfilled (the "backfilled" column) were every tick since first-seen, each once,
  and nothing stayed recorded.
- **Nothing half-done.** Out of memory, a queue key of the wrong type and an ACL user
  lacking EVALSHA or the queue keys each failed the invocation with exit code 1 and a
  message naming the refusal; the watermarks and the jobs were unchanged, and the first run
  after the fix pushed each tick once. A garbled watermark cost only its schedule: set
  aside, named with its key, the others pushed, and each tick pushed once after the fix.

What Redis losing data can and cannot do:

- **AOF with `appendfsync always`**: an acknowledged write is on disk; a crash loses
  nothing kiqbeat wrote, so nothing is pushed twice or missed.
- **No persistence** (or a lost disk): the watermarks and the queued jobs vanish together.
  kiqbeat then sees its schedules as new and starts them at the next invocation, without
  backfilling: ticks between the crash and that invocation are not pushed. That is the
  bounded loss shown above; nothing is pushed twice within what Redis still holds.
- **Failover with asynchronous replication** (Sentinel, ElastiCache): the new master can
  lack the last writes of the old one, watermark and jobs together, since the script
  writes both in one step. kiqbeat then pushes those ticks again. That is a duplicate
  only if a worker had already taken the job from the old master before the failover.
  `wait_replicas` (waiting for replicas to acknowledge each push) narrows that window; it
  cannot close it, because Redis replication is asynchronous.
- **Eviction**: with a `maxmemory-policy` that evicts (`allkeys-*`), Redis may drop the
  watermarks and re-pushes follow; kiqbeat warns at startup. Use `noeviction`, as Sidekiq
  advises; then a full Redis refuses the push whole (above).
- **Bad input**: generated schedule documents in every supported shape are refused with a
  `ConfigError` naming the problem, never another exception, except the known case
  listed in the input table's notes if any (control characters, tracked as an
  expected failure until the library is fixed).
"""


def render(lines: list[dict[str, Any]], command: str) -> str:
    """The Markdown document for these result lines (the newest line per scenario wins)."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        latest[(line.get("group", "faults"), line["scenario"])] = line
    groups: dict[str, list[dict[str, Any]]] = {}
    for (group, _), line in latest.items():
        groups.setdefault(group, []).append(line)
    long = any(line.get("long") for line in latest.values())
    others = [g for g in groups if g not in ("faults", "input")]
    parts = [
        "# Reliability: measured",
        "",
        "<!-- Generated by scripts/reliability from the fault harness's JSON lines "
        "(tests/faults/report.py); do not edit by hand. -->",
        "",
        f"Produced by `{command}` on {datetime.now(UTC).date().isoformat()} "
        f"({'long form, KIQBEAT_LONG=1' if long else 'bounded form'}), on {_machine()}.",
        "Every scenario runs real `kiqbeat` processes against real `redis-server` processes "
        "(tests/faults). Timings are recorded, never asserted; the counts are asserted "
        "(duplicates, missed and early must be 0).",
        "",
        "## Faults",
        "",
        _table(groups.get("faults", [])),
        "",
        "## Bad input",
        "",
        _table(groups.get("input", [])),
        "",
        "## Sentinel and network",
        "",
        "<!-- BEGIN sentinel-network: lines recorded by tests/faults/test_sentinel.py and "
        "test_network.py (any group other than faults/input) land here. -->",
        "",
        "\n\n".join(f"### {g}\n\n{_table(groups[g])}" for g in others)
        or "_No Sentinel or network results in this run._",
        "",
        "<!-- END sentinel-network -->",
        "",
        GUARANTEES,
    ]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    """Read the JSON lines file argv[0], write the Markdown to argv[1]."""
    source, target = argv[0], argv[1]
    command = argv[2] if len(argv) > 2 else "scripts/reliability"
    with open(target, "w", encoding="utf-8") as out:
        out.write(render(list(iter_lines(source)), command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
