"""What became of a schedule's jobs: its outcome record (the last N ticks the worker reported
on) and the health read from it (issue 27; docs/store.md, "The worker protocol").

Pure: `decode_outcomes` reads the record redis/lua/fold.lua writes (specified in
docs/store.md "Encodings"; this is the one Python reader), `health` summarises it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiqbeat.core.instants import LAST_INSTANT, from_ms, to_ms
from kiqbeat.core.limits import MAX_HISTORY
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.varints import UNITS_MS, read_varint

# A recorded tick's state, as fold.lua numbers them.
OUTCOME_STATES = ("running", "succeeded", "failed", "expired")


@dataclass(frozen=True)
class TickOutcome:
    """What the worker reported for one tick's job: `state` one of OUTCOME_STATES; the
    attempt last reported (1: the first run); `duration_ms` once ended (None while
    running, and for an expired job, which never ran), `started_ms` while running (the
    instant it started); `manual`: a manual run."""

    tick_ms: int
    state: str
    attempt: int
    duration_ms: int | None
    started_ms: int | None
    manual: bool = False


@dataclass(frozen=True)
class Outcomes:
    """A schedule's outcome record: the ticks kept, newest first, the newest succeeded tick
    (None: none known) and the failed ticks since it that are older than every tick kept."""

    ticks: tuple[TickOutcome, ...]
    last_success_ms: int | None
    failures_beyond: int


@dataclass(frozen=True)
class Health:
    """One schedule's health from its outcome record (the seam with the alerts: seams-27)."""

    name: str
    last_outcome: str | None  # succeeded | failed | running | expired | None
    last_tick_ms: int | None
    last_success_tick_ms: int | None
    consecutive_failures: int  # failed ticks since the last success (a retry that succeeds resets)
    last_duration_ms: int | None
    last_error: str | None  # "Class: message" of the newest failure since the last success
    last_jid: str | None  # the newest tick's jid (a manual run's is not known here: None)

    def as_dict(self) -> dict[str, object]:
        """The JSON form (`status --json`, the API)."""
        def iso(ms: int | None) -> str | None:
            return None if ms is None else from_ms(ms).isoformat()

        return {"last_outcome": self.last_outcome, "last_tick": iso(self.last_tick_ms),
                "last_success": iso(self.last_success_tick_ms),
                "consecutive_failures": self.consecutive_failures,
                "last_duration_ms": self.last_duration_ms, "last_error": self.last_error,
                "last_jid": self.last_jid}


# The bounds outcomes.lua's decoder keeps (a stored value past them is not a record, issue 27):
# at most MAX_HISTORY ticks (core/limits.py), and no tick from this instant on.
LAST_TICK_MS = to_ms(LAST_INSTANT)  # 9999-01-01T00:00:00Z


def deadline_ms(score: object) -> int | None:
    """A success deadline's score (`keys.deadlines`) as epoch ms; None when none or unusable
    (not finite, before the epoch or from 9999 on, written by hand; issue 27)."""
    if score is None:
        return None
    try:
        value = float(score)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not 0 <= value < LAST_TICK_MS:  # NaN and the infinities fail this too
        return None
    return int(value)


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """A field: IndexError when cut short, longer than 7 bytes or above 2^48 (not a record)."""
    return read_varint(raw, pos, 7, 2**48)


def decode_outcomes(raw: bytes) -> Outcomes:
    """The record fold.lua wrote; ValueError when it is not one (with outcomes.lua's bounds: a
    varint of more than 7 bytes or above 2^48, more than 1000 ticks, a tick before the epoch
    or from 9999-01-01 on), so every tick it holds converts to a datetime."""
    try:
        newest = int.from_bytes(raw[:6], "big")
        if len(raw) < 9 or newest >= LAST_TICK_MS:
            raise IndexError
        success, pos = _varint(raw, 6)
        beyond, pos = _varint(raw, pos)
        count, pos = _varint(raw, pos)
        if count > MAX_HISTORY:
            raise IndexError
        ticks: list[TickOutcome] = []
        tick = newest
        for _ in range(count):
            head, pos = _varint(raw, pos)
            attempt, pos = _varint(raw, pos)
            value, pos = _varint(raw, pos)
            tick -= (head >> 5) * UNITS_MS[(head >> 3) & 3]
            if tick < 0 or tick + value >= LAST_TICK_MS:  # a start is an instant too
                raise IndexError
            state = OUTCOME_STATES[head & 3]
            running = state == "running"
            # An expired job never ran: no duration.
            ticks.append(TickOutcome(tick, state, attempt,
                                     None if running or state == "expired" else value,
                                     tick + value if running else None, bool(head & 4)))
    except IndexError:
        raise ValueError(f"not an outcome record: {raw[:40]!r}") from None
    last_success = None
    if success:
        span = success - 1
        last_success = newest - (span >> 2) * UNITS_MS[span & 3]
        if last_success < 0:
            raise ValueError(f"not an outcome record: {raw[:40]!r}")
    return Outcomes(tuple(ticks), last_success, beyond)


def health(name: str, outcomes: Outcomes | None, last_error: str | None = None) -> Health:
    """Schedule `name`'s health from its record (None: nothing reported yet) and the last
    error fold.lua keeps ("TICK_MS<TAB>Class: message")."""
    if outcomes is None or not outcomes.ticks:
        return Health(name, None, None, None, 0, None, None, None)
    newest = outcomes.ticks[0]
    since = outcomes.last_success_ms
    failures = outcomes.failures_beyond + sum(
        1 for t in outcomes.ticks
        if (since is None or t.tick_ms > since)
        and (t.state == "failed" or (t.state == "running" and t.attempt > 1)))
    duration = next((t.duration_ms for t in outcomes.ticks
                     if t.state in ("succeeded", "failed")), None)
    error = None
    if last_error:
        _, _, error = last_error.partition("\t")
    jid = None if newest.manual else jid_ms(name, newest.tick_ms)
    return Health(name, newest.state, newest.tick_ms, since, failures, duration, error or None,
                  jid)


def health_text(found: Health) -> str:
    """Health in a few words for `status` and `schedules get` ("" when nothing reported):
    the last outcome and its tick, the last success, the failure streak and last error."""
    if found.last_outcome is None or found.last_tick_ms is None:
        return ""
    tick = from_ms(found.last_tick_ms).isoformat(timespec="seconds")
    text = f"last {found.last_outcome} (tick {tick}"
    if found.last_duration_ms is not None:
        text += f", {found.last_duration_ms / 1000:.1f} s"
    text += ")"
    if found.consecutive_failures:
        text += f", {found.consecutive_failures} failed in a row"
        if found.last_error:
            text += f": {found.last_error}"
    if found.last_success_tick_ms is not None and found.last_outcome != "succeeded":
        text += (", last success "
                 f"{from_ms(found.last_success_tick_ms).isoformat(timespec='seconds')}")
    return text
