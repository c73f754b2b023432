"""`kiqbeat web` as a command: it serves the console on loopback without tokens, and with a
token file on any address; it never prints a token."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.ports import free_port

TOKEN = "cli-Hq8Zr2Lw5Nc9Vx3Tb7Kp1Md4"  # random-looking: weak tokens are refused


def started(port: int, headers: dict[str, str] | None = None) -> bytes:
    deadline = time.monotonic() + 30
    while True:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/status",
                                         headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                body: bytes = answer.read()
                return body
        except urllib.error.HTTPError:
            raise
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail("kiqbeat web did not start")
            time.sleep(0.2)


@pytest.mark.parametrize("with_token", [False, True])
def test_kiqbeat_web_serves_the_console_and_prints_no_token(
    redis_url: str, tmp_path: Path, with_token: bool
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env["KIQBEAT_REDIS_URL"] = redis_url
    args = [sys.executable, "-m", "kiqbeat", "web", "--port", str(port)]
    headers = {}
    if with_token:
        tokens = tmp_path / "operators"
        tokens.write_text(f"alice:{TOKEN}\n")
        env["KIQBEAT_WEB_TOKEN_FILE"] = str(tokens)
        args += ["--host", "0.0.0.0"]
        headers = {"Authorization": f"Bearer {TOKEN}"}
    log = tmp_path / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        body = started(port, headers)
        assert b'"schedules": 0' in body.replace(b'"schedules":0', b'"schedules": 0')
        if with_token:
            with pytest.raises(urllib.error.HTTPError) as refused:
                started(port)
            assert refused.value.code == 401
            refused.value.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    printed = log.read_text()
    assert "console on http://" in printed and TOKEN not in printed
