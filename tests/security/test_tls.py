"""TLS to Redis: `rediss://` verifies the server against the given CA, and refuses otherwise."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.server import RedisServer, free_port
from kiqbeat.engine import run
from kiqbeat.errors import RedisUnavailableError
from kiqbeat.redis.connection import connect
from tests.support.certs import Certs
from tests.support.cli import SCHEDULE, kiqbeat_cli
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config, pushed_jobs
from tests.support.marks import all_marks
from tests.support.servers import tls_missing


class TlsRedis:
    """A redis-server with a TLS port; its plain port is only for the test's own inspection."""

    def __init__(self, server: RedisServer, tls_port: int) -> None:
        self.server = server
        self.tls_port = tls_port

    def url(self, host: str = "127.0.0.1", ca: Path | None = None) -> str:
        """rediss:// URL of the TLS port, verified against `ca` when given."""
        query = f"?ssl_ca_certs={ca}" if ca else ""
        return f"rediss://{host}:{self.tls_port}/0{query}"


@pytest.fixture(scope="session")
def tls_server_build() -> None:
    """Skip, with the reason printed, where a server of the matrix (`scripts/test --server`)
    is built without TLS (the wheels'); Debian's, the default suite's, has it, so there a
    build without TLS fails instead of skipping."""
    if reason := tls_missing():
        if os.environ.get("KIQBEAT_TEST_SERVER", "redis7") == "redis7":
            pytest.fail(f"{reason}: the default suite needs Debian's (scripts/setup)")
        pytest.skip(reason)


@pytest.fixture
def tls_redis(certs: Certs, tls_server_build: None) -> Iterator[TlsRedis]:
    """A private redis-server serving TLS with the test CA's certificate (no client certs)."""
    tls_port = free_port()
    with RedisServer("--tls-port", str(tls_port), "--tls-cert-file", str(certs.server_cert),
                     "--tls-key-file", str(certs.server_key),
                     "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "no") as server:
        yield TlsRedis(server, tls_port)


def _inspect(tls: TlsRedis) -> redis.Redis:
    return redis.Redis.from_url(tls.server.url, decode_responses=True)


def test_verified_tls_connection_pushes_jobs(tls_redis: TlsRedis, certs: Certs) -> None:
    """With the right CA, kiqbeat talks TLS (verification on) and pushes every due tick."""
    cfg = config(SCHEDULE)
    with connect(tls_redis.url(ca=certs.ca)) as client:
        t0 = minute_floor(redis_now(client)) - timedelta(minutes=10)
        run(client, cfg, now=t0)
        report = run(client, cfg, now=t0 + timedelta(minutes=3))
        # rediss:// means an SSLConnection, asked explicitly for CERT_REQUIRED and host names.
        assert client.connection_pool.connection_class is redis.SSLConnection
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["ssl_cert_reqs"], kwargs["ssl_check_hostname"]) == ("required", True)
    assert report.pushed == 3
    with _inspect(tls_redis) as admin:
        assert {j["jid"] for j in pushed_jobs(admin)} == {j.jid for j in report.jobs}


def test_cli_run_once_over_tls(tls_redis: TlsRedis, certs: Certs, schedule_file: Path) -> None:
    """`kiqbeat run-once` with a rediss:// URL and ssl_ca_certs succeeds and reports."""
    done = kiqbeat_cli("run-once", "--config", str(schedule_file),
                       "--redis-url", tls_redis.url(ca=certs.ca))
    assert done.returncode == 0, done.stderr
    assert "1 schedule due" in done.stdout


@pytest.mark.parametrize("case", ["wrong CA", "system CAs only", "hostname not in the cert"])
def test_unverifiable_server_is_refused_and_nothing_is_pushed(
    tls_redis: TlsRedis, certs: Certs, case: str
) -> None:
    """A server whose certificate does not verify is refused with a clear error, before any push."""
    url = {"wrong CA": tls_redis.url(ca=certs.wrong_ca),
           "system CAs only": tls_redis.url(),
           "hostname not in the cert": tls_redis.url(host="localhost", ca=certs.ca)}[case]
    cfg = config(SCHEDULE)
    with _inspect(tls_redis) as admin:
        t0 = minute_floor(redis_now(admin)) - timedelta(minutes=10)
        with connect(tls_redis.server.url) as plain:  # first seen, so a later run would push
            run(plain, cfg, now=t0)
        before = all_marks(admin, "")
        with connect(url) as client, pytest.raises(RedisUnavailableError) as caught:
            run(client, cfg, now=t0 + timedelta(minutes=3))
        message = str(caught.value)
        print(f"{case}: {message}")
        assert "certificate verify failed" in message
        assert f":{tls_redis.tls_port}" in message
        assert pushed_jobs(admin) == []
        assert all_marks(admin, "") == before


def test_verification_turned_off_needs_the_insecure_setting_and_warns_every_time(
    tls_redis: TlsRedis, certs: Certs
) -> None:
    """`?ssl_cert_reqs=none` is refused unless KIQBEAT_REDIS_INSECURE_TLS says so, and
    then every invocation says the connection is not verified."""
    from kiqbeat.engine import Engine
    from kiqbeat.errors import ConfigError
    from kiqbeat.settings import Settings

    url = tls_redis.url(host="localhost", ca=certs.wrong_ca) + "&ssl_cert_reqs=none"
    with pytest.raises(ConfigError, match="turns TLS verification off"):
        Engine(Settings(redis_url=url)).run(config(SCHEDULE))
    engine = Engine(Settings(redis_url=url, redis_insecure_tls=True))
    reports = [engine.run(config(SCHEDULE)) for _ in range(2)]
    for report in reports:
        assert any("is not verified" in w for w in report.warnings), report.warnings
    engine.close()


def test_the_required_redis_py_checks_tls_host_names() -> None:
    """redis-py 5.x accepted a certificate for another host; the floor must be 6.0."""
    import re
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (floor,) = [re.search(r">=\s*([0-9]+)", d) for d in project["project"]["dependencies"]
                if d.startswith("redis")]
    assert floor is not None and int(floor.group(1)) >= 6
