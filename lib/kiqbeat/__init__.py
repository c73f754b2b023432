"""kiqbeat: a leaderless cron for Sidekiq-compatible job queues."""

from kiqbeat.core.cron import fire_times
from kiqbeat.errors import ConfigError, KiqbeatError, RedisUnavailableError, StateError

# The package's version, as pyproject.toml gives it (tests/unit/test_fingerprint.py checks).
__version__ = "0.1.0"

__all__ = ["ConfigError", "KiqbeatError", "RedisUnavailableError", "StateError", "fire_times"]
