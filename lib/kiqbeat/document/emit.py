"""Another tool's schedule file written as a kiqbeat document (`kiqbeat convert`).

The file is read exactly as `kiqbeat validate` reads it (`convert`, then `validate`), so the
document fires at the instants the import does; it is written as YAML with:

- a top-level `time_zone` (the app's zone given, else UTC), so that a schedule added to it
  later runs in the zone the others do;
- every warning of the import kept as a comment: one naming a schedule beside it, the
  others at the head of the file;
- kiqbeat's own fields the caller chooses: `catch_up` for every schedule that sets none,
  and a document-wide `dst` (`fugit` keeps the tool's daylight-saving instants, and so
  drops the warnings about them).

The text written is validated again before it is returned: a conversion that would not
`validate` is an error, never a file.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from kiqbeat.core.dst import CRON, dst_policy
from kiqbeat.document.convert import convert
from kiqbeat.document.fields import CATCH_UP
from kiqbeat.document.imported import KIQBEAT, ImportOptions
from kiqbeat.document.read import parse
from kiqbeat.document.validate import validate
from kiqbeat.errors import ConfigError, shown

_WIDTH = 96
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class Emitted:
    """A converted document's text, with how many schedules and warnings it holds."""

    text: str
    schedules: int
    warnings: int


def kiqbeat_document(data: bytes | str, *, source: str = "",
                     options: ImportOptions | None = None, now: datetime | None = None,
                     catch_up: str | None = None, dst: str | None = None) -> Emitted:
    """Another tool's file (`data`) as the text of a kiqbeat document (YAML) that fires as
    its import does, its warnings as comments; ConfigError when it does not import (the
    messages `validate` gives) or is already kiqbeat's.

    `catch_up` is written into every schedule that sets none; `dst` ('cron' or 'fugit')
    becomes the document's `dst:`. `now` starts the 12 months searched for
    daylight-saving differences, as for `validate`.
    """
    if catch_up is not None and catch_up not in CATCH_UP:
        raise ConfigError(f"--catch-up {shown(catch_up)} is not one of {', '.join(CATCH_UP)}")
    policy = None if dst is None else dst_policy(dst)
    doc, duplicates = parse(data, source)
    if doc is None:
        raise ConfigError("the document is empty: nothing to convert", source=source)
    converted = convert(doc, options, source=source, now=now)
    if converted.format == KIQBEAT and not converted.problems:
        raise ConfigError("already a kiqbeat document: nothing to convert (kiqbeat validate "
                          "checks it)", source=source)
    where = f"{source} (read as a {converted.tool} file)" if source else ""
    config = validate(converted.document, source=where,
                      problems=[*duplicates, *converted.problems], warnings=converted.warnings)
    schedules: dict[str, Any] = dict(converted.document.get("schedules") or {})
    head = [f"A kiqbeat document converted by `kiqbeat convert` from {source or 'a file'}, "
            f"a {converted.tool} file. It fires as the import does; each warning of the "
            "import is kept as a comment."]
    warnings = list(config.warnings)  # the conversion's and the validation's
    if catch_up is not None:
        schedules = {name: ({**entry, "catch_up": catch_up} if isinstance(entry, dict)
                            and "catch_up" not in entry else entry)
                     for name, entry in schedules.items()}
        warnings = [w for w in warnings if not _about(w, "catch-up: ")]
        head.append(f"catch_up: {catch_up} is written into every schedule that set none "
                    f"(--catch-up {catch_up}).")
    if policy is not None and policy != CRON:
        # Under the tool's own reading, its daylight-saving differences are gone.
        warnings = [w for w in warnings if ": daylight saving: " not in w]
        head.append(f"dst: {policy.written} keeps {converted.tool}'s daylight-saving "
                    f"instants (--dst {dst}).")
    by_schedule: dict[str, list[str]] = {name: [] for name in schedules}
    for warning in warnings:
        owner = next((n for n in schedules if _about(warning, f"schedule {shown(n)}")), None)
        if owner is None:
            head.append(f"warning: {warning}")
        else:
            by_schedule[owner].append(warning)
    top: dict[str, Any] = {"time_zone": converted.document.get("time_zone", "UTC")}
    if policy is not None:
        top["dst"] = policy.written
    lines = [*_comment(head, ""), _dump(top).rstrip("\n"), "schedules:" if schedules
             else "schedules: {}"]
    for name, entry in schedules.items():
        lines.extend(_comment([f"warning: {w}" for w in by_schedule[name]], "  "))
        lines.append(textwrap.indent(_dump({name: entry}), "  ").rstrip("\n"))
    text = "\n".join(lines) + "\n"
    redone, problems = parse(text, source)
    validate(redone if isinstance(redone, Mapping) else {}, source=f"{source} (converted)",
             problems=problems)
    return Emitted(text, len(schedules), len(warnings))


def _about(warning: str, start: str) -> bool:
    """True when `warning` (perhaps prefixed with the tool's name) starts with `start`."""
    return warning.split(" import: ", 1)[-1].startswith(start) or warning.startswith(start)


def _comment(texts: list[str], indent: str) -> list[str]:
    out = []
    for text in texts:
        out.extend(textwrap.wrap(text, _WIDTH - len(indent), initial_indent=f"{indent}# ",
                                 subsequent_indent=f"{indent}#   ", break_long_words=False,
                                 break_on_hyphens=False))
    return out


def _dump(value: object) -> str:
    return str(yaml.dump(value, Dumper=_DUMPER, sort_keys=False, allow_unicode=True,
                         default_flow_style=False, width=_WIDTH))
