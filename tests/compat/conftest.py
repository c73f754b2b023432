"""Real consumers of kiqbeat's jobs: a Sidekiq process and Sidekiq::Web, one of each per session.

Both run against a private redis-server of their own (not the shared, per-test flushed
one), so a running Sidekiq never loses its queues under it. Each test that uses Sidekiq
starts with no kiqbeat state in that Redis (a schedule another test stored, or another
document's, would otherwise tick in its invocations whenever the clock crossed a minute);
every job is found again by its jid. Processes are stopped with SIGTERM at the end of the
session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.server import RedisServer, free_port
from tests.support.sidekiq import start_sidekiq
from tests.support.tools import missing

from .harness import (
    RUBY_DIR,
    START_TIMEOUT_S,
    WORKER_QUEUES,
    Sidekiq,
    WebUI,
    need,
    stop,
    wait_for,
)


@pytest.fixture(scope="session")
def sidekiq_redis() -> Iterator[RedisServer]:
    """A redis-server for the Ruby processes, alive for the whole session."""
    with RedisServer() as server:
        yield server


@pytest.fixture(autouse=True)
def no_kiqbeat_state(request: pytest.FixtureRequest) -> None:
    """Before a test that uses Sidekiq's Redis: every kiqbeat key there deleted."""
    if "sidekiq" not in request.fixturenames:
        return
    server: RedisServer = request.getfixturevalue("sidekiq_redis")
    client = redis.Redis.from_url(server.url)
    try:
        for key in client.scan_iter(match="kiqbeat:*", count=1000):
            client.delete(key)
    finally:
        client.close()


@pytest.fixture(scope="session")
def sidekiq(sidekiq_redis: RedisServer) -> Iterator[Sidekiq]:
    """One real Sidekiq process (Debian's ruby-sidekiq) running tests/compat/ruby/worker.rb."""
    logdir = Path(tempfile.mkdtemp(prefix="kiqbeat-sidekiq-"))
    log = logdir / "sidekiq.log"
    args = ["-c", "2"]
    for queue in WORKER_QUEUES:
        args += ["-q", queue]
    process = start_sidekiq(sidekiq_redis.url, RUBY_DIR / "worker.rb", log, *args)
    client = redis.Redis.from_url(sidekiq_redis.url, socket_timeout=5)
    try:
        yield Sidekiq(sidekiq_redis.url, client, log)
    finally:
        stop(process)
        client.close()
        shutil.rmtree(logdir, ignore_errors=True)


@pytest.fixture(scope="session")
def web_ui(sidekiq_redis: RedisServer) -> Iterator[WebUI]:
    """Sidekiq's web UI (tests/compat/ruby/config.ru) on Debian's puma, for the session."""
    program = need("puma")
    port = free_port()
    logdir = Path(tempfile.mkdtemp(prefix="kiqbeat-web-"))
    log = logdir / "puma.log"
    env = {**os.environ, "REDIS_URL": sidekiq_redis.url, "RACK_ENV": "production"}
    args = [program, "-b", f"tcp://127.0.0.1:{port}", "-t", "1:2", "-w", "0",
            str(RUBY_DIR / "config.ru")]
    with open(log, "wb") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=RUBY_DIR)
    web = WebUI(f"http://127.0.0.1:{port}")
    try:
        def serving() -> bool:
            if process.poll() is not None:
                pytest.fail(f"puma exited with {process.returncode}: "
                            f"{log.read_text(errors='replace')[-3000:]}")
            try:
                web.get("/queues")
            except OSError:
                return False
            return True
        wait_for(f"Sidekiq::Web to serve (log: {log})", serving, START_TIMEOUT_S)
        yield web
    finally:
        stop(process)
        shutil.rmtree(logdir, ignore_errors=True)


@pytest.fixture(scope="session")
def active_job_version() -> str:
    """Debian's ActiveJob version as the worker loads it; skips when ruby-activejob is absent."""
    done = subprocess.run(["ruby", "-e", 'require "active_job"; print ActiveJob::VERSION::STRING'],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        missing("ruby-activejob is not installed (scripts/setup installs it)")
    return done.stdout.strip()
