"""Slow clients cannot hold the console (issue 26, item 7): a connection that does not
deliver a whole request — head and body — within the read deadline is closed, while other
clients are served. Bounded: 60 connections, a 1.5 s deadline, at most ~10 s."""

from __future__ import annotations

import socket
import time

from tests.support.console import OPERATOR_TOKEN, Start

READ_TIMEOUT_S = 1.5
HEAD = (b"PUT /api/v1/schedules/slow HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + OPERATOR_TOKEN.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (whatever it sent first)."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_silent_and_dripping_connections_are_dropped_while_others_are_served(
    start_console: Start,
) -> None:
    served = start_console(background=False, read_timeout_s=READ_TIMEOUT_S)
    port = int(served.url.rsplit(":", 1)[1])
    kinds = {"silent": 20, "head": 20, "body": 20}
    sockets: list[tuple[str, socket.socket, bytes]] = []
    for kind, count in kinds.items():
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setblocking(False)
            if kind == "body":
                sock.sendall(HEAD)  # a whole head, then the body a byte at a time
            sockets.append((kind, sock, b"" if kind == "silent" else
                            (HEAD if kind == "head" else b"x" * 1000)))
    began = time.monotonic()
    sent = [0] * len(sockets)
    closed_at: dict[int, float] = {}
    with served.api() as api:
        assert api.get("/api/v1/status").status_code == 200  # served meanwhile
        while len(closed_at) < len(sockets) and time.monotonic() - began < 4 * READ_TIMEOUT_S:
            for i, (_, sock, drip) in enumerate(sockets):
                if i in closed_at:
                    continue
                if _closed(sock):
                    closed_at[i] = time.monotonic() - began
                    continue
                if drip and sent[i] < len(drip):  # one byte per round, every 0.1 s
                    try:
                        sock.send(drip[sent[i]:sent[i] + 1])
                        sent[i] += 1
                    except OSError:
                        closed_at[i] = time.monotonic() - began
            time.sleep(0.1)
        assert api.get("/api/v1/status").status_code == 200
    for _, sock, _ in sockets:
        sock.close()
    held = {kind: sum(1 for i, (k, _, _) in enumerate(sockets) if k == kind and i not in
                      closed_at) for kind in kinds}
    assert held == {"silent": 0, "head": 0, "body": 0}
    # None before its deadline; every one soon after it.
    assert min(closed_at.values()) >= READ_TIMEOUT_S * 0.9
    assert max(closed_at.values()) < READ_TIMEOUT_S + 3.0


def test_a_slow_but_whole_request_within_the_deadline_is_answered(start_console: Start
                                                                  ) -> None:
    served = start_console(background=False, read_timeout_s=READ_TIMEOUT_S)
    port = int(served.url.rsplit(":", 1)[1])
    request = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for i in range(0, len(request), 8):  # in pieces, well within the deadline
            sock.sendall(request[i:i + 8])
            time.sleep(0.05)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
