"""A real Sentinel group for fault tests: a master, a replica and three redis-sentinel processes.

Each piece is a private process on a free loopback port; configs live in a temporary
directory (Sentinel rewrites its file, so each is writable). `failover()` asks a Sentinel
to promote the replica; `kill_master()` SIGKILLs the master, waits for the Sentinels to
promote the replica, then restarts the old port, empty, as a replica of the new master.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from kiqbeat.demo.server import RedisServer, free_port, terminate

SERVICE = "mymaster"
# Above Sentinel's 1 s ping period. At 1000 ms a Sentinel flagged a master it had just
# switched to s_down 1.0 s after +switch-master, before that link's first PONG; its peers'
# down votes were still set from the failover just finished, so it reached o_down at once
# and failed over again, to the old master restarted empty a second earlier (its full sync
# still waiting): the group lost its data and the harness timed out waiting for the sync.
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 5000
# Every server may become a master. Redis 7.0 holds a replica's full sync 5 s by default
# (repl-diskless-sync-delay), which made each kill 5 s longer and left the restarted old
# master empty all that time.
SERVER_ARGS = ("--repl-diskless-sync-delay", "0")


def _wait(what: str, ready: object, timeout_s: float = 30.0) -> None:
    """Poll `ready()` until true; RuntimeError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def _nft(command: str) -> None:
    subprocess.run(["nft", *command.split()], check=True, capture_output=True, timeout=10)


def _info(port: int, section: str) -> dict[str, object]:
    with redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1) as client:
        return dict(client.info(section))


class SentinelGroup:
    """Master + replica + 3 sentinels on 127.0.0.1; stopped and removed on exit."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kiqbeat-sentinel-"))
        self.servers: dict[int, RedisServer] = {}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """kiqbeat's redis+sentinel:// URL for this group."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def master_port(self) -> int:
        """The master's port according to the first Sentinel that answers."""
        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=1, decode_responses=True) as s:
                    return int(s.sentinel_get_master_addr_by_name(SERVICE)[1])
            except redis.RedisError:
                continue
        raise RuntimeError("no Sentinel answered")

    def replica_port(self) -> int:
        """The port of the data server that is not the master."""
        return next(p for p in self.servers if p != self.master_port())

    def _replica(self, master: int, port: int | None = None) -> RedisServer:
        server = RedisServer(*SERVER_ARGS, "--replicaof", "127.0.0.1", str(master),
                             port=port).start()
        self.servers[server.port] = server
        _wait(f"replica {server.port} in sync with {master}",
              lambda: _info(server.port, "replication").get("master_link_status") == "up")
        return server

    def start(self) -> SentinelGroup:
        """Start everything and wait until each Sentinel knows the replica and the others."""
        master = RedisServer(*SERVER_ARGS).start()
        self.servers[master.port] = master
        self._replica(master.port)
        for k, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{k}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n")
            with open(self.dir / f"sentinel-{k}.log", "wb") as log:
                self.sentinels.append(subprocess.Popen(
                    [shutil.which("redis-sentinel") or "redis-sentinel", str(conf)],
                    stdout=log, stderr=subprocess.STDOUT))
        self.wait_settled()
        return self

    def wait_settled(self, timeout_s: float = 30.0) -> None:
        """Every Sentinel agrees on the master and sees one healthy replica and 2 peers."""
        def settled() -> bool:
            masters = set()
            for port in self.sentinel_ports:
                with redis.Redis(port=port, socket_timeout=1, decode_responses=True) as s:
                    state = s.sentinel_master(SERVICE)
                    replicas = s.sentinel_slaves(SERVICE)
                masters.add(int(state["port"]))
                healthy = [r for r in replicas if "s_down" not in r["flags"]
                           and r.get("master-link-status") == "ok"]
                down = {"s_down", "o_down", "failover_in_progress"} & set(state["flags"].split(","))
                if state["num-other-sentinels"] != 2 or len(healthy) != 1 or down:
                    return False
            master = masters.pop() if len(masters) == 1 else None
            return master is not None and _info(master, "replication")["role"] == "master"
        _wait("the Sentinel group to settle", settled, timeout_s)

    def failover(self) -> float:
        """SENTINEL FAILOVER; seconds until Sentinel names the new master."""
        old = self.master_port()
        started = time.monotonic()
        with redis.Redis(port=self.sentinel_ports[0], socket_timeout=2) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        _wait("a new master", lambda: self.master_port() != old)
        return time.monotonic() - started

    def kill_master(self, replica_lag_s: float = 0.0) -> float:
        """SIGKILL the master; seconds until Sentinel names the new master. Then re-add it.

        `replica_lag_s` > 0 first drops the replication stream (an nftables rule on the
        master's packets to the replica's connection), so the replica misses what the master
        accepts during that time, as on a broken or congested link; the rule goes once the
        replica is promoted, so nothing still in the dead master's socket reaches it. (CLIENT
        KILL of the replica or SIGSTOP are no substitutes: the replica resyncs within
        milliseconds, or finds the stream waiting in its socket buffer.)
        """
        old = self.master_port()
        server = self.servers.pop(old)
        table = f"kiqbeat_lag_{old}"
        if replica_lag_s:
            with redis.Redis(port=old, socket_timeout=1, decode_responses=True) as master:
                link = master.client_list(_type="replica")[0]["addr"].rpartition(":")[2]
            _nft(f"add table inet {table}")
            _nft(f"add chain inet {table} out {{ type filter hook output priority 0 ; }}")
            _nft(f"add rule inet {table} out tcp sport {old} tcp dport {link} drop")
            time.sleep(replica_lag_s)
        try:
            started = time.monotonic()
            server.kill()
            server.stop()
            _wait("a new master", lambda: self.master_port() != old)
            elapsed = time.monotonic() - started
        finally:
            if replica_lag_s:
                _nft(f"delete table inet {table}")
        # Back empty (no persistence), and as a replica from its first breath, so it can
        # never answer as a master with no data.
        self._replica(self.master_port(), port=old)
        return elapsed

    def stop(self) -> None:
        """Stop sentinels and servers; remove the directory."""
        for process in self.sentinels:
            terminate(process)
        for server in self.servers.values():
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SentinelGroup:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
