"""kiqbeat's Lua scripts: read from the package once, each called by its SHA1.

The one way kiqbeat runs Lua: `Lua.call` sends EVALSHA and, on NOSCRIPT (a new, restarted
or failed-over server), loads the script and sends it again, once. Pipelines queue
`Lua.evalsha` directly, since redis-py's `Script` objects ask SCRIPT EXISTS on every
pipelined call, a round trip more. Each script's header states its KEYS, ARGV and reply.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import redis

Arg = str | bytes | int | float


@dataclass(frozen=True)
class Lua:
    """One script of `redis/lua/`: its text and SHA1."""

    name: str
    text: str = field(repr=False)
    sha: str

    @classmethod
    def named(cls, name: str) -> Lua:
        """The packaged script `lua/<name>.lua`."""
        text = files("kiqbeat.redis").joinpath(f"lua/{name}.lua").read_text()
        return cls(name, text, hashlib.sha1(text.encode()).hexdigest())

    def evalsha(self, pipe: Any, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue a call on a pipeline; the caller reloads on NOSCRIPT (`is_noscript`)."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    def call(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script now; loads it first when the server does not know it."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(self.text)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def load(self, client: redis.Redis) -> None:
        """Make the server know the script (after a NOSCRIPT in a pipeline)."""
        client.script_load(self.text)


def is_noscript(reply: object) -> bool:
    """True when a pipelined reply says the server did not know the script."""
    return isinstance(reply, redis.exceptions.NoScriptError)


READ = Lua.named("read")
PUSH = Lua.named("push")
PRUNE = Lua.named("prune")
