"""How `kiqbeat web` runs uvicorn (`server_config`): the console's limits on connections.

uvicorn bounds what it buffers of a request's head (`h11_max_incomplete_event_size`) and an
idle keep-alive connection (`timeout_keep_alive`), and answers 503 above
`limit_concurrency`; it has no deadline for reading a request, so a client sending a byte a
second would hold its connection for ever (2,000 such were all held). `GuardedH11Protocol`
adds one: a request — its head and its body — must arrive whole within `READ_TIMEOUT_S` of
its first byte (of the connection's opening, for the first request); otherwise the
connection is closed (the app, if it was reading the body, sees the client gone and answers
408 to no one). More than `MAX_CONNECTIONS` open connections: a new one is closed at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

READ_TIMEOUT_S = 10.0  # a request's head and body, from its first byte
KEEP_ALIVE_S = 5  # an idle connection between requests (uvicorn's timeout_keep_alive)
MAX_HEAD_BYTES = 16 * 1024  # a request line and headers (h11_max_incomplete_event_size)
MAX_CONNECTIONS = 1000  # open connections; a new one beyond is closed at once
MAX_CONCURRENCY = 500  # connections + requests in progress; beyond: 503 (limit_concurrency)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for reading each request whole."""

    read_timeout_s = READ_TIMEOUT_S
    max_connections = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(self.read_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE or (self.conn.their_state is h11.DONE and \
                self.conn.our_state is h11.DONE):
            self._arm()  # a new request's first bytes (after a keep-alive pause)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not \
                h11.SEND_BODY:
            self._disarm()  # read whole (or the connection is ending): the app's time now

    def _too_slow(self) -> None:
        self._read_timer = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and \
                not self.transport.is_closing():
            self.logger.info("closing a connection that sent no whole request in %.0f s",
                             self.read_timeout_s)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def server_config(app: Any, host: str, port: int, *,
                  read_timeout_s: float = READ_TIMEOUT_S, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for the console: the guarded protocol and the limits above
    (`options`: uvicorn's others, e.g. root_path, log_level, proxy_headers)."""
    protocol = GuardedH11Protocol if read_timeout_s == READ_TIMEOUT_S else type(
        "GuardedH11Protocol", (GuardedH11Protocol,), {"read_timeout_s": read_timeout_s})
    return uvicorn.Config(app, host=host, port=port, http=protocol,
                          timeout_keep_alive=KEEP_ALIVE_S,
                          h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                          limit_concurrency=MAX_CONCURRENCY, **options)
