"""kiqbeat's wire format, the Python side: the one encoder of the requests the push, backfill
and run-now scripts take (lua/frames.lua is the one Lua reader; each script's header names
its fields).

The format (REQUEST, GROUP, RANGE, PIECE, JOB: binary, big-endian, read with Lua's
`struct.unpack`) is specified once, in docs/store.md "Encodings", which also says how a
field is added (both sides at once, the request's field count up by one).

Pure: bytes in, bytes out; `redis.pushes` sends them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kiqbeat.core.plan import Group
from kiqbeat.redis.connection import name_bytes

# Fields of one record, in order, as each script reads them (the request's first field).
PUSH_GROUP_FIELDS = ("name", "sha", "mark", "next", "stored", "missed", "skipped", "queue",
                     "limit", "overlap", "ranges", "jobs")
BACKFILL_PIECE_FIELDS = ("name", "sha", "after", "through", "queue", "limit", "overlap",
                         "jobs")


# The struct formats of frames.lua and the scripts' headers (after each name's bytes).
_COUNT = struct.Struct(">H")
_NAME = struct.Struct(">H")
_GROUP = struct.Struct(">40sdddddHdBI")  # SHA ... R: frames.lua's GROUP_FORMAT after NAME
_RANGE = struct.Struct(">ddB")  # AFTER THROUGH, the reason's length (then it, then COUNT)
_DOUBLE = struct.Struct(">d")
_N = struct.Struct(">I")
_JOB = struct.Struct(">ddI")  # frames.lua JOB_FORMAT: TICK RELEASE LENGTH, then the JSON
# A group without missed ranges and with one job, as most are, packed in one go: GROUP with
# R = 0, then N = 1 and the job's frame (the same bytes as the parts one by one).
_GROUP_ONE_JOB = struct.Struct(">40sdddddHdBIIddI")
_PIECE = struct.Struct(">40sddHdBI")  # frames.lua's PIECE_FORMAT after NAME
_NO_SHA = b"0" * 40


def _sha(sha: str | None) -> bytes:
    raw = (sha or "").encode()
    return raw if len(raw) == 40 else _NO_SHA


def _stored(group: Group) -> int:
    """push.lua's STORED: the mark the group was planned from, -1 when it had none."""
    return -1 if group.stored_ms is None else group.stored_ms


def _jobs(ticks: Sequence[int], releases: Sequence[int], payloads: Sequence[bytes]
          ) -> list[bytes]:
    """Job frames: TICK RELEASE LENGTH JOB each."""
    pack = _JOB.pack
    return [pack(tick, release, len(job)) + job
            for tick, release, job in zip(ticks, releases, payloads, strict=True)]


def push_request(groups: Sequence[Group]) -> tuple[bytes, list[str]]:
    """push.lua's packed groups (its header names the fields), and the call's distinct
    queues, numbered from 1 in order of first use (the script's queue keys and names follow
    that order)."""
    queues: dict[str, int] = {}
    number = queues.setdefault  # a queue's number, given one when first met
    parts = [_COUNT.pack(len(PUSH_GROUP_FIELDS))]
    append = parts.append
    pack_name, pack_group, pack_n = _NAME.pack, _GROUP.pack, _N.pack
    pack_one = _GROUP_ONE_JOB.pack
    for g in groups:
        name = name_bytes(g.name)
        append(pack_name(len(name)))
        append(name)
        if not g.ranges and len(g.ticks) == 1:
            job = g.payloads[0]
            append(pack_one(_sha(g.sha), g.mark_ms, g.next_due_ms, _stored(g), g.missed, g.skipped,
                            number(g.queue, len(queues) + 1), g.max_runs, g.overlap, 0, 1,
                            g.ticks[0], g.releases[0], len(job)))
            append(job)
            continue
        append(pack_group(
            _sha(g.sha), g.mark_ms, g.next_due_ms, _stored(g), g.missed, g.skipped,
            number(g.queue, len(queues) + 1), g.max_runs, g.overlap, len(g.ranges)))
        for after, through, reason, count in g.ranges:
            text = reason.encode()
            parts.append(_RANGE.pack(after, through, len(text)) + text + _DOUBLE.pack(count))
        parts.append(pack_n(len(g.ticks)))
        parts += _jobs(g.ticks, g.releases, g.payloads)
    return b"".join(parts), list(queues)


@dataclass
class Piece:
    """Part of one schedule's record that one backfill call settles: (after_ms, through_ms]
    is taken out of the record, and the jobs (tick_ms, JSON) pushed into `queue` if still
    recorded."""

    name: str
    after_ms: int
    through_ms: int
    queue: str
    sha: str
    jobs: list[tuple[int, str]]
    max_runs: int = 0  # the schedule's `max_runs` (0: none): backfilled ticks count as runs
    overlap_skip: bool = False  # `overlap: skip`: one job at a time (backfill.lua)


def backfill_request(pieces: Sequence[Piece]) -> tuple[bytes, list[str]]:
    """backfill.lua's packed pieces (its header names the fields), and the call's queues
    (numbered as `push_request` numbers them)."""
    queues: dict[str, int] = {}
    parts = [_COUNT.pack(len(BACKFILL_PIECE_FIELDS))]
    for piece in pieces:
        name = name_bytes(piece.name)
        parts.append(_NAME.pack(len(name)) + name + _PIECE.pack(
            _sha(piece.sha), piece.after_ms, piece.through_ms,
            queues.setdefault(piece.queue, len(queues) + 1),
            piece.max_runs, int(piece.overlap_skip), len(piece.jobs)))
        parts += _jobs([tick for tick, _ in piece.jobs], [0] * len(piece.jobs),
                       [name_bytes(job) for _, job in piece.jobs])
    return b"".join(parts), list(queues)


def manual_run(name: str, sha: str, history: int, queue: str, jid: str, at_ms: int,
               job: str) -> list[bytes | int | str]:
    """trigger.lua's ARGV (its header names them): one job into `queue` now."""
    return [name_bytes(name), sha, history, name_bytes(queue), jid, at_ms, name_bytes(job)]
