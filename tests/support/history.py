"""Histories for tests, written as the scripts write them (docs/store.md "Encodings": the
scripts are kiqbeat's only writers of a history; `redis/progress.py` reads them)."""

from __future__ import annotations

from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.records import KINDS, Push
from kiqbeat.core.varints import UNITS_MS, varint, zigzag

# (KIND letter, TICK ms, DELAY ms, JID) oldest first; JID only a manual run's ("m").
Entries = list[tuple[str, int, int, str]]


def history_bytes(oldest_first: Entries) -> bytes:
    """The history part of a progress record holding these entries (b"" when none): NEWEST
    (the last push's tick), COUNT, the entries oldest first."""
    if not oldest_first:
        return b""
    out, previous = bytearray(), oldest_first[0][1]
    for kind, tick, delay, jid in oldest_first:
        d = tick - previous
        unit = next(u for u in (3, 2, 1, 0) if d % UNITS_MS[u] == 0)
        out += varint(zigzag(d // UNITS_MS[unit]) * 16 + unit * 4 + "tbms".index(kind))
        out += varint(zigzag(delay))
        if kind == "m":
            raw = jid.encode()
            out += varint(len(raw)) + raw
        previous = tick
    return previous.to_bytes(6, "big") + varint(len(oldest_first)) + bytes(out)


def pushes_of(name: str, oldest_first: Entries) -> list[Push]:
    """Schedule `name`'s pushes these entries are, newest first, as the reader gives them
    (a tick's or backfill's jid derived from the tick)."""
    return [Push(KINDS[kind], from_ms(tick), jid if kind == "m" else jid_ms(name, tick),
                 from_ms(tick + delay)) for kind, tick, delay, jid in reversed(oldest_first)]


def entries_of(pushes: list[Push]) -> Entries:
    """`pushes` (newest first) as entries, oldest first."""
    letters = {kind: letter for letter, kind in KINDS.items()}
    return [(letters[p.kind], to_ms(p.tick), to_ms(p.when) - to_ms(p.tick),
             p.jid if p.kind == "manual" else "") for p in reversed(pushes)]


def history_text(history: list[Push] | bytes) -> str:
    """Pushes as the layout before the progress buckets wrote them ("KIND TICK DELAY [JID]"
    lines, newest first: what lua/migrate.lua reads); a garbled record (bytes) as its repr."""
    if isinstance(history, bytes):
        return repr(history)
    return "\n".join(f"{k} {t} {d}" + (f" {j}" if k == "m" else "")
                     for k, t, d, j in reversed(entries_of(history)))
