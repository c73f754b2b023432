"""AWS without AWS: a moto server (SSM, Secrets Manager, S3, IAM) and an AppConfig data stub.

moto serves AppConfig's control plane but not `appconfigdata` (StartConfigurationSession,
GetLatestConfiguration), which is what Powertools' AppConfigProvider calls; a small stub
speaking that REST protocol stands in for it, reached through AWS_ENDPOINT_URL_APPCONFIGDATA.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.aws import Moto
from tests.support.ports import free_port

REGION = "us-east-1"
DUMMY_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    """One moto_server process on a free loopback port for the session."""
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        found = shutil.which("moto_server")
        if found is None:
            pytest.fail("moto_server not found: install kiqbeat[dev] (scripts/setup)")
        exe = Path(found)
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield Moto(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class AppConfigData:
    """Hosted configurations served by the stub, keyed by (application, environment, profile)."""

    url: str
    documents: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    deny: bool = False


def _appconfig_handler(state: AppConfigData) -> type[BaseHTTPRequestHandler]:
    sessions: dict[str, tuple[str, str, str]] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, code: str, message: str) -> None:
            self._reply(status, json.dumps({"Message": message}).encode(),
                        {"Content-Type": "application/json", "x-amzn-ErrorType": code})

        def do_POST(self) -> None:  # StartConfigurationSession
            state.calls.append("StartConfigurationSession")
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if state.deny:
                self._error(403, "AccessDeniedException", "not authorized to perform "
                            "appconfig:StartConfigurationSession")
                return
            key = (body["ApplicationIdentifier"], body["EnvironmentIdentifier"],
                   body["ConfigurationProfileIdentifier"])
            if key not in state.documents:
                self._error(404, "ResourceNotFoundException", f"profile {key} not found")
                return
            token = uuid.uuid4().hex
            sessions[token] = key
            self._reply(201, json.dumps({"InitialConfigurationToken": token}).encode(),
                        {"Content-Type": "application/json"})

        def do_GET(self) -> None:  # GetLatestConfiguration
            state.calls.append("GetLatestConfiguration")
            token = parse_qs(urlsplit(self.path).query).get("configuration_token", [""])[0]
            if token not in sessions:
                self._error(400, "BadRequestException", "invalid or expired token")
                return
            key = sessions.pop(token)
            following = uuid.uuid4().hex
            sessions[following] = key
            self._reply(200, state.documents[key], {
                "Content-Type": "application/x-yaml",
                "Next-Poll-Configuration-Token": following,
                "Next-Poll-Interval-In-Seconds": "15",
                "Version-Label": "1"})

    return Handler


@pytest.fixture(scope="session")
def appconfig_server() -> Iterator[AppConfigData]:
    """The appconfigdata stub on a free loopback port."""
    state = AppConfigData(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _appconfig_handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def aws(
    moto_server: Moto, appconfig_server: AppConfigData, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Moto]:
    """Environment pointing boto3 at moto with dummy credentials; a clean moto and cache."""

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SSM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_APPCONFIGDATA", appconfig_server.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name, value in DUMMY_KEYS.items():
        monkeypatch.setenv(name, value)
    moto_server.enforce_iam(False)
    moto_server.reset()
    appconfig_server.documents.clear()
    appconfig_server.calls.clear()
    appconfig_server.deny = False
    # each test builds its own Sources, with its own caches
    yield moto_server
    moto_server.enforce_iam(False)
    # each test builds its own Sources, with its own caches
