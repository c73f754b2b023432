"""A password in the Redis URL never reaches output: CLI, Lambda handler logs, errors, reprs.

Each case is a URL carrying the password that fails a different way: wrong password, dead
host, TLS to a plain port, dead Sentinels, a malformed port. The whole text kiqbeat shows
(stdout, stderr, the exception with its chained causes and traceback) is searched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiqbeat.demo.server import RedisServer, free_port
from kiqbeat.engine import run, status
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis.connection import connect
from tests.support.cli import SCHEDULE, kiqbeat_cli
from tests.support.engine import config

SECRET = "s3cret-Pa55"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def protected() -> Iterator[RedisServer]:
    """A redis-server whose default user needs a password other than SECRET."""
    import redis

    with RedisServer() as server:
        with redis.Redis(port=server.port) as admin:  # after start: the readiness PING is AUTH-less
            admin.config_set("requirepass", "the-right-one")
        yield server


def _urls(server: RedisServer) -> dict[str, str]:
    dead = free_port()
    return {
        "wrong password": f"redis://default:{SECRET}@127.0.0.1:{server.port}/0",
        "password only": f"redis://:{SECRET}@127.0.0.1:{server.port}/0",
        "dead host": f"redis://kiqbeat:{SECRET}@127.0.0.1:{dead}/0",
        "TLS to a plain port": f"rediss://kiqbeat:{SECRET}@127.0.0.1:{server.port}/0",
        "dead sentinels": f"redis+sentinel://kiqbeat:{SECRET}@127.0.0.1:{dead}/mymaster",
        "malformed port": f"redis://kiqbeat:{SECRET}@127.0.0.1:port/0",
        "? in the password": f"redis://kiqbeat:{SECRET}?x@127.0.0.1:{server.port}/0",
        "no scheme": f"kiqbeat:{SECRET}@127.0.0.1:{server.port}",
        "one slash": f"redis:/kiqbeat:{SECRET}@127.0.0.1:{server.port}",
        "no slash": f"redis:kiqbeat:{SECRET}@127.0.0.1:{server.port}",
        "@ and / in the password": f"redis://kiqbeat:{SECRET[:5]}@{SECRET[5:]}/x@127.0.0.1/0",
        "unix socket": f"unix://kiqbeat:{SECRET}@/nonexistent/kiqbeat.sock?db=0",
        "in the query": f"redis://127.0.0.1:{dead}/0?password={SECRET}",
        "& and = in a query password": f"redis://127.0.0.1:{dead}/0?password={SECRET[:5]}&"
                                       f"{SECRET[5:]}=1",
    }


CASES = ["wrong password", "password only", "dead host", "TLS to a plain port", "dead sentinels",
         "malformed port", "? in the password", "no scheme", "one slash", "no slash",
         "@ and / in the password", "unix socket", "in the query",
         "& and = in a query password"]


def _assert_no_secret(where: str, text: str) -> None:
    for part in (SECRET, SECRET[:5], SECRET[5:]):  # nor a piece split at an unencoded @
        assert part not in text, f"the password appears in {where}:\n{text}"


@pytest.mark.parametrize("case", CASES)
def test_errors_and_reprs_never_show_the_password(protected: RedisServer, case: str) -> None:
    """Library errors (message, repr, chained causes, traceback) and the client's repr."""
    url = _urls(protected)[case]
    cfg = config(SCHEDULE)
    # Short timeouts: the failure paths are the same, the test is quicker.
    with pytest.raises(KiqbeatError) as caught, _client(url) as client:
        _assert_no_secret("repr(client)", repr(client))
        try:
            run(client, cfg)
        finally:
            with pytest.raises(KiqbeatError) as in_status:
                status(client, cfg)
            _assert_no_secret("status error", "".join(
                traceback.format_exception(in_status.value)))
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    print(f"{case}: {caught.value}")
    _assert_no_secret("the error", shown)


class _Refused:
    """Stands in for a client when the URL itself is refused (the error is the test's)."""

    def __init__(self, error: KiqbeatError) -> None:
        self.error = error

    def __enter__(self) -> object:
        raise self.error

    def __exit__(self, *exc: object) -> None:
        return None


def _client(url: str) -> Any:
    try:
        return connect(url, timeout_s=0.5, retries=0)
    except KiqbeatError as exc:
        return _Refused(exc)


# The CLI uses the default 2 s timeouts and 2 retries: the TLS and Sentinel cases take
# 6-12 s per command there, and their messages are covered by the library test above.
@pytest.mark.parametrize("case", ["wrong password", "password only", "dead host",
                                  "malformed port", "? in the password", "no scheme",
                                  "one slash", "no slash", "@ and / in the password",
                                  "unix socket", "in the query"])
def test_cli_and_lambda_output_never_show_the_password(
    protected: RedisServer, case: str, schedule_file: Path
) -> None:
    """`run-once`, `status` and the Lambda handler (`kiqbeat invoke`) fail without the secret."""
    url = _urls(protected)[case]
    for command in ("run-once", "status"):
        done = kiqbeat_cli(command, "--config", str(schedule_file), "--redis-url", url)
        assert done.returncode == 1, done
        assert done.stderr.startswith("kiqbeat: "), done.stderr
        _assert_no_secret(f"{command} output", done.stdout + done.stderr)
    env = {"KIQBEAT_REDIS_URL": url, "KIQBEAT_CONFIG": str(schedule_file)}
    invoked = subprocess.run(
        [sys.executable, "-m", "kiqbeat", "invoke", "--event", "events/scheduled.json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")} | env)
    assert invoked.returncode != 0
    assert "kiqbeat invocation failed" in invoked.stderr, invoked.stderr
    _assert_no_secret("the Lambda handler's logs", invoked.stdout + invoked.stderr)


@pytest.mark.parametrize("case", ["wrong password", "dead host"])
def test_run_loop_output_never_shows_the_password(
    protected: RedisServer, case: str, schedule_file: Path
) -> None:
    """`kiqbeat run` reports a failed invocation and carries on, without the secret."""
    url = _urls(protected)[case]
    with subprocess.Popen([sys.executable, "-m", "kiqbeat", "run", "--config",
                           str(schedule_file), "--redis-url", url],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as loop:
        assert loop.stderr is not None
        failed = loop.stderr.readline()
        loop.send_signal(signal.SIGTERM)
        out, err = loop.communicate(timeout=30)
    assert "invocation failed" in failed, failed + err
    _assert_no_secret("`kiqbeat run` output", failed + out + err)
