"""The errors kiqbeat raises: one base class, and a ValueError subclass for bad input."""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Iterable
from typing import Any

from kiqbeat.core.limits import MAX_REASON_CHARS, MAX_SHOWN_CHARS


class KiqbeatError(Exception):
    """Base class of every error kiqbeat raises on purpose."""


class ConfigError(KiqbeatError, ValueError):
    """Bad configuration; carries every problem found, so a file is fixed in one pass."""

    def __init__(self, problems: list[str] | str, *, source: str = "") -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{where}{self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{where}{len(self.problems)} problems:\n{lines}"
        super().__init__(text)


class ScheduleNotFoundError(ConfigError):
    """The store holds no schedule of a name a request gave (the HTTP API's 404; the CLI's
    exit 1; a Lambda event's errorType). A ConfigError, as every refusal always was."""


class ScheduleExistsError(ConfigError):
    """An `add` of a name the store holds already (the HTTP API's 409)."""


class OwnedByDocumentError(ConfigError):
    """A change or removal of a schedule another source holds (a document the store knows,
    or a source it knows nothing of): `owner` names that source (the HTTP API's 409)."""

    def __init__(self, problems: list[str] | str, *, owner: str = "") -> None:
        super().__init__(problems)
        self.owner = owner


class StateError(KiqbeatError):
    """kiqbeat's own Redis state (or a queue key it writes) holds something it cannot use."""


class RedisUnavailableError(KiqbeatError):
    """Redis could not be reached, or did not answer within the deadline."""


class DeadlineError(KiqbeatError):
    """The invocation ran out of time; what it pushed stays pushed, the next one does the rest."""


class RedisRefusedError(KiqbeatError):
    """Redis answered with an error: no permission, out of memory, a read-only replica."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A '; did you mean X?' hint for a misspelt word, or '' when nothing is close."""
    from difflib import get_close_matches  # a misspelt word only

    close = get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 50, 50

# Characters Python counts as printable that show as nothing or as a blank, so that a name
# holding them would look like another: Hangul and Khmer fillers, the combining grapheme
# joiner, the Braille blank. Every character that is not printable (controls C0 and C1,
# DEL, bidi controls, every other format character, separators, lone surrogates — which
# stand for bytes that are not UTF-8 — private use, unassigned) is escaped as well.
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")
_NOT_ASCII = re.compile(r"[^\x20-\x7e]+")


def _escape(char: str) -> str:
    """A character that does not show as itself, as a repr writes it (\\n, \\x1b, \\u202e,
    \\udcff, \\U000e0001); one of _INVISIBLE, which a repr leaves as it is, as \\uXXXX."""
    return repr(char)[1:-1] if not char.isprintable() else f"\\u{ord(char):04x}"


def is_plain(text: str) -> bool:
    """True when every character of `text` shows as itself: nothing `shown` would escape."""
    return text.isprintable() and _INVISIBLE.isdisjoint(text)


def _visible(text: str) -> str:
    """`text` with each character that is not `_plain` escaped (\\x1b, \\u202e, \\udcff);
    the rest, backslashes included, as it is."""
    def fix(match: re.Match[str]) -> str:
        run = match.group()
        return run if is_plain(run) else "".join(c if is_plain(c) else _escape(c) for c in run)
    return _NOT_ASCII.sub(fix, text)


def escaped(text: str | bytes) -> str:
    """`text` whole, unquoted, with every character `shown` escapes escaped the same way
    (for a page that shows a name in full: two names that differ never look alike)."""
    if isinstance(text, bytes):
        text = text.decode(errors="surrogateescape")
    return _visible(text)


def shown(value: object, limit: int = 60) -> str:
    """A bounded, escaped `repr(value)` for messages: a message never carries a whole user
    value (a YAML alias can make a few bytes into a billion items), and never a character
    that could forge or hide text on a terminal or in a log line (controls, bidi controls,
    invisible characters, bytes that are not UTF-8: all escaped, as `\\x1b`, `\\u202e`,
    `\\udcff`). At most `limit` characters, and never more than MAX_SHOWN_CHARS, plus "...".
    """
    limit = min(limit, MAX_SHOWN_CHARS)
    if isinstance(value, str):
        head = _visible(repr(value[:limit]))
        if len(value) <= limit and len(head) <= limit + 2:
            return head
        return head[: limit + 1] + "..."
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<an integer of {value.bit_length()} bits>"
    text = _visible(_REPR.repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_name(name: str | bytes, limit: int = MAX_SHOWN_CHARS) -> str:
    """A name (of a schedule, a document, a queue) as a line shows it: as it is when it is
    short printable text, else quoted and escaped as `shown` quotes values — so a quoted
    name is always an escaped one. Bytes are read as UTF-8, other bytes escaped."""
    if isinstance(name, bytes):
        name = name.decode(errors="surrogateescape")
    if (0 < len(name) <= limit and is_plain(name) and "\\" not in name
            and name[0] not in "'\""):
        return name
    return shown(name, limit)


def shown_text(text: str | bytes, limit: int = MAX_SHOWN_CHARS) -> str:
    """A message read from outside (a set-aside reason in Redis, a source's name) as a line
    shows it: unquoted, escaped as `shown` escapes, at most `limit` characters (never more
    than MAX_REASON_CHARS, a whole set-aside reason) plus "..."."""
    limit = min(limit, MAX_REASON_CHARS)
    if isinstance(text, bytes):
        text = text.decode(errors="surrogateescape")
    head = _visible(text[:limit])
    return head if len(text) <= limit and len(head) <= limit else head[:limit] + "..."


def json_name(name: str, key: str = "name") -> dict[str, str]:
    """A name's fields in JSON output: `{"name": NAME}`, or, for a name that is not UTF-8
    (which no JSON string can hold), its escaped form (as `shown_text`) and, losslessly,
    its bytes in hex: `{"name": "bad\\udcff", "name_hex": "626164ff"}`; `key` names the
    field (`schedule` for a pushed job's)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return {key: shown_text(name),
                f"{key}_hex": name.encode(errors="surrogateescape").hex()}
    return {key: name}


def foreign_json(value: Any, *, indent: int | None = None) -> str:
    """JSON text of `value` for output: valid, lossless, and safe on a terminal.

    Non-ASCII text stays as it is (as `ensure_ascii=False`), except characters `shown`
    escapes, which are written as JSON escapes (`\\u202e`); a lone surrogate (a byte that
    was not UTF-8) is written as its escape `\\udcff`, which Python's json reads back."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)

    def fix(match: re.Match[str]) -> str:
        run = match.group()
        if is_plain(run):
            return run
        # Raw newlines are the indent's (JSON escapes those within strings).
        return "".join(c if c == "\n" or is_plain(c) else json.dumps(c)[1:-1] for c in run)
    return _NOT_ASCII.sub(fix, text)
