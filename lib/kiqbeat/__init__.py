"""kiqbeat: a leaderless cron for Sidekiq-compatible job queues."""

from kiqbeat.deferred import defer_unused

defer_unused()  # first: redis' unused asyncio client loads only if used (kiqbeat/deferred.py)

# After defer_unused, which must run before anything imports redis:
from kiqbeat.errors import ConfigError, KiqbeatError, RedisUnavailableError, StateError  # noqa: E402

# The package's version, as pyproject.toml gives it (tests/unit/test_fingerprint.py checks).
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`kiqbeat.fire_times`, loaded at its first use: a process that runs an invocation with
    nothing due loads no cron core (tests/entrypoints/test_cold_start.py)."""
    if name == "fire_times":
        from kiqbeat.core.cron import fire_times

        return fire_times
    raise AttributeError(f"module 'kiqbeat' has no attribute {name!r}")


__all__ = ["ConfigError", "KiqbeatError", "RedisUnavailableError", "StateError", "fire_times"]
