"""The YAML half of `read.parse` (read.py says what a document's reading promises): a safe
loader that keeps the last of a repeated key, as Ruby's Psych does, and reports each repeat;
reads Ruby `:symbol:` keys as plain strings, an unquoted `:critical` as a `RubySymbol`, and
dates as text; counts the values an alias expands to before anything is built. Imported by
`read.parse` when a document is YAML, so that nothing else loads PyYAML.
"""

from __future__ import annotations

from typing import Any

import yaml

from kiqbeat.document.imported import RubySymbol, strip_symbol
from kiqbeat.errors import ConfigError

MAX_EXPANDED_NODES = 5_000_000
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available


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


def read_yaml(text: str, source: str) -> tuple[object, list[str]]:
    """The values of a YAML text and its repeated keys (`read.parse`'s reply); ConfigError."""
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
            raise ConfigError(f"the YAML cannot be read safely{where}: {TOO_DEEP}",
                              source=source) from None
        what = "; ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"invalid YAML{where}: {what}", source=source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from exc
    except ConfigError:
        raise
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, 3,000 [[[
        raise ConfigError(f"the YAML cannot be read safely: {unreadable(exc)}",
                          source=source) from None
    finally:
        loader.dispose()


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


TOO_DEEP = "values nest too deep (Sidekiq's JSON parser stops at 100 levels)"


def unreadable(exc: BaseException) -> str:
    """Why a value cannot be read safely, for a message (JSON's as well as YAML's)."""
    if isinstance(exc, RecursionError):  # PyYAML < 6.0.4 recurses until Python stops it
        return TOO_DEEP
    return f"{type(exc).__name__}: {str(exc)[:120]}"
