"""The first step of every document: bytes or text into plain Python values, safely.

Every source (a file, S3, SSM, AppConfig, a packaged file) goes through `parse`, so a BOM, an
encoding or a size is judged the same way wherever the document came from:

- at most MAX_DOCUMENT_BYTES (32 MiB: 100,000 ordinary schedules are about 11 MB);
- UTF-8, with or without a byte-order mark; no control characters outside tab and newline
  (PyYAML's own reader refuses them with an error of its own kind; JSON would let them into
  class and queue names);
- YAML through a safe loader (no object tags) that keeps the last of a repeated key, as
  Ruby's Psych does, and reports each repeat (key and lines) for a warning; reads Ruby
  `:symbol:` keys as plain strings and keeps dates as text; ERB tags are refused, naming
  the first one; an unquoted value written as a Ruby symbol (`queue: :critical`) stays
  the text `:critical` but is marked as a `RubySymbol`, so that importers of Ruby tools'
  files can read it as Ruby does (the name, `critical`);
- YAML aliases are counted before anything is built: the document *as expanded* may hold at
  most MAX_EXPANDED_NODES values (5,000,000), so a few hundred bytes of nested aliases (a
  billion values) are refused at once, while `<<: *defaults` shared by 100,000 schedules is
  fine. JSON has no aliases: its size bounds it.

The YAML reading is `yaml_reader.py`'s, imported only when a document is YAML: a process that
reads a document's bytes without parsing them (an unchanged document, `fingerprint.py`) or
reads JSON loads no PyYAML.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from kiqbeat.document.imported import strip_symbol
from kiqbeat.errors import ConfigError, shown

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
_BOM = "\ufeff"


@cache
def _non_printable() -> re.Pattern[str]:
    """What YAML 1.1 calls non-printable (PyYAML's Reader.NON_PRINTABLE), BOM aside; compiled
    by the first document read (~10 ms), not by every process that imports this module."""
    return re.compile(
        "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")


def read_file(path: str) -> bytes:
    """A schedule file's bytes, refused by its size before it is read; ConfigError."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_DOCUMENT_BYTES:  # before reading it all
            raise ConfigError(f"the file is {size:,} bytes; the limit is "
                              f"{MAX_DOCUMENT_BYTES:,} bytes", source=path)
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("schedule file not found", source=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=path) from exc


def parse(data: bytes | str, source: str = "") -> tuple[object, list[str]]:
    """The decoded document and its repeated keys ("line 5: key 'cron' repeats line 3; the
    last value is kept"), each repeat's later value kept, as Ruby's YAML and JSON readers
    keep it; ConfigError when unreadable."""
    text = decode(data, source)
    stripped = text.lstrip()
    if source.endswith(".json") or stripped.startswith(("{", "[")):
        try:
            return _json(text)
        except json.JSONDecodeError as exc:
            if source.endswith(".json"):
                raise ConfigError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: "
                                  f"{exc.msg}", source=source) from exc
            # Not JSON after all: flow-style YAML such as `[{name: a, cron: ...}]`.
        except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, 3,000 [[[
            from kiqbeat.document.yaml_reader import unreadable

            raise ConfigError(f"the JSON cannot be read safely: {unreadable(exc)}",
                              source=source) from None
    if "<%" in text:
        start = text.index("<%")
        end = text.find("%>", start)
        tag = text[start: end + 2 if end != -1 else start + 40]
        raise ConfigError(f"line {text.count(chr(10), 0, start) + 1}: the document contains "
                          f"ERB tags ({shown(tag, 60)}), which kiqbeat does not evaluate "
                          "(the Ruby tools render them when they load the file); render it to "
                          "plain YAML first, e.g. with bin/rails runner 'puts ERB.new(File.read("
                          '"config/schedule.yml")).result\'', source=source)
    from kiqbeat.document.yaml_reader import read_yaml  # PyYAML: only for a YAML document

    return read_yaml(text, source)


def decode(data: bytes | str, source: str = "") -> str:
    """UTF-8 text without its byte-order mark, checked for size and control characters."""
    size = len(data) if isinstance(data, bytes) or len(data) * 4 <= MAX_DOCUMENT_BYTES else (
        len(data.encode("utf-8", "surrogatepass")))
    if size > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"the document is {size:,} bytes; the limit is "
                          f"{MAX_DOCUMENT_BYTES:,} bytes (32 MiB)", source=source)
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from exc
    else:
        text = data.removeprefix(_BOM)
    bad = _non_printable().search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise ConfigError(f"line {line}, column {column}: the character "
                          f"U+{ord(bad.group()):04X} is not allowed (control characters, lone "
                          "surrogates and the like are not text)", source=source)
    return text


def _json(text: str) -> tuple[object, list[str]]:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[object, Any]:
        out: dict[object, Any] = {}
        for key, value in items:
            key2 = strip_symbol(key)
            if key2 in out:
                duplicates.append(f"duplicate key {key2!r}; the last value is kept")
                del out[key2]  # the last one, in the place it was written
            out[key2] = value
        return out

    return json.loads(text, object_pairs_hook=pairs), duplicates
