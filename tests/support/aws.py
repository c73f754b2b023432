"""AWS pieces without AWS: a moto server's handle, the LambdaContext the handler reads, and an
endpoint that never answers."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Moto:
    """A running moto_server: its endpoint, and a switch for IAM enforcement."""

    url: str

    def enforce_iam(self, on: bool) -> None:
        """Make moto check signatures and IAM policies on every request (or stop doing so)."""
        count = b"0" if on else b"inf"
        request = urllib.request.Request(f"{self.url}/moto-api/reset-auth", data=count,
                                         method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=5):
            pass

    def reset(self) -> None:
        """Forget every resource (parameters, secrets, buckets, users)."""
        request = urllib.request.Request(f"{self.url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5):
            pass


class Context:
    """The LambdaContext attributes Powertools and the handler read."""

    function_name = "kiqbeat-test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiqbeat-test"

    def __init__(self, timeout_ms: int = 30_000) -> None:
        self.aws_request_id = str(uuid.uuid4())
        # Lambda's clock: the invocation is killed when this reaches 0.
        self.ends_at = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return int((self.ends_at - time.monotonic()) * 1000)


@contextmanager
def hanging_endpoint() -> Iterator[str]:
    """An endpoint URL whose server accepts connections and never answers (a slow source)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)  # the kernel completes the handshakes; nobody reads or replies
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
