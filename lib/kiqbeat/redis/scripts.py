"""kiqbeat's Lua: read from the package once, run as scripts or as a Redis 7 function library.

Two ways to run the same code, chosen by the `redis_functions` setting:

- scripts (default; Redis 6.2 and later): EVALSHA, and on NOSCRIPT (a new, restarted or
  failed-over server) SCRIPT LOAD and EVALSHA again, once. The ACL must then grant
  `+evalsha +script|load`, which lets the user run *any* Lua it writes;
- functions (Redis 7): an administrator loads the `kiqbeat` library once (`kiqbeat
  functions --load`, or `FUNCTION LOAD REPLACE` with the text `kiqbeat functions` prints),
  and kiqbeat only FCALLs it; its user needs `+fcall` and no script permission at all.
  Each function's name carries its script's SHA1, so a library older than the kiqbeat
  calling it is reported as such instead of running old code.

Pipelines queue the call directly (redis-py's `Script` objects ask SCRIPT EXISTS on every
pipelined call, a round trip more). Each script's header states its KEYS, ARGV and reply.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core import limits
from kiqbeat.redis.clock import TEST_CLOCK_KEY

Arg = str | bytes | int | float
LIBRARY = "kiqbeat"
# The package's `lua/` folder, read as files: importlib.resources (which also reads zips)
# loads zipfile, tempfile and shutil, ~10 ms of every cold run-once for nothing.
LUA_FOLDER = Path(__file__).with_name("lua")


# The bounds the scripts enforce, from their one home (core/limits.py).
LIMITS = (f"-- kiqbeat's bounds (core/limits.py), written here by scripts.py.\n"
          f"local MAX_DEFINITION_BYTES = {limits.MAX_DEFINITION_BYTES}\n"
          f"local MAX_BATCH_DEFINITION_BYTES = {limits.MAX_BATCH_DEFINITION_BYTES}\n"
          f"local STATE_BUCKETS = {limits.STATE_BUCKETS}\n"
          f"local MAX_OVERLAP_SCAN = {limits.MAX_OVERLAP_SCAN}\n"
          f"local ENDED_MS = {limits.MAX_PLANNABLE_MS}\n"
          f"local MAX_CHANGED = {limits.MAX_CHANGED_NAMES}\n"
          f"local MAX_HISTORY = {limits.MAX_HISTORY}\n"
          f"local HELD_RECHECK_MS = {limits.HELD_RECHECK_MS}\n"
          f"local MAX_PENDING_SKIPS = {limits.MAX_PENDING_SKIPS}\n"
          # The test clock's key (redis/clock.py), nil outside the test suite.
          f"local TEST_CLOCK_KEY = {'nil' if TEST_CLOCK_KEY is None else repr(TEST_CLOCK_KEY)}\n")


@dataclass(frozen=True)
class Lua:
    """One script of `redis/lua/`: its text, SHA1 and function name in the library. Its text
    is the packaged script `lua/<name>.lua`, after the bounds (`LIMITS`), the checks every
    script shares (`lua/checks.lua`) and the shared parts it `uses` (`lua/<use>.lua`), read
    from the package when first asked for (a process reads the scripts it runs)."""

    name: str
    uses: tuple[str, ...] = ()

    @cached_property
    def text(self) -> str:
        return "\n".join([LIMITS, *((LUA_FOLDER / f"{part}.lua").read_text()
                                    for part in ("checks", *self.uses, self.name))])

    @cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.text.encode()).hexdigest()

    @property
    def function(self) -> str:
        """Its name in the function library: changes whenever the script does."""
        return f"kiqbeat_{self.name}_{self.sha[:12]}"


@dataclass(frozen=True)
class Caller:
    """Runs kiqbeat's Lua one way: as scripts, or as functions of the loaded library."""

    functions: bool = False

    def queue(self, lua: Lua, pipe: Any, keys: Sequence[str], args: Sequence[Arg], *,
              raw: bool = False) -> None:
        """Queue a call on a pipeline; after a NOSCRIPT reply the caller loads the script
        (`client.script_load`, as `read_due` does) and sends it again.
        `raw`: its reply's strings are bytes whatever the client's decode_responses."""
        pipe.execute_command(*self.command(lua, keys, args), **({NEVER_DECODE: True} if raw
                                                                 else {}))

    def call(self, lua: Lua, client: redis.Redis, keys: Sequence[str],
             args: Sequence[Arg], *, raw: bool = False) -> Any:
        """Run it now (loading the script first when the server does not know it); `raw` as
        for `queue`."""
        command, options = self.command(lua, keys, args), {NEVER_DECODE: True} if raw else {}
        try:
            return client.execute_command(*command, **options)  # type: ignore[no-untyped-call]
        except redis.exceptions.NoScriptError:  # scripts only: FCALL answers "not found"
            client.script_load(lua.text)
            return client.execute_command(*command, **options)  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            explained = self.explained(exc)
            if explained is exc:  # never its own cause
                raise
            raise explained from exc

    def start(self, lua: Lua, client: redis.Redis, keys: Sequence[str],
              args: Sequence[Arg], *, line: Line | None = None, raw: bool = False,
              resend: bool = True) -> Pending:
        """Send a call without reading its reply (`Pending.result` reads it, or
        `Pending.abandon` drops it): the caller does its next piece of work while Redis runs
        this one. The one "send now, read later" of kiqbeat (pushes, imports, the next due
        read). On `line`, after the calls sent on it before (Redis runs them in that order);
        else on a connection of its own. `resend`: a lost connection or an unknown script
        sends it again as `call` does (only for scripts safe to send again, perhaps to a
        new master: push.lua and write.lua apply nothing twice, push.lua nothing planned
        from watermarks the server does not hold); without it, `result` raises `Lost`
        instead (a call whose place among the calls around it matters). `raw` as for `queue`."""
        pending = Pending(self, lua, keys, args, line or Line(client), raw=raw, resend=resend)
        pending.line.send(pending)
        return pending

    def command(self, lua: Lua, keys: Sequence[str], args: Sequence[Arg]) -> tuple[Arg, ...]:
        """The command running it, to send on a connection and read later (its NOSCRIPT
        reply then calls for `call`, which loads it)."""
        if self.functions:
            return ("FCALL", lua.function, len(keys), *keys, *args)
        return ("EVALSHA", lua.sha, len(keys), *keys, *args)

    def explained(self, exc: Exception) -> Exception:
        """`exc`, saying what to do when the function library is missing or out of date."""
        if self.functions and "function not found" in str(exc).lower():
            return redis.ResponseError(
                f"{exc}: kiqbeat's function library is not loaded, or is older than this "
                "kiqbeat; load it with `kiqbeat functions --load` (FUNCTION LOAD REPLACE)")
        return exc


class Lost(redis.ConnectionError):
    """A started call that may not be sent again (`Caller.start` without `resend`) lost its
    reply (the connection failed, or the server did not know the script): whether it ran,
    and where among the calls sent around it, is unknown."""


class Line:
    """Calls sent on one connection, their replies read in the order sent (`Caller.start`):
    Redis runs one connection's commands in the order they arrive, so a call sent on a line
    runs after every call sent on it before, whichever reply is read first. The connection
    is taken from the pool by the first call and given back once no reply is pending; when
    it fails, every call in flight on it loses its reply (`Pending.result` then sends it
    again, or raises `Lost`), and the next call takes a new one."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.conn: Any = None
        self.flight: deque[Pending] = deque()  # sent on `conn`, replies not read, in order
        self.lost: list[Pending] = []  # lost their replies; sent again when read, if at all

    def send(self, pending: Pending) -> None:
        """Send `pending`'s call after those in flight. One that may not be sent again is
        not sent at all (lost at once) while a call before it on the line is lost and not
        read yet: that one runs again only when read, after it."""
        self.lost = [p for p in self.lost if not p.settled]
        if not pending.resend and self.lost:
            self.lost.append(pending)
            return
        try:
            if self.conn is None:
                self.conn = self.client.connection_pool.get_connection()
            self.conn.send_command(*pending.caller.command(pending.lua, pending.keys,
                                                           pending.args))
        except (redis.ConnectionError, redis.TimeoutError):
            self.break_off()  # this one not sent whole, so not run: lost as the rest
            self.lost.append(pending)
            return
        except BaseException:
            self.break_off()  # perhaps sent in part: never reused
            raise
        pending.state = FLIGHT
        self.flight.append(pending)

    def read(self, pending: Pending) -> None:
        """Read the replies in flight up to `pending`'s, each kept by its own call."""
        client: Any = self.client
        while pending.state == FLIGHT:
            first = self.flight[0]
            options = {NEVER_DECODE: True} if first.raw else {}
            try:
                first.reply = client.parse_response(
                    self.conn, first.caller.command(first.lua, (), ())[0], **options)
            except (redis.ConnectionError, redis.TimeoutError):
                self.break_off()  # as the client's own retries do
                return
            except redis.ResponseError as exc:  # NOSCRIPT among them: the connection is fine
                first.reply = exc
            except BaseException:
                self.break_off()  # the reply not read whole: never reused
                raise
            first.state = KEPT
            self.flight.popleft()
            if not self.flight:
                self.client.connection_pool.release(self.conn)
                self.conn = None

    def break_off(self) -> None:
        """Close the connection (never reused with replies pending): every call in flight
        on it loses its reply."""
        for lost in self.flight:
            lost.state = LOST
        self.lost += self.flight
        self.flight.clear()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)


# A started call's state: its reply pending on its line, read and kept, or lost.
FLIGHT, KEPT, LOST = "flight", "kept", "lost"


@dataclass(eq=False)
class Pending:
    """A script call sent on a line (`Caller.start`), its reply not read yet; `result` or
    `abandon`, only one of them, once."""

    caller: Caller
    lua: Lua
    keys: Sequence[str]
    args: Sequence[Arg]
    line: Line
    raw: bool = False
    resend: bool = True
    state: str = LOST  # until sent whole
    reply: Any = None  # once KEPT
    settled: bool = False  # its reply was read, or abandoned

    def result(self) -> Any:
        """The call's reply (read after those of the calls sent before it on its line); a
        lost connection or an unknown script (NOSCRIPT) sends it again through
        `Caller.call` (with the client's retries, loading the script), or raises `Lost`
        when it may not be sent again."""
        if self.settled:
            raise RuntimeError(f"the reply of a started {self.lua.name} call is read once")
        self.settled = True
        self.line.read(self)
        reply = self.reply
        if self.state == LOST or isinstance(reply, redis.exceptions.NoScriptError):
            if not self.resend:
                raise Lost(f"the reply of a started {self.lua.name} call was lost")
            return self.caller.call(self.lua, self.line.client, self.keys, self.args,
                                    raw=self.raw)
        if isinstance(reply, redis.ResponseError):
            raise self.caller.explained(reply) from reply
        return reply

    def abandon(self) -> None:
        """Drop the call without reading its reply (its line's connection is closed, never
        reused with a reply pending: the calls in flight on it lose theirs); whether it was
        applied is unknown."""
        self.settled = True
        if self.state == FLIGHT:
            self.line.break_off()


DUE = Lua("due", ("definitions", "varints", "progress"))
PUSH = Lua("push", ("definitions", "records", "varints", "progress", "frames", "life"))
WRITE = Lua("write", ("definitions", "records", "varints", "progress", "life", "names"))
INDEX = Lua("index", ("definitions", "names"))
BACKFILL = Lua("backfill", ("definitions", "records", "varints", "progress", "frames", "life"))
TRIGGER = Lua("trigger", ("definitions", "records", "varints", "progress"))
READ = Lua("read", ("definitions",))
PAUSE = Lua("pause", ("definitions", "records", "varints", "progress"))
# The layout before the progress buckets into them, once (redis/migrate.py).
MIGRATE = Lua("migrate", ("varints", "progress"))
SKIP = Lua("skip", ("life",))
INCIDENTS = Lua("incidents", ("varints", "outcomes", "deadline"))
FOLD = Lua("fold", ("varints", "outcomes", "deadline"))
SCRIPTS = Caller(functions=False)


def library() -> str:
    """The Redis 7 function library of every script, for `FUNCTION LOAD REPLACE`."""
    parts = [f"#!lua name={LIBRARY}", "-- kiqbeat's scripts as Redis functions: load with "
             "FUNCTION LOAD REPLACE (kiqbeat functions --load)."]
    for lua in (DUE, PUSH, WRITE, INDEX, BACKFILL, TRIGGER, READ, PAUSE, MIGRATE,
                SKIP, FOLD, INCIDENTS):
        parts.append(f"redis.register_function('{lua.function}', function(KEYS, ARGV)\n"
                     f"{lua.text}\nend)")
    return "\n\n".join(parts) + "\n"
