"""A TCP proxy for fault tests: forwards to Redis, and can swallow or delay replies.

`drop_reply_after(b"EVALSHA")` lets the next request containing that word reach Redis
(so the command runs), then closes the client's connection instead of forwarding the
reply: exactly the "did my write happen?" ambiguity a retry must survive.
`delay_reply_after(b"EVALSHA", 2.5)` lets the command run and holds its reply back for
2.5 s, beyond kiqbeat's 2 s socket timeout: the client gives up, the write happened.
"""

from __future__ import annotations

import select
import socket
import threading
import time


class FaultProxy:
    """Loopback proxy to 127.0.0.1:`target_port` with switchable reply faults."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self._lock = threading.Lock()
        self._drop_word: bytes | None = None
        self._drops_left = 0
        self._delay_word: bytes | None = None
        self._delays_left = 0
        self._delay_once_s = 0.0
        self.delayed = 0
        self.delay_s = 0.0
        self.dropped = 0
        self.requests = 0
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """redis:// URL through the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_reply_after(self, word: bytes, times: int = 1) -> None:
        """The next `times` requests containing `word` run on Redis, but their reply is lost."""
        with self._lock:
            self._drop_word, self._drops_left = word, times

    def delay_reply_after(self, word: bytes, delay_s: float, times: int = 1) -> None:
        """The next `times` requests containing `word` run on Redis; replies wait `delay_s`."""
        with self._lock:
            self._delay_word, self._delays_left, self._delay_once_s = word, times, delay_s

    def _delay_for(self, request: bytes) -> float:
        with self._lock:
            if self._delay_word is not None and self._delays_left and self._delay_word in request:
                self._delays_left -= 1
                self.delayed += 1
                return self._delay_once_s
            return 0.0

    def _should_drop(self, request: bytes) -> bool:
        with self._lock:
            if self._drop_word is not None and self._drops_left and self._drop_word in request:
                self._drops_left -= 1
                self.dropped += 1
                return True
            return False

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        drop_next_reply = False
        hold_next_reply_s = 0.0
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        with self._lock:
                            self.requests += 1
                        drop_next_reply = drop_next_reply or self._should_drop(data)
                        hold_next_reply_s = hold_next_reply_s or self._delay_for(data)
                        upstream.sendall(data)
                    else:
                        if drop_next_reply:
                            # Let Redis finish the command, then vanish without a reply.
                            return
                        if self.delay_s or hold_next_reply_s:
                            time.sleep(self.delay_s + hold_next_reply_s)
                            hold_next_reply_s = 0.0
                        client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        """Stop accepting; open connections end within 0.2 s."""
        self._closed.set()
        self.listener.close()
