"""A failover between an invocation's due read and its push, driven step by step on two real
redis-servers: the push never moves a watermark over ticks the new master does not hold.

The old master ran ahead of its replica (async replication: its last minutes never reached
it), then the replica was promoted. An invocation read what is due on the old master (its
watermarks far ahead) and its push reached the new master, whose watermarks are behind:
either on a new connection (Sentinel named the new master between the two), or as the same
call sent again after the old master closed the connection before its reply (Sentinel's
CLIENT KILL when it turns the old master into a replica). Applied there, the push moved the
new master's watermark over every tick between the two, which then were never pushed: the
fault suite's Sentinel test lost minutes 23-242 this way. The push must leave such a group
alone, and the next invocation push those ticks from the new master's own watermark.

Facts are read from the new master: distinct jids in its queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from kiqbeat import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.redis import scripts
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import Meddling, config, pushed_jobs

SCHEDULES = config("""
missed_jobs_window: 2d
schedules:
  a: {cron: "* * * * *", class: AWorker}
""")


class Sentinels:
    """What the Sentinels answer redis-py's SentinelConnectionPool: the master's address,
    which `fail_over` changes (the pool's connections then reach it on their next connect)."""

    def __init__(self, port: int) -> None:
        self.master = ("127.0.0.1", port)

    def discover_master(self, service_name: str) -> tuple[str, int]:
        return self.master

    def discover_slaves(self, service_name: str) -> list[tuple[str, int]]:
        return []

    def fail_over(self, pool: SentinelConnectionPool, port: int) -> None:
        """Name the new master, and drop the pool's idle connections, as the pool itself
        does once any of its connections meets the new master (`get_master_address`)."""
        self.master = ("127.0.0.1", port)
        pool.get_master_address()


@pytest.fixture
def replica() -> Iterator[RedisServer]:
    """A second redis-server: the replica that becomes the new master."""
    with RedisServer() as server:
        yield server


def _replicate(replica: redis.Redis, master: redis.Redis, master_port: int) -> None:
    """Make `replica` a copy of the master, then promote it (REPLICAOF NO ONE). The master
    starts the sync at once (a diskless sync waits 5 s for more replicas by default)."""
    master.config_set("repl-diskless-sync-delay", 0)
    replica.replicaof("127.0.0.1", master_port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = replica.info("replication")
        if info.get("master_link_status") == "up" and not info.get("master_sync_in_progress"):
            break
        time.sleep(0.02)
    else:
        pytest.fail("the replica never synced")
    replica.replicaof("NO", "ONE")


@pytest.mark.parametrize("how", ["due read on the old master, push on the new",
                                 "push sent again on the new master after a lost reply"])
def test_a_push_planned_on_the_old_master_never_jumps_the_new_masters_watermark(
    redis_server: RedisServer, replica: RedisServer, how: str,
) -> None:
    """Fails on a push step that applies a plan onto a watermark below the one it was
    planned from (it lost minutes 23-242 of 246)."""
    old, new = redis_server.port, replica.port
    with redis.Redis(port=old) as master, redis.Redis(port=new) as promoted:
        master.flushall()
        t0 = minute_floor(redis_now(master)) - timedelta(days=1)
        sentinels = Sentinels(old)
        pool = SentinelConnectionPool("kiqbeat", sentinels)
        client = redis.Redis(connection_pool=pool)
        engine = Engine(client=client)
        engine.run(SCHEDULES, now=t0)  # first seen at t0
        engine.run(SCHEDULES, now=t0 + timedelta(minutes=22))
        _replicate(promoted, master, old)  # the new master holds minutes 1-22
        engine.run(SCHEDULES, now=t0 + timedelta(minutes=242))  # only the old one: 23-242

        state: dict[str, Any] = {"switched": False, "sent again": 0}

        def switch(name: str) -> None:
            if name == "push" and not state["switched"]:
                state["switched"] = True
                sentinels.fail_over(pool, new)

        def sent_again(name: str) -> None:
            if name == "push" and state["switched"]:
                state["sent again"] += 1

        def reply_lost(*args: Any, **kwargs: Any) -> Any:
            raise redis.ConnectionError("Connection closed by server.")

        if how.startswith("due read"):  # Sentinel names the new master after the due read
            engine.deployment.lua = Meddling(before=switch)
        else:  # the push is sent to the old master, whose connection then fails
            def after(name: str, pending: scripts.Pending) -> None:
                if name == "push" and not state["switched"]:
                    switch(name)
                    # Its reply lost, as when Sentinel's CLIENT KILL closes the connection.
                    pending.line.conn.read_response = reply_lost

            engine.deployment.lua = Meddling(before=sent_again, after=after)
        left = engine.run(SCHEDULES, now=t0 + timedelta(minutes=245))
        assert state["switched"]
        if how.startswith("push sent again"):
            assert state["sent again"] >= 1  # the lost call reached the new master
        engine.deployment.lua = scripts.SCRIPTS
        engine.run(SCHEDULES, now=t0 + timedelta(minutes=246))  # on the new master
        client.close()

        until = t0 + timedelta(minutes=246)
        expected = sorted(jid("a", t) for t in fire_times("* * * * *", after=t0, until=until))
        found = sorted(job["jid"] for job in pushed_jobs(promoted))
        assert len(found) == len(set(found))  # each tick once
        missing = sorted(set(expected) - set(found))
        assert not missing, f"{len(missing)} of {len(expected)} ticks never pushed"
        assert set(found) == set(expected)
        assert left.stale == 1  # the plan from the old master left alone, and counted
