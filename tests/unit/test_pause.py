"""The pause rule (core/pause.py), pure: planning across a pause's end, record round trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kiqbeat.core.cron import Every
from kiqbeat.core.pause import Pause, pause_of, planned
from kiqbeat.core.plan import Entry, plan_due, to_ms
from kiqbeat.core.schedule import Schedule

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MINUTELY = Schedule("m", Every(60), "W")


def pushed_over(steps: list[int], until_min: int | None) -> list[int]:
    """The minutes pushed by invocations at `steps` (minutes after T0, ascending), the
    schedule registered at T0 and paused through `until_min` (None: not paused)."""
    pause = None if until_min is None else Pause(until_ms=to_ms(T0 + timedelta(
        minutes=until_min, seconds=30)))
    mark: int | None = to_ms(T0)
    pushed: list[int] = []
    for step in steps:
        now = T0 + timedelta(minutes=step, seconds=5)
        plan = plan_due([Entry(MINUTELY, mark, "", pause)], now, 3600.0)
        for group in plan.groups:
            pushed += [int((job.tick_ms - to_ms(T0)) / 60_000) for job in group.jobs]
            assert not group.ranges, "a paused span was recorded as missed"
            mark = max(mark or 0, group.mark_ms)
    return pushed


@given(st.lists(st.integers(1, 50), min_size=1, max_size=12, unique=True).map(sorted),
       st.integers(0, 40))
def test_a_pause_pushes_only_ticks_after_its_end_each_once(steps: list[int], until: int
                                                           ) -> None:
    pushed = pushed_over(steps, until)
    assert len(pushed) == len(set(pushed))
    assert all(minute > until for minute in pushed)
    # Every tick after the end up to the last invocation (all within the window) is pushed.
    assert set(pushed) == set(range(until + 1, steps[-1] + 1))


def test_a_pause_without_an_end_holds_whatever_the_instant() -> None:
    schedule, mark = planned(MINUTELY, 5, Pause(note="n"), 2**47)
    assert not schedule.enabled and mark == 5


def test_a_pause_past_its_end_moves_the_mark_to_its_end_only() -> None:
    pause = Pause(until_ms=100)
    assert planned(MINUTELY, 50, pause, 200) == (MINUTELY, 100)
    assert planned(MINUTELY, 150, pause, 200) == (MINUTELY, 150)
    assert planned(MINUTELY, None, pause, 200) == (MINUTELY, None)


@given(st.text(max_size=50), st.text(max_size=20), st.integers(0, 2**40),
       st.one_of(st.none(), st.integers(1, 2**40)))
def test_a_pause_record_reads_back_as_written(note: str, by: str, at: int, later: int | None
                                              ) -> None:
    pause = Pause(note, by, at, None if later is None else at + later)
    assert Pause.decode(pause.encode()) == pause


def test_an_unreadable_record_is_a_pause_without_an_end_saying_so() -> None:
    for data in (b"{not json", b"[1]", b"\xff"):
        pause = Pause.decode(data)
        assert pause.until_ms is None and pause.holds_at(2**47)
        assert "unreadable pause record" in pause.note


def test_pause_of_needs_an_end_after_the_clock_and_with_an_offset() -> None:
    now_ms = to_ms(T0)
    for until, words in ((T0, "not in the future"),
                         (T0.replace(tzinfo=None) + timedelta(hours=1), "no UTC offset")):
        try:
            pause_of("", "me", now_ms, until)
        except ValueError as exc:
            assert words in str(exc)
        else:
            raise AssertionError(f"{until} was accepted")
    assert pause_of("n", "me", now_ms, T0 + timedelta(hours=1)).until_ms == now_ms + 3_600_000


def test_the_lambda_event_and_the_command_line_read_a_pause_alike() -> None:
    from kiqbeat.entrypoints.requests import from_event

    request = from_event({"kiqbeat": "pause", "name": "x", "note": "why",
                          "until": "2026-03-01T10:00:00+01:00"})
    assert request.note == "why" and request.until == datetime(2026, 3, 1, 9, tzinfo=UTC)
    try:
        from_event({"kiqbeat": "pause", "name": "x", "until": "2026-03-01T10:00:00"})
    except ValueError as exc:
        assert "no UTC offset" in str(exc)
    else:
        raise AssertionError("an until without an offset was accepted")
