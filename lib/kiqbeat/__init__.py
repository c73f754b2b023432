"""kiqbeat: a leaderless cron for Sidekiq-compatible job queues."""

from kiqbeat.deferred import defer_unused

defer_unused()  # first: redis' unused asyncio client loads only if used (kiqbeat/deferred.py)

# After defer_unused, which must run before anything imports redis:
from kiqbeat.core.cron import fire_times  # noqa: E402
from kiqbeat.errors import ConfigError, KiqbeatError, RedisUnavailableError, StateError  # noqa: E402

# The package's version, as pyproject.toml gives it (tests/unit/test_fingerprint.py checks).
__version__ = "0.1.0"

__all__ = ["ConfigError", "KiqbeatError", "RedisUnavailableError", "StateError", "fire_times"]
