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
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from kiqbeat.errors import ConfigError, shown

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
MAX_EXPANDED_NODES = 5_000_000
_BOM = "\ufeff"
# What YAML 1.1 calls non-printable (PyYAML's Reader.NON_PRINTABLE), BOM aside.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available


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
            raise ConfigError(f"the JSON cannot be read safely: {_unreadable(exc)}",
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
    return _yaml(text, source)


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
    bad = _NON_PRINTABLE.search(text)
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


class RubySymbol(str):
    """An unquoted YAML value starting with ':' (`:critical`), which Ruby's YAML loader reads
    as the Symbol `critical`; kiqbeat's own documents read it as the text it is."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The symbol's name, as Ruby's `to_s` gives it (Psych drops the first ':')."""
        return str(self[1:])


class _Loader(_BASE_LOADER):  # type: ignore[misc]
    """Safe loader: keeps the last of a repeated key (recording it), reads `:sym:` keys as
    `sym`, keeps dates as text."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, tuple[int, int]] = {}  # key: (index in node.value, line)
        dropped: set[int] = set()
        for index, pair in enumerate(node.value):
            key_node = pair[0]
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` may be overridden
                continue
            key = strip_symbol(self.construct_object(key_node, deep=True))
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    earlier, first_line = seen[key]
                    dropped.add(earlier)  # Psych keeps the last value of a repeated key
                    self.duplicates.append(
                        f"line {line}: duplicate key {key!r} (also at line {first_line}); "
                        "the last value is kept, as Ruby's YAML loader keeps it")
                seen[key] = (index, line)
            except TypeError:  # an unhashable key; the constructor reports it below
                pass
        if dropped:
            node.value = [p for i, p in enumerate(node.value) if i not in dropped]
        mapping = super().construct_mapping(node, deep=deep)
        return {strip_symbol(k): v for k, v in mapping.items()}

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        value: str = super().construct_yaml_str(node)
        if not node.style and len(value) > 1 and value.startswith(":"):  # plain: None or ""
            return RubySymbol(value)  # Psych: a plain scalar matching /^:./ is a Symbol
        return value


_Loader.add_constructor("tag:yaml.org,2002:str", _Loader.construct_yaml_str)


# Unquoted dates stay strings, as written: a `date` in args would not survive JSON anyway.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def strip_symbol(key: object) -> object:
    """Ruby symbol keys (`:schedule:`) are plain strings in YAML; read them without the ':'."""
    return key[1:] if isinstance(key, str) and key.startswith(":") else key


def _yaml(text: str, source: str) -> tuple[object, list[str]]:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        expanded = _expanded_size(node)
        if expanded > MAX_EXPANDED_NODES:
            raise ConfigError(f"the document expands to more than {MAX_EXPANDED_NODES:,} "
                              "values through YAML aliases (&anchor / *alias); write the "
                              "values out, or share less", source=source)
        return loader.construct_document(node), loader.duplicates
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if "nesting depth" in (exc.problem or ""):  # PyYAML >= 6.0.4 stops deep nesting itself
            raise ConfigError(f"the YAML cannot be read safely{where}: {_TOO_DEEP}",
                              source=source) from None
        what = "; ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"invalid YAML{where}: {what}", source=source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from exc
    except ConfigError:
        raise
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, 3,000 [[[
        raise ConfigError(f"the YAML cannot be read safely: {_unreadable(exc)}",
                          source=source) from None
    finally:
        loader.dispose()


_TOO_DEEP = "values nest too deep (Sidekiq's JSON parser stops at 100 levels)"


def _unreadable(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):  # PyYAML < 6.0.4 recurses until Python stops it
        return _TOO_DEEP
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def _expanded_size(root: yaml.Node) -> int:
    """How many values the node graph holds once every alias is written out.

    Aliases share node objects, so the size of each distinct node is computed once
    (iteratively: deep nesting must not exhaust Python's stack) and a shared node counts
    once per reference. Stops counting past the limit.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being counted: a path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _children(node)
        if children_done:
            open_.discard(id(node))
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[id(node)] = min(total, MAX_EXPANDED_NODES + 1)
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_:
            raise ConfigError("a YAML alias refers to a value that contains it (a recursive "
                              "structure), which JSON cannot carry")
        open_.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
