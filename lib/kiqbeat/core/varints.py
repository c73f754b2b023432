"""The primitives of kiqbeat's stored records, specified in docs/store.md "Encodings": varint,
zigzag and the span units; the one Python writer and reader of them (lua/varints.lua is the
Lua side). Pure: redis/progress.py and core/outcomes.py build their records from these."""

from __future__ import annotations

UNITS_MS = (1, 1000, 60_000, 3_600_000)  # a span's UNIT: ms, s, min, h

# A varint longer than this, or above MAX_VALUE, is not one (a record written by hand): every
# value kiqbeat writes fits, and a Lua double holds it exactly.
MAX_BYTES = 8
MAX_VALUE = 2**53


def varint(value: int) -> bytes:
    """`value` (≥ 0) as a varint."""
    out = bytearray()
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def read_varint(raw: bytes, pos: int, max_bytes: int = MAX_BYTES, max_value: int = MAX_VALUE
                ) -> tuple[int, int]:
    """The varint at `pos` of `raw` and the position after it; IndexError when it is cut
    short, longer than `max_bytes` or above `max_value` (the record is not one)."""
    value, scale = 0, 1
    for _ in range(max_bytes):
        byte = raw[pos]  # IndexError when cut short
        value += (byte & 127) * scale
        pos += 1
        if byte < 128:
            if value > max_value:
                break
            return value, pos
        scale *= 128
    raise IndexError


def zigzag(value: int) -> int:
    """A signed integer as an unsigned one: 0, -1, 1, -2 ... as 0, 1, 2, 3 ..."""
    return 2 * value if value >= 0 else -2 * value - 1


def unzigzag(value: int) -> int:
    """`zigzag` undone."""
    return value // 2 if value % 2 == 0 else -(value + 1) // 2
