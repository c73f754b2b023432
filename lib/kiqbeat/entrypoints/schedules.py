"""`kiqbeat schedules`: the schedule store (DESIGN §7) from the shell, over `kiqbeat.store`.

One schedule at a time: `add`, `put`, `update` (a definition in a document's schedule form,
from --json-definition or a YAML/JSON --file), `pause`, `resume`, `remove`, `get`, `list`.
In bulk: `import` and `export`, in either of two forms:

- a document (YAML or JSON; kiqbeat's, sidekiq-scheduler's or sidekiq-cron's), read and
  checked exactly as `kiqbeat validate` reads it, so a file that validates imports, and a
  file with a problem imports nothing and lists every problem at once;
- JSON Lines, one `{"name": ..., "definition": {...}}` a line (`--jsonl`, or a .jsonl or
  .ndjson file): read a line at a time, written a batch at a time, so memory grows only
  with the names kept to catch one given twice (about 100 bytes each); a bad line is
  listed while the good ones are written. A document is limited to 32 MiB (about 300,000
  schedules) and is read whole; JSON Lines is the form for generated tables and for
  moving a store from one Redis to another (`export --jsonl` writes it).

Every command takes the engine's flags (the store's Redis, namespace and shard count) and
`--json`. Messages are the document's: a definition is checked as a document's schedule is.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from kiqbeat.core.limits import (
    MAX_DEFINITION_BYTES,
    MAX_DEFINITION_FILE_BYTES,
)
from kiqbeat.document import load_config_text
from kiqbeat.document.fields import BY_NAME
from kiqbeat.document.imported import ImportOptions
from kiqbeat.document.jobs import MAX_JOB_BYTES
from kiqbeat.document.read import MAX_DOCUMENT_BYTES, decode, parse
from kiqbeat.entrypoints.common import (
    opened_engine,
    print_outcome,
    print_warnings,
    progress_bar,
    store_flags,
)
from kiqbeat.entrypoints.operations import run_request
from kiqbeat.entrypoints.preview import add_import_flags, import_options
from kiqbeat.errors import (
    ConfigError,
    foreign_json,
    is_plain,
    json_name,
    shown,
    shown_name,
)

if TYPE_CHECKING:  # the engine and the store when a command runs, not to parse its flags
    from kiqbeat.engine import Engine
    from kiqbeat.store import ImportResult, Store

# A JSON line holds one definition, whose job is at most MAX_JOB_BYTES; twice that leaves
# room for escapes, and bounds what one bad line can make the command hold.
MAX_LINE_BYTES = 2 * MAX_JOB_BYTES
STDIN = "-"
# Document-wide settings that belong to a deployment, not to any one schedule.
_DEPLOYMENT_KEYS = ("missed_jobs_window", "sidekiq_scheduler_ui", "wait_replicas",
                    "wait_timeout")
_DEPLOYMENT_ATTRIBUTES = ("missed_jobs_window_s", "sidekiq_scheduler_ui", "wait_replicas",
                          "wait_timeout_s")
FORCE_HELP = ("whatever source the schedule names: for a definition whose source is no "
              "document the store knows (written by hand), or a document no longer applied")
_SHOWN_PROBLEMS = 20  # listed by the plain summary; --json lists every one
EXPORT_PAGE = 1000  # schedules per YAML dump call


def _dumper() -> Any:
    """PyYAML's dumper (libyaml's when available), loaded by the commands that write YAML."""
    import yaml

    return getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@contextmanager
def _opened(path: str) -> Iterator[IO[bytes]]:
    """A file (or stdin, for '-') to read bytes from."""
    if path == STDIN:
        with open(sys.stdin.fileno(), "rb", closefd=False) as stream:
            yield stream
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 (closed below; errors named first)
    except FileNotFoundError:
        raise ConfigError("file not found", source=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=path) from exc
    with stream:
        yield stream


def _read_bytes(path: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A file's bytes (or stdin's), at most one past `limit`."""
    with _opened(path) as stream:
        return stream.read(limit + 1)


def _read_definition_file(path: str) -> bytes:
    """The bytes of a file holding one definition, refused past MAX_DEFINITION_FILE_BYTES
    before anything is parsed (a huge file would otherwise cost several times its size)."""
    data = _read_bytes(path, MAX_DEFINITION_FILE_BYTES)
    if len(data) > MAX_DEFINITION_FILE_BYTES:
        raise ConfigError(f"the file is over {MAX_DEFINITION_FILE_BYTES:,} bytes, more than "
                          f"any definition can be (at most {MAX_DEFINITION_BYTES:,} bytes as "
                          "stored); keep large data out of a schedule (its args carry an id, "
                          "the data lives elsewhere); it was not parsed, and nothing was written",
                          source=path)
    return data


def _json_value(data: bytes | str, where: str) -> object:
    """JSON, read as documents are (encoding, control characters, duplicate keys), never
    as YAML: malformed JSON is reported as such, not read with YAML's other meanings."""
    try:
        json.loads(data)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                          source=where) from None
    except (ValueError, RecursionError):
        pass  # not UTF-8, too deep, a huge integer: `parse` says which
    return _value(data, where)


def _value(data: bytes | str, where: str) -> object:
    value, duplicates = parse(data, where)
    if duplicates:  # a document keeps the last with a warning; a definition given here is
        # one value written by a program, so a repeat is refused rather than guessed at
        raise ConfigError([d.partition(";")[0] + "; a definition may not repeat a key"
                           for d in duplicates], source=where)
    return value


def _definition(args: argparse.Namespace) -> Any:
    if args.json_definition is not None:
        return _json_value(args.json_definition, "--json-definition")
    return _value(_read_definition_file(args.file), args.file)


# ---------------------------------------------------------------------------- one at a time


def _cmd_write(args: argparse.Namespace) -> int:
    args.definition = _definition(args)  # as the request's "definition" field
    return run_request(args.action, args)


def _cmd_list(args: argparse.Namespace) -> int:
    from kiqbeat.entrypoints.outcomes import Outcome

    if args.count < 1 or args.cursor < 0:
        raise ConfigError("--count must be at least 1 and --cursor at least 0")
    with opened_engine(args) as engine:
        cursor, rows = engine.store().list(args.cursor, args.count)
    lines = [r.line() for r in rows]
    lines.append(f"... more: --cursor {cursor}" if cursor else "(end of the store)")
    return print_outcome(Outcome({"cursor": cursor, "schedules": [r.as_dict() for r in rows]},
                                 lines), args.json)


# ---------------------------------------------------------------------------- calendars


def _cmd_calendar(args: argparse.Namespace) -> int:
    """calendar set, get, list, remove: the store's calendars (`Store.put_calendar`, ...);
    exit 1 when a set left a schedule naming the calendar unrewritten."""
    from kiqbeat.entrypoints.outcomes import Outcome

    with opened_engine(args) as engine:
        store = engine.store()
        if args.note:
            store = store.acting(store.actor, note=args.note)
        verb = args.calendar_action
        if verb == "set":
            change = store.put_calendar(args.name, args.dates)
            lines = [f"calendar {shown(change.name)}: {change.dates:,} date(s); "
                     f"{change.rewritten:,} schedule(s) rewritten with them, "
                     f"{change.unchanged:,} had them already"]
            lines += [f"not rewritten: {shown_name(n)}: {why}"
                      for n, why in change.not_rewritten[:_SHOWN_PROBLEMS]]
            done = Outcome(change.as_dict(), lines, code=1 if change.not_rewritten else 0)
        elif verb == "get":
            dates = store.calendar(args.name)
            if dates is None:
                raise ConfigError(f"no calendar {shown(args.name)} in the store; its "
                                  f"calendars: {', '.join(sorted(store.calendars())) or 'none'}")
            text = [d.isoformat() for d in dates]
            done = Outcome({"calendar": args.name, "dates": text},
                           [f"{args.name}: {' '.join(text) or '(no dates)'}"])
        elif verb == "list":
            held = store.calendars_text()
            done = Outcome({"calendars": held}, [f"{name}: {len(dates):,} date(s)"
                                                 for name, dates in sorted(held.items())]
                           or ["(no calendars in the store)"])
        else:
            removed = store.remove_calendar(args.name)
            done = Outcome({"calendar": args.name, "removed": removed},
                           [f"calendar {shown(args.name)} "
                            f"{'removed' if removed else 'was not in the store'}"])
    return print_outcome(done, args.json)


# ---------------------------------------------------------------------------- in bulk


def _is_jsonl(args: argparse.Namespace) -> bool:
    return bool(args.jsonl) or args.file.endswith((".jsonl", ".ndjson"))


def _lines(stream: IO[bytes]) -> Iterator[bytes | None]:
    """The stream's lines, each None when longer than MAX_LINE_BYTES (skipped to its end)."""
    while line := stream.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


class _NotPlain(Exception):
    """A JSON object with a duplicate key or a Ruby symbol key: for the full reader."""


def _plain_object(items: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(items)
    # A key twice, or a Ruby symbol key (':name', which the full reader strips): only a key
    # below ';' can start with ':', so the keys are looked at one by one only then.
    if len(value) != len(items) or (value and min(value) < ";"
                                    and any(key[:1] == ":" for key in value)):
        raise _NotPlain
    return value


_decode_plain = json.JSONDecoder(object_pairs_hook=_plain_object).decode
# A byte outside printable ASCII, tab and line ends: a line without one is text `decode`
# passes as it is (no byte-order mark, no control character), and is not handed to it.
_NOT_ASCII_TEXT = re.compile(rb"[^\t\n\r\x20-\x7e]")


def _plain_line(line: bytes, where: str) -> object:
    """A JSON line's value, read as `_json_value` reads it: a plain object (no duplicate nor
    symbol keys) with one decode, anything else through `_json_value` (and its messages)."""
    if _NOT_ASCII_TEXT.search(line) is None:
        text = line.decode("ascii")
    else:
        try:
            text = decode(line, where)  # UTF-8, no control characters: as the full reader
        except ConfigError:
            return _json_value(line, where)  # with its message
    if text.lstrip().startswith("{"):
        try:
            return _decode_plain(text)
        except (_NotPlain, ValueError, RecursionError):
            pass
    return _json_value(line, where)


def _entry(line: bytes | None, where: str) -> tuple[str, Any]:
    """The name and definition a JSON line holds; ConfigError saying what is wrong."""
    if line is None:
        raise ConfigError(f"longer than {MAX_LINE_BYTES:,} bytes", source=where)
    value = _plain_line(line, where)
    if not isinstance(value, dict) or set(value) != {"name", "definition"}:
        raise ConfigError('expected an object {"name": ..., "definition": {...}}, got '
                          f"{shown(value, 80)}", source=where)
    name = value["name"]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"'name' must be a non-empty string, got {shown(name)}", source=where)
    return name, value["definition"]


def _jsonl_items(stream: IO[bytes], invalid: list[tuple[str, str]],
                 skipped: Callable[[int], None]) -> Iterator[tuple[str, Any]]:
    """The schedules of a JSON Lines stream; bad lines go to `invalid`, blank ones are passed.

    A name given twice keeps its first line, as a document keeps the first of a duplicate
    key, and the later ones are listed.
    """
    seen: set[str] = set()  # about 100 bytes a name: 100 MB for a million
    for number, line in enumerate(_lines(stream), start=1):
        where = f"line {number}"
        if line is not None and not line.strip():
            skipped(1)
            continue
        try:
            name, definition = _entry(line, where)
        except ConfigError as exc:
            invalid.append((where, f"{where}: " + "; ".join(exc.problems)))
            skipped(1)
            continue
        if name in seen:
            invalid.append((name, f"{where}: schedule {shown(name)} is on an earlier line "
                                  "too; the first is kept"))
            skipped(1)
            continue
        seen.add(name)
        yield name, definition


def _count_lines(path: str) -> int | None:
    """How many lines a file holds (a progress bar's total); None for stdin."""
    if path == STDIN:
        return None
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count, last = count + chunk.count(b"\n"), chunk[-1:]
    return count + (last != b"\n")


def _document_items(engine: Engine, store: Store, path: str,
                    options: ImportOptions | None = None) -> list[tuple[str, Any]]:
    """The schedules of a document, checked as `kiqbeat validate` checks it (`options`:
    how to read another tool's file, as its flags say)."""
    now = datetime.now(UTC)  # daylight-saving differences an import warns about: from now
    if path == STDIN:
        config = load_config_text(_read_bytes(path), source="<stdin>", now=now,
                                  options=options)
    else:
        config = engine.sources.load_config(path, now=now, options=options)
    if config.namespace and config.namespace != store.namespace:
        raise ConfigError(f"the document's namespace {config.namespace!r} is not the store's "
                          f"{store.namespace!r}; pass --namespace {config.namespace!r} to "
                          "import into that one", source=path)
    print_warnings(config.warnings)
    ignored = [key for key, attribute in zip(_DEPLOYMENT_KEYS, _DEPLOYMENT_ATTRIBUTES,
                                             strict=True)
               if getattr(config, attribute) != BY_NAME[key].default]
    if ignored:
        print_warnings([f"{path}: {', '.join(ignored)} not imported: settings of a deployment (its "
               "document or KIQBEAT_* variables), not of a schedule"])
    return [(s.name, s.definition) for s in config.schedules]


def _cmd_import(args: argparse.Namespace) -> int:
    show = not (args.json or args.no_progress) and sys.stderr.isatty()
    invalid_lines: list[tuple[str, str]] = []
    with opened_engine(args) as engine, ExitStack() as stack:
        store = engine.store()
        if _is_jsonl(args):
            stream = stack.enter_context(_opened(args.file))
            progress = stack.enter_context(progress_bar(show, lambda: _count_lines(args.file),
                                                        " schedules"))
            items: Iterable[tuple[str, Any]] = _jsonl_items(stream, invalid_lines, progress)
        else:
            documents = _document_items(engine, store, args.file, import_options(args))
            progress = stack.enter_context(progress_bar(show, lambda: len(documents), " schedules"))
            items = documents
        result = store.import_definitions(items, replace=not args.no_replace,
                                          progress=progress)
    result.invalid[:0] = invalid_lines
    return _import_summary(args, result)


def _import_summary(args: argparse.Namespace, result: ImportResult) -> int:
    from kiqbeat.entrypoints.outcomes import Outcome

    # Under --no-replace, a schedule that exists is kept by request, not refused.
    kept = [n for n, why in result.refused if args.no_replace and why == "exists"]
    refused = [(n, why) for n, why in result.refused if not (args.no_replace and why == "exists")]
    failed = len(result.invalid) + len(refused)
    lines = [f"{args.file}: {result.written:,} written, {result.unchanged:,} unchanged, "
             + (f"{len(kept):,} kept (they exist; --no-replace), " if args.no_replace else "")
             + f"{len(result.invalid):,} invalid, {len(refused):,} refused"]
    for label, rows in (("invalid", result.invalid), ("refused", refused)):
        lines += [f"{label}: {shown_name(name)}: {why}" if label == "refused"
                  else f"{label}: {why}" for name, why in rows[:_SHOWN_PROBLEMS]]
        if len(rows) > _SHOWN_PROBLEMS:
            lines.append(f"... {len(rows) - _SHOWN_PROBLEMS:,} more {label} (--json lists all)")
    return print_outcome(Outcome(
        {"file": args.file, "written": result.written, "unchanged": result.unchanged,
         "kept": len(kept),
         "invalid": [{**json_name(n), "why": why} for n, why in result.invalid],
         "refused": [{**json_name(n), "why": why} for n, why in refused]}, lines,
        problems=[f"{failed:,} schedules not imported (invalid or refused); the others were"]
        if failed else [], code=1 if failed else 0), args.json)


def _yaml_page(page: dict[str, Any]) -> str:
    """A page of schedules as a `schedules:` YAML document. Text that would not show as
    itself (controls, bidi controls, lone surrogates from JSON escapes) makes the page
    dumped with every non-ASCII character escaped: lossless, and safe on a terminal."""
    import yaml

    document = {"schedules": page}
    try:
        text: str = yaml.dump(document, Dumper=_dumper(), sort_keys=False, allow_unicode=True,
                              width=1 << 20)
    except UnicodeEncodeError:  # libyaml takes UTF-8 only: a lone surrogate
        text = ""
    if text and is_plain(text.replace("\n", "")):
        return text
    return str(yaml.dump(document, Dumper=yaml.SafeDumper, sort_keys=False,
                         allow_unicode=False, width=1 << 20))


class _ExportZone:
    """An exported document's top-level `time_zone`, decided once every definition has been
    seen (it is written last): the zone most of them name (`tz`), so that a schedule added
    to the file later runs in it — unless one whose zone matters (a cron, an `except`)
    names none, and so runs in UTC, or no zone is named more often than every other: then
    UTC. Every definition keeps its own `tz`, so the choice changes none's meaning."""

    def __init__(self) -> None:
        self.zones: dict[str, int] = {}
        self.bare = False

    def see(self, definition: dict[str, Any]) -> dict[str, Any]:
        """Count `definition`'s zone; return it unchanged."""
        tz, cron = definition.get("tz"), definition.get("cron")
        if isinstance(tz, str):
            self.zones[tz] = self.zones.get(tz, 0) + 1
        elif "except" in definition or (isinstance(cron, str) and not _names_zone(cron)):
            self.bare = True
        return definition

    @property
    def zone(self) -> str:
        """The zone to write."""
        counts = sorted(self.zones.values(), reverse=True)
        if self.bare or not counts or counts[1:2] == counts[:1]:  # none, or a tie
            return "UTC"
        return max(self.zones, key=self.zones.__getitem__)


def _names_zone(cron: str) -> bool:
    """True when the cron string ends with its own zone (which no time_zone overrides)."""
    from kiqbeat.core.cron import parse_cron

    try:
        return parse_cron(cron, "Etc/GMT-14").zone_name != "Etc/GMT-14"
    except ConfigError:
        return False


def _cmd_export(args: argparse.Namespace) -> int:
    """Print every definition that can be exported; name on stderr those that cannot, once
    the rest is written, and then exit 1: a backup is never silently short. A document
    (YAML, --json) ends with its `time_zone` (`_ExportZone`)."""
    import yaml

    write = sys.stdout.write
    passed: list[tuple[str, str]] = []
    zone = _ExportZone()
    with opened_engine(args) as engine:
        # One HSCAN page at a time: memory stays bounded.
        items = ((name, zone.see(d)) for name, d in engine.store().export(passed))
        if args.jsonl:
            for name, definition in items:
                write(foreign_json({"name": name, "definition": definition}) + "\n")
        elif args.json:
            write('{"schedules": {')
            separator = "\n  "
            for name, definition in items:
                write(f"{separator}{foreign_json(name)}: {foreign_json(definition)}")
                separator = ",\n  "
            write("}" if separator == "\n  " else "\n}")
            write(f', "time_zone": {foreign_json(zone.zone)}}}\n')
        else:
            # libyaml pays a set-up cost per call: dump a page of schedules at a time, each
            # page a `schedules:` document whose first line is written once.
            write("schedules:")
            empty = True
            while page := dict(itertools.islice(items, EXPORT_PAGE)):
                text = _yaml_page(page)
                write(text.removeprefix("schedules:" if empty else "schedules:\n"))
                empty = False
            write(" {}\n" if empty else "")
            write(yaml.dump({"time_zone": zone.zone}, Dumper=_dumper()))
    sys.stdout.flush()
    for name, why in passed[:_SHOWN_PROBLEMS]:
        print(f"kiqbeat: not exported: {shown_name(name)}: {why}", file=sys.stderr)
    if len(passed) > _SHOWN_PROBLEMS:
        print(f"kiqbeat: ... and {len(passed) - _SHOWN_PROBLEMS:,} more not exported",
              file=sys.stderr)
    if passed:
        print(f"kiqbeat: {len(passed):,} schedule(s) not exported; every other one was",
              file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------- the parser


def add_parser(sub: Any) -> None:
    """Register `kiqbeat schedules ACTION` on the command's subparsers."""
    p = sub.add_parser("schedules", help="add, change, pause, resume, remove, list, import "
                                         "and export the schedules in the store")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str, func: Callable[[argparse.Namespace], int] | None = None,
               named: bool = True) -> argparse.ArgumentParser:
        """An action's parser; without `func`, a request (remove, pause, resume, skip, get,
        reindex) read into the model the Lambda's events are read into, and run by the
        same code (kiqbeat.entrypoints.outcomes)."""
        q: argparse.ArgumentParser = actions.add_parser(name, help=help)
        if named:
            q.add_argument("name", metavar="NAME", help="the schedule's name")
        store_flags(q)
        q.set_defaults(func=func or partial(run_request, name))
        return q

    for name, help in (("add", "add a schedule (refused when one of that name exists)"),
                       ("put", "add a schedule or replace the one of that name"),
                       ("update", "replace a schedule (refused when there is none)")):
        q = action(name, help, _cmd_write)
        given = q.add_mutually_exclusive_group(required=True)
        given.add_argument("--json-definition", metavar="JSON",
                           help='the definition, e.g. \'{"cron": "0 9 * * *", "class": '
                                '"DigestWorker", "args": [42]}\'')
        given.add_argument("--file", metavar="FILE",
                           help="a YAML or JSON file holding the definition ('-': stdin)")
        if name != "add":
            q.add_argument("--force-owner", action="store_true", help=FORCE_HELP)
    q = action("remove", "remove a schedule and forget its state")
    q.add_argument("--force-owner", action="store_true", help=FORCE_HELP)
    q = action("pause", "push nothing for a schedule until resumed, or until --until; "
               "--note says why (shown by status, get and the console)")
    q.add_argument("--until", metavar="ISO", help="resume by itself after this instant (ISO "
                   "8601 with its offset, after now); nothing of the pause is backfilled")
    action("resume", "push a paused schedule's ticks again, from its next one")
    q = action("skip", "skip a schedule's next tick(s): not pushed, shown as skipped in its "
                       "history, not recorded as missed")
    q.add_argument("--count", metavar="N", help="how many of its next ticks (default 1)")
    action("get", "a schedule's definition and state")
    q = action("list", "one page of schedules (HSCAN order)", _cmd_list, named=False)
    q.add_argument("--cursor", type=int, default=0, help="where the page starts (default 0)")
    q.add_argument("--count", type=int, default=100, help="about how many (default 100)")
    action("reindex", "after changing the shard count (--shard-count N, or --shard I/N, any "
                      "I; neither: the count recorded): move every index entry to its shard of "
                      "N; and rescore entries scored past the year 9999 (never planned) to be "
                      "planned", named=False)
    q = actions.add_parser("calendar", help="the store's calendars, which 'except' may name "
                                            "in the schedules written here")
    verbs = q.add_subparsers(dest="calendar_action", required=True, metavar="VERB")
    for verb, help in (("set", "set a calendar's dates, and rewrite the schedules naming it"),
                       ("get", "a calendar's dates"), ("list", "every calendar"),
                       ("remove", "remove a calendar no schedule names")):
        c = verbs.add_parser(verb, help=help)
        if verb != "list":
            c.add_argument("name", metavar="NAME", help="the calendar's name")
        if verb == "set":
            c.add_argument("dates", nargs="*", metavar="DATE",
                           help="its dates, YYYY-MM-DD (none: an empty calendar)")
        store_flags(c)
        c.set_defaults(func=_cmd_calendar)
    q = action("import", "write many schedules: a document, or JSON Lines", _cmd_import,
               named=False)
    q.add_argument("file", metavar="FILE",
                   help="a YAML/JSON document (kiqbeat, sidekiq-scheduler or sidekiq-cron), "
                        'or JSON Lines of {"name": ..., "definition": {...}} (\'-\': stdin)')
    q.add_argument("--jsonl", action="store_true",
                   help="FILE is JSON Lines (the default for .jsonl and .ndjson files)")
    q.add_argument("--no-replace", action="store_true",
                   help="keep schedules that exist as they are (default: replace them)")
    q.add_argument("--no-progress", action="store_true",
                   help="draw no progress bar (none is drawn with --json or off a terminal)")
    add_import_flags(q)
    q = action("export", "print every stored definition: a kiqbeat document (YAML, or JSON "
                         "with --json) or JSON Lines", _cmd_export, named=False)
    q.add_argument("--jsonl", action="store_true", help="JSON Lines, as import reads them")
