"""Modules other packages import at start-up that kiqbeat never uses, loaded on first use.

A Kubernetes CronJob runs a fresh `kiqbeat run-once` every minute, so each import is paid
every minute. redis-py 8's `redis/__init__.py` starts with `from redis import asyncio` (its
asyncio client: ~0.05-0.1 s of a cold process here) and `redis.utils` imports
`importlib.metadata` for a version lookup kiqbeat turns off (`connection._NO_SETINFO`).
Neither is patched: `defer_unused` (called once, by `kiqbeat/__init__.py`, before any
kiqbeat module imports redis) puts an empty module object for each in `sys.modules`, with
its spec and `__path__` (so its submodules still import as usual) and no code run yet. The
first attribute read that the module does not have runs its `__init__` in that same module
object, so `from redis.asyncio import Redis` and `redis.asyncio.Redis` work as they always
did, a moment later. A module already imported (by the application, before kiqbeat) is
left as it is; one that is not installed is skipped.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType

# Each: what imports it, and why kiqbeat's processes need it only if a user's code does.
DEFERRED = (
    "redis.asyncio",  # redis/__init__.py; kiqbeat's clients are synchronous
    "importlib.metadata",  # redis.utils; only redis' CLIENT SETINFO reads it, which is off
)


def defer_unused() -> None:
    """Defer each of DEFERRED not imported yet (idempotent; cheap: no module code runs)."""
    for name in DEFERRED:
        if name not in sys.modules:
            defer(name)


def pending(module: ModuleType) -> bool:
    """True while a module `defer` made has not run its code (nothing of it is loaded)."""
    hook = module.__dict__.get("__getattr__")
    return getattr(hook, "__module__", None) == __name__


def defer(name: str) -> ModuleType | None:
    """`sys.modules[name]` as a module whose code runs at its first missing attribute; None
    (nothing changed) when the module or its parent package cannot be found. The parent
    package is located, not imported: an imported parent gets the module as its attribute
    (as an import sets it), one imported later must import it itself (redis does)."""
    parent, _, child = name.rpartition(".")
    try:
        parent_spec = importlib.util.find_spec(parent) if parent else None
    except (ImportError, ValueError):
        return None
    if parent and (parent_spec is None or parent_spec.submodule_search_locations is None):
        return None
    path = parent_spec.submodule_search_locations if parent_spec else None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    # Reentrant: the module's own code may read its own names while it runs (then it sees
    # what it has so far, as in any import); another thread waits until it has run.
    lock = threading.RLock()
    running: list[bool] = []

    def __getattr__(attribute: str) -> object:  # PEP 562's name
        with lock:
            if not running and module.__dict__.get("__getattr__") is __getattr__:
                running.append(True)
                try:
                    loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)  # as a failed import leaves it
                    raise
                finally:
                    running.clear()
                if module.__dict__.get("__getattr__") is __getattr__:
                    del module.__dict__["__getattr__"]  # run: from now on a plain module
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module
