"""The errors kiqbeat raises: one base class, and a ValueError subclass for bad input."""

from __future__ import annotations


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
