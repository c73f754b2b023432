"""kiqbeat: a leaderless cron for Sidekiq-compatible job queues."""

from kiqbeat.core.cron import fire_times
from kiqbeat.errors import ConfigError, KiqbeatError, RedisUnavailableError, StateError

__all__ = ["ConfigError", "KiqbeatError", "RedisUnavailableError", "StateError", "fire_times"]
