"""The cyclic garbage collector paused for a stretch of work that makes no cycles worth
collecting: a run-once process's imports and invocation, the push loop, an import. Its
passes over many young objects (modules just loaded, an engine's caches, an import's dicts)
cost a fifth of a short process, more than the push loop itself, a tenth of an import; what
the stretch drops is freed by reference counting meanwhile."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The collector paused inside (`pause` False: left as it is), and enabled again after
    if it was, for a caller that goes on (a test, a library, a long-lived process)."""
    collecting = pause and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
