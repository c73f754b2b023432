"""The one reader of a stored JSON value (a definition, a pause record): JSON as RFC 8259
writes it. Python's `json.loads` also takes `NaN`, `Infinity` and numbers such as `1e999`
(read as infinity), which no JSON writer may emit again (issue 26: a definition holding one
made the console's API answer 500); here they are refused as not JSON, as are nesting deeper
than MAX_JSON_DEPTH (no valid definition is; `schedules export`'s YAML writer recursed on
it) and a string holding a lone surrogate (`"\\ud800"`: not Unicode, which no UTF-8 writer,
the API's JSON included, can write again; found by the confinement fuzzer)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kiqbeat.core.limits import MAX_JSON_DEPTH

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is beyond the largest JSON number a reader keeps")
    return value


# json.loads with these hooks would build a decoder per call (a fifth of a short value's read).
_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_number)


def loads(data: str | bytes | bytearray) -> Any:
    """`json.loads` of standard JSON only, at most MAX_JSON_DEPTH deep; ValueError (or
    RecursionError, deeper than Python's parser goes) else."""
    if isinstance(data, str):
        if data.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
        value = _DECODER.decode(data)
    else:
        value = _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    opened = data.count("[") + data.count("{") if isinstance(data, str) else (
        data.count(b"[") + data.count(b"{"))
    if opened > MAX_JSON_DEPTH and depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    raw = data.encode(errors="surrogatepass") if isinstance(data, str) else bytes(data)
    if _ESCAPED_SURROGATE.search(raw) and _has_surrogate(value):
        raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff), not Unicode")
    return value


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return False


def depth(value: Any) -> int:
    """How deep lists and objects nest in a JSON value (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, list | dict):
            deepest = max(deepest, level)
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest
