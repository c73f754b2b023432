"""Throw-away TLS certificates (tests/security/conftest.py makes them with openssl)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    """A CA, a server certificate it signed for IP 127.0.0.1, and an unrelated CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    wrong_ca: Path
