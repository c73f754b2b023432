"""Fixtures for security tests: throw-away certificates made with openssl, and a CLI runner."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.certs import Certs
from tests.support.cli import SCHEDULE
from tests.support.tools import tool


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=kiqbeat test {name}", cwd=cwd)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Certificates for a TLS redis-server on 127.0.0.1 (SAN IP only, no DNS name)."""
    tool("openssl", "it")
    d = tmp_path_factory.mktemp("certs")
    _make_ca("ca", d)
    _make_ca("wrong-ca", d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    # redis-server runs as root here, but keep the key readable for any user it may drop to.
    (d / "server.key").chmod(0o644)
    return Certs(d / "ca.pem", d / "server.pem", d / "server.key", d / "wrong-ca.pem")


@pytest.fixture
def schedule_file(tmp_path: Path) -> Path:
    """A schedule document with one every-minute schedule and a one-day window."""
    path = tmp_path / "schedule.yaml"
    path.write_text(SCHEDULE)
    return path


