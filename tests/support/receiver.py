"""A real HTTP receiver on loopback for the alert webhook tests: http.server in a thread,
keeping every request it took (headers and JSON body); it can answer an error or hang."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    """What the receiver took, and how it answers the next requests."""

    url: str = ""
    taken: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    status: int = 200
    hang_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies taken with a 2xx answer, in order."""
        with self.lock:
            return [json.loads(body) for _, body in self.taken]

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Poll until at least `count` bodies were taken (or the timeout passed)."""
        deadline = time.monotonic() + timeout_s
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.bodies


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver serving on a free loopback port until the block ends."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if state.hang_s:
                time.sleep(state.hang_s)
            status = state.status
            if 200 <= status < 300:
                with state.lock:
                    state.taken.append(({k.lower(): v for k, v in self.headers.items()},
                                        body))
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                # The sender gave up (a hanging webhook times out): nothing to answer, and no
                # traceback on stderr, where a later test's in-process CLI would read it.
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
