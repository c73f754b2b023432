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
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core import limits

Arg = str | bytes | int | float
LIBRARY = "kiqbeat"


# The bounds the scripts enforce, from their one home (core/limits.py).
LIMITS = (f"-- kiqbeat's bounds (core/limits.py), written here by scripts.py.\n"
          f"local MAX_DEFINITION_BYTES = {limits.MAX_DEFINITION_BYTES}\n"
          f"local MAX_BATCH_DEFINITION_BYTES = {limits.MAX_BATCH_DEFINITION_BYTES}\n"
          f"local STATE_BUCKETS = {limits.STATE_BUCKETS}\n"
          f"local MAX_OVERLAP_SCAN = {limits.MAX_OVERLAP_SCAN}\n"
          f"local ENDED_MS = {limits.MAX_PLANNABLE_MS}\n")


@dataclass(frozen=True)
class Lua:
    """One script of `redis/lua/`: its text, SHA1 and function name in the library."""

    name: str
    text: str = field(repr=False)
    sha: str

    @classmethod
    def named(cls, name: str, *uses: str) -> Lua:
        """The packaged script `lua/<name>.lua`, after the bounds (`LIMITS`) and the checks
        every script shares (`lua/checks.lua`) and the shared parts it `uses`
        (`lua/<use>.lua`)."""
        lua = files("kiqbeat.redis").joinpath("lua")
        text = "\n".join([LIMITS, *(lua.joinpath(f"{part}.lua").read_text()
                                    for part in ("checks", *uses, name))])
        return cls(name, text, hashlib.sha1(text.encode()).hexdigest())

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
             args: Sequence[Arg]) -> Any:
        """Run it now (loading the script first when the server does not know it)."""
        if self.functions:
            try:
                return client.fcall(lua.function, len(keys), *keys, *args)
            except redis.ResponseError as exc:
                raise self.explained(exc) from exc
        try:
            return client.evalsha(lua.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(lua.text)
            return client.evalsha(lua.sha, len(keys), *keys, *args)

    def start(self, lua: Lua, client: redis.Redis, keys: Sequence[str],
              args: Sequence[Arg]) -> Pending:
        """Send a call without reading its reply (`Pending.result` reads it, or
        `Pending.abandon` drops it): the caller does its next piece of work while Redis runs
        this one. The one "send now, read later" of kiqbeat (pushes, imports); only for
        scripts that are safe to send again (a lost connection is retried as `call` retries
        it: push.lua and write.lua apply nothing twice)."""
        pending = Pending(self, lua, client, keys, args)
        pool = client.connection_pool
        conn: Any = pool.get_connection()
        try:
            conn.send_command(*self.command(lua, keys, args))
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            pool.release(conn)
            return pending  # not sent whole, so not run: `result` sends it again
        except BaseException:
            conn.disconnect()  # perhaps sent in part: never reused
            pool.release(conn)
            raise
        pending.conn = conn
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


@dataclass
class Pending:
    """A script call sent on a connection of its own (`Caller.start`), its reply not read
    yet; `result` or `abandon` must come before anything else is sent on the connection,
    and only one of them, once."""

    caller: Caller
    lua: Lua
    client: redis.Redis
    keys: Sequence[str]
    args: Sequence[Arg]
    conn: Any = None  # None: not sent (the connection failed): `result` sends it again
    settled: bool = False  # its reply was read, or abandoned

    def result(self) -> Any:
        """The call's reply; a lost connection or an unknown script (NOSCRIPT) sends it again
        through `Caller.call` (with the client's retries, loading the script)."""
        if self.settled:
            raise RuntimeError(f"the reply of a started {self.lua.name} call is read once")
        self.settled = True
        conn, self.conn = self.conn, None
        if conn is None:
            return self.caller.call(self.lua, self.client, self.keys, self.args)
        pool = self.client.connection_pool
        try:
            client: Any = self.client
            reply = client.parse_response(conn, self.caller.command(self.lua, (), ())[0])
        except (redis.ConnectionError, redis.TimeoutError):
            # As the client's own retries do (a connection the server closed while idle).
            conn.disconnect()
            pool.release(conn)
            return self.caller.call(self.lua, self.client, self.keys, self.args)
        except redis.exceptions.NoScriptError:  # a new server: load it, call again
            pool.release(conn)
            return self.caller.call(self.lua, self.client, self.keys, self.args)
        except redis.ResponseError as exc:
            pool.release(conn)
            raise self.caller.explained(exc) from exc
        except BaseException:
            conn.disconnect()  # the reply not read whole: never reused
            pool.release(conn)
            raise
        pool.release(conn)
        return reply

    def abandon(self) -> None:
        """Drop the call without reading its reply (the connection is closed, never reused
        with a reply pending); whether it was applied is unknown."""
        self.settled = True
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)


DUE = Lua.named("due", "definitions", "progress")
PUSH = Lua.named("push", "definitions", "records", "progress", "frames", "life")
WRITE = Lua.named("write", "definitions", "records", "progress", "life")
BACKFILL = Lua.named("backfill", "definitions", "records", "progress", "frames", "life")
TRIGGER = Lua.named("trigger", "definitions", "records", "progress")
READ = Lua.named("read", "definitions")
PAUSE = Lua.named("pause", "definitions", "records", "progress")
SKIP = Lua.named("skip")
SCRIPTS = Caller(functions=False)


def library() -> str:
    """The Redis 7 function library of every script, for `FUNCTION LOAD REPLACE`."""
    parts = [f"#!lua name={LIBRARY}", "-- kiqbeat's scripts as Redis functions: load with "
             "FUNCTION LOAD REPLACE (kiqbeat functions --load)."]
    for lua in (DUE, PUSH, WRITE, BACKFILL, TRIGGER, READ, PAUSE, SKIP):
        parts.append(f"redis.register_function('{lua.function}', function(KEYS, ARGV)\n"
                     f"{lua.text}\nend)")
    return "\n\n".join(parts) + "\n"
