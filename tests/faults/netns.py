"""A redis-server inside a private network namespace, reached over a veth pair, with
nftables rules inside the namespace for partitions and packet loss (no tc netem here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from kiqbeat.demo.server import redis_server_path, terminate, wait_for_pong

PORT = 6390


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=10)


class IsolatedRedis:
    """redis-server on 10.213.N.2 inside namespace `kqbN`; the host side is 10.213.N.1."""

    def __init__(self) -> None:
        self.ns = self.host_if = self.ns_if = self.address = ""  # `start` claims an N
        self.dir = Path(tempfile.mkdtemp(prefix="kiqbeat-netns-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL of the isolated server, seen from the host."""
        return f"redis://{self.address}:{PORT}/0"

    def _in_ns(self, *args: str) -> None:
        _sh("ip", "netns", "exec", self.ns, *args)

    def start(self) -> IsolatedRedis:
        """Create the namespace and link, start redis-server, wait until it answers."""
        self._claim()
        base = self.address.rpartition(".")[0]
        _sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _sh("ip", "link", "set", self.ns_if, "netns", self.ns)
        _sh("ip", "addr", "add", f"{base}.1/30", "dev", self.host_if)
        _sh("ip", "link", "set", self.host_if, "up")
        self._in_ns("ip", "addr", "add", f"{self.address}/30", "dev", self.ns_if)
        self._in_ns("ip", "link", "set", self.ns_if, "up")
        self._in_ns("ip", "link", "set", "lo", "up")
        with open(self.dir / "redis.log", "wb") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, redis_server_path(), "--port", str(PORT),
                 "--bind", self.address, "--save", "", "--appendonly", "no",
                 "--dir", str(self.dir), "--protected-mode", "no"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_for_pong((self.address, PORT), self.process, self.dir / "redis.log", 10)
        return self

    def _claim(self) -> None:
        """Create namespace `kqbN` for the first free N from this process's: the suite's
        workers (pytest-xdist) each run these tests, so another's may exist right now."""
        for step in range(250):
            n = (os.getpid() + step) % 250 + 1
            if subprocess.run(["ip", "netns", "add", f"kqb{n}"], capture_output=True,
                              timeout=10, check=False).returncode == 0:
                self.ns, self.host_if, self.ns_if = f"kqb{n}", f"kqbh{n}", f"kqbn{n}"
                self.address = f"10.213.{n}.2"
                return
        raise RuntimeError("no free network namespace kqb1..kqb250 (ip netns list)")

    def _rule(self, expression: str) -> None:
        self._in_ns("nft", "add", "table", "inet", "fault")
        self._in_ns("nft", "add", "chain", "inet", "fault", "in",
                    "{ type filter hook input priority 0 ; }")
        self._in_ns("nft", "add", "rule", "inet", "fault", "in", *expression.split())

    def partition(self) -> None:
        """Drop every packet to Redis: a black hole, as a lost route or security group would."""
        self._rule(f"tcp dport {PORT} drop")

    def lose(self, one_in: int) -> None:
        """Drop one packet in `one_in` to Redis, at random."""
        self._rule(f"tcp dport {PORT} numgen random mod {one_in} 0 drop")

    def heal(self) -> None:
        """Remove every fault rule."""
        subprocess.run(["ip", "netns", "exec", self.ns, "nft", "delete", "table", "inet",
                        "fault"], capture_output=True, timeout=10, check=False)

    def stop(self) -> None:
        """Stop Redis, delete the namespace (its rules go with it) and the host link."""
        terminate(self.process)
        if not self.ns:  # none claimed: nothing of ours to delete
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        for args in (("ip", "link", "del", self.host_if), ("ip", "netns", "del", self.ns)):
            subprocess.run(args, capture_output=True, timeout=10, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> IsolatedRedis:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
