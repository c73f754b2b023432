"""The changed names (`keys.outcomes_changed`): the schedules a fold (a worker's own or an
invocation's of the inbox, redis/lua/fold.lua) marked for the alert decision to judge, each
with its sequence number there. Read on every invocation's first pipeline, so this module is
small: the outcome records themselves load only when there is something to judge."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from kiqbeat.core import limits
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text


@dataclass(frozen=True)
class Changed:
    """A name of the changed names and its sequence number there (the decision takes it away
    only while the number is still this one)."""

    name: str
    seq: str


def queue_changed_names(pipe: redis.client.Pipeline, namespace: str) -> None:
    """Queue the read of the oldest CHANGED_PER_INVOCATION changed names (parse with
    `changed_names`)."""
    pipe.zrange(keys.outcomes_changed(namespace), 0, limits.CHANGED_PER_INVOCATION - 1,
                withscores=True, score_cast_func=reply_text)


def changed_names(reply: object) -> list[Changed]:
    """The changed names of a `queue_changed_names` reply (none when it is no list)."""
    if not isinstance(reply, list):
        return []
    return [Changed(reply_text(name), reply_text(score)) for name, score in reply]


def read_changed_names(client: redis.Redis, namespace: str) -> list[Changed]:
    """The oldest CHANGED_PER_INVOCATION changed names (one round trip)."""
    pipe = client.pipeline(transaction=False)
    queue_changed_names(pipe, namespace)
    with redis_errors(client, f"reading {keys.outcomes_changed(namespace)}"):
        (reply,) = pipe.execute()
    return changed_names(reply)
