"""The errors kiqbeat raises: one base class, and a ValueError subclass for bad input."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from difflib import get_close_matches


class KiqbeatError(Exception):
    """Base class of every error kiqbeat raises on purpose."""


class ConfigError(KiqbeatError, ValueError):
    """Bad configuration; carries every problem found, so a file is fixed in one pass."""

    def __init__(self, problems: list[str] | str, *, source: str = "") -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{where}{self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{where}{len(self.problems)} problems:\n{lines}"
        super().__init__(text)


class StateError(KiqbeatError):
    """kiqbeat's own Redis state (or a queue key it writes) holds something it cannot use."""


class RedisUnavailableError(KiqbeatError):
    """Redis could not be reached, or did not answer within the deadline."""


class DeadlineError(KiqbeatError):
    """The invocation ran out of time; what it pushed stays pushed, the next one does the rest."""


class RedisRefusedError(KiqbeatError):
    """Redis answered with an error: no permission, out of memory, a read-only replica."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A '; did you mean X?' hint for a misspelt word, or '' when nothing is close."""
    close = get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 50, 50


def shown(value: object, limit: int = 60) -> str:
    """A bounded `repr(value)` for messages: a message never carries a whole user value
    (a YAML alias can make a few bytes into a billion items)."""
    if isinstance(value, str):
        head = repr(value[:limit])
        if len(value) <= limit and len(head) <= limit + 2:
            return head
        return head[: limit + 1] + "..."
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<an integer of {value.bit_length()} bits>"
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
