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
        """Queue a call on a pipeline; after a NOSCRIPT reply the caller runs `reload`.
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
              args: Sequence[Arg], *, raw: bool = False) -> Pending:
        """Send a call without reading its reply (`Pending.result` reads it, or
        `Pending.abandon` drops it): the caller does its next piece of work while Redis runs
        this one. The one "send now, read later" of kiqbeat (pushes, imports), on a
        connection of its own. A lost connection or an unknown script sends it again as
        `call` does: only scripts safe to send again, perhaps to a new master, are started
        (push.lua and write.lua apply nothing twice, push.lua nothing planned from
        watermarks the server does not hold). `raw` as for `queue`."""
        pending = Pending(self, lua, client, keys, args, raw=raw)
        pending.send()
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

    def needs_reload(self, reply: object) -> bool:
        """True when a pipelined reply says the server did not know the script."""
        return not self.functions and isinstance(reply, redis.exceptions.NoScriptError)

    def reload(self, lua: Lua, client: redis.Redis) -> None:
        """Make the server know the script again."""
        client.script_load(lua.text)


@dataclass(eq=False)
class Pending:
    """A script call sent on a connection taken from the pool (`Caller.start`), its reply not
    read yet; `result` or `abandon`, only one of them, once. The connection goes back to the
    pool once the reply is read; when it fails, the reply is lost (`result` then sends the
    call again)."""

    caller: Caller
    lua: Lua
    client: redis.Redis
    keys: Sequence[str]
    args: Sequence[Arg]
    raw: bool = False
    conn: Any = None  # while its reply is pending on it
    lost: bool = True  # until sent whole; again once its connection failed
    reply: Any = None  # once read
    settled: bool = False  # its reply was read, or abandoned

    def send(self) -> None:
        """Send the call; a connection failing loses it (not sent whole, so not run)."""
        try:
            self.conn = self.client.connection_pool.get_connection()
            self.conn.send_command(*self.caller.command(self.lua, self.keys, self.args))
        except (redis.ConnectionError, redis.TimeoutError):
            self.break_off()
            return
        except BaseException:
            self.break_off()  # perhaps sent in part: never reused
            raise
        self.lost = False

    def result(self) -> Any:
        """The call's reply; a lost connection or an unknown script (NOSCRIPT) sends it again
        through `Caller.call` (with the client's retries, loading the script)."""
        if self.settled:
            raise RuntimeError(f"the reply of a started {self.lua.name} call is read once")
        self.settled = True
        if not self.lost:
            self._read()
        reply = self.reply
        if self.lost or isinstance(reply, redis.exceptions.NoScriptError):
            return self.caller.call(self.lua, self.client, self.keys, self.args, raw=self.raw)
        if isinstance(reply, redis.ResponseError):
            raise self.caller.explained(reply) from reply
        return reply

    def _read(self) -> None:
        """Read the reply, then give the connection back to the pool."""
        client: Any = self.client
        options = {NEVER_DECODE: True} if self.raw else {}
        try:
            self.reply = client.parse_response(
                self.conn, self.caller.command(self.lua, (), ())[0], **options)
        except (redis.ConnectionError, redis.TimeoutError):
            self.break_off()  # as the client's own retries do
            return
        except redis.ResponseError as exc:  # NOSCRIPT among them: the connection is fine
            self.reply = exc
        except BaseException:
            self.break_off()  # the reply not read whole: never reused
            raise
        self.client.connection_pool.release(self.conn)
        self.conn = None

    def abandon(self) -> None:
        """Drop the call without reading its reply (its connection is closed, never reused
        with a reply pending); whether it was applied is unknown."""
        self.settled = True
        if self.conn is not None:
            self.break_off()

    def break_off(self) -> None:
        """Close the connection (never reused with a reply pending): the reply is lost."""
        self.lost = True
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)


DUE = Lua("due", ("definitions", "varints", "progress"))
PUSH = Lua("push", ("definitions", "records", "varints", "progress", "frames", "life",
                    "push_grants"))
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
