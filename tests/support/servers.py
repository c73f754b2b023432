"""The redis-server under test (scripts/test --server NAME puts NAME's first on PATH): what
it is, what its build lacks, and how it words a permission refusal.

Tests assert kiqbeat's promises, not one server's wording: Redis says "this user has no
permissions to access one of the keys", Valkey "No permissions to access a key".
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.server import free_port, redis_server_path

# A server's refusal for want of an ACL permission, in Redis's and Valkey's words.
NO_PERMISSIONS = re.compile(r"\bno permissions?\b", re.IGNORECASE)


@dataclass(frozen=True)
class ServerUnderTest:
    """The binary the fixtures start, its `--version` line, and the matrix name chosen."""

    path: str
    version: str
    chosen: str | None  # KIQBEAT_TEST_SERVER, set by scripts/test --server

    def describe(self) -> str:
        """One line for pytest's header."""
        chosen = f" (scripts/test --server {self.chosen})" if self.chosen else ""
        return f"redis-server under test: {self.path}: {self.version}{chosen}"


def server_under_test() -> ServerUnderTest:
    """The redis-server the fixtures will start; an error when --server's is not first on
    PATH (its run would otherwise test another server and say nothing)."""
    path = redis_server_path()
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout.strip()
    chosen = os.environ.get("KIQBEAT_TEST_SERVER") or None
    if chosen and Path(path).parent.name != chosen:
        raise RuntimeError(f"KIQBEAT_TEST_SERVER={chosen}, but the redis-server on PATH is "
                           f"{path}: run through scripts/test --server {chosen}")
    return ServerUnderTest(path, version, chosen)


def tls_missing() -> str | None:
    """Why the redis-server under test cannot serve TLS (a build without it: the wheels'
    Redis 6.2 and 8.x, Valkey 9.x), or None when it can. Started with a TLS port and no
    certificate: a build with TLS stops at the missing certificate, one without at the port."""
    path = redis_server_path()
    with tempfile.TemporaryDirectory(prefix="kiqbeat-tls-probe-") as directory:
        try:
            done = subprocess.run([path, "--port", "0", "--tls-port", str(free_port()),
                                   "--save", "", "--appendonly", "no", "--dir", directory,
                                   "--daemonize", "no"],
                                  capture_output=True, text=True, timeout=10, check=False)
            out = done.stdout + done.stderr
        except subprocess.TimeoutExpired:  # it started: it has TLS (and no cert needed)
            return None
    if "Failed finding TLS support" in out or ("Bad directive" in out and "tls-port" in out):
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout.split(" sha=")[0]
        return f"{version} ({path}) is built without TLS"
    return None



def load_functions(client: redis.Redis, library: str) -> None:
    """Load kiqbeat's function library (`FUNCTION LOAD REPLACE`); skip, with the reason
    printed, on a server without functions (Redis before 7.0: the matrix's 6.2, which runs
    kiqbeat's scripts only). Any other refusal fails the test."""
    try:
        client.function_load(library, replace=True)
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        version = client.info("server").get("redis_version", "?")
        pytest.skip(f"Redis {version} has no FUNCTION command (functions are Redis 7.0's): "
                    "kiqbeat's scripts mode only")


def redis_version(client: redis.Redis) -> tuple[int, int]:
    """The server's `redis_version` (Valkey reports its compatibility level, 7.2)."""
    version = str(client.info("server")["redis_version"])
    major, minor = (int(p) for p in version.split(".")[:2])
    return major, minor


def skip_before_redis7(client: redis.Redis, what: str) -> None:
    """Skip, with the reason printed, on a server older than Redis 7.0 (the matrix's 6.2)
    for a promise that rests on 7.0 (`what`, docs/compatibility.md#redis-servers)."""
    if redis_version(client) < (7, 0):
        pytest.skip(f"Redis {'.'.join(map(str, redis_version(client)))}: {what}, "
                    "which Redis 7.0 brought")


def compact_hash_encoding(client: redis.Redis) -> bytes:
    """OBJECT ENCODING of a small hash: listpack, or ziplist before Redis 7.0."""
    return b"listpack" if redis_version(client) >= (7, 0) else b"ziplist"
