"""Schedule documents (DESIGN §5): read → convert → validate, the same for every source.

- `read`: bytes or text into plain values (size, encoding, BOM, YAML aliases, duplicates);
- `convert`: other tools' files (sidekiq-scheduler, sidekiq-cron, GoodJob, Solid Queue: `detect`,
  `sidekiq`, `rails`) into kiqbeat's form, with warnings where the meaning changes;
- `validate`: kiqbeat's form into a `Config`, every problem reported at once, driven by the
  field table in `fields`, each job checked by `jobs` as it will be pushed;
- `sources`: where documents and Redis URLs come from (files, S3, SSM, AppConfig, Secrets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kiqbeat.core.schedule import Config
from kiqbeat.document.imported import KIQBEAT, SIDEKIQ_CRON, ImportOptions
from kiqbeat.document.read import parse
from kiqbeat.errors import ConfigError, shown

# Converting and validating are imported where they run, not here: a module of this package
# imported for itself (the engine's `validate.read_definition`, `fingerprint`) loads no
# importer of other tools' files (and `read` loads PyYAML only for a YAML document).


def load_config_text(data: bytes | str, *, source: str = "",
                     options: ImportOptions | None = None,
                     now: datetime | None = None) -> Config:
    """The validated Config of a YAML or JSON document in any supported format (`now`: as
    `parse_config`)."""
    doc, duplicates = parse(data, source)
    return parse_config(doc, source=source, warnings=duplicates, options=options, now=now)


def parse_config(doc: object, *, source: str = "", problems: Sequence[str] = (),
                 warnings: Sequence[str] = (), options: ImportOptions | None = None,
                 now: datetime | None = None) -> Config:
    """The validated Config of an already decoded document in any supported format.

    Another tool's file is converted first (`options` say how); its errors name the tool.
    Given `now` (an import a person reads: `kiqbeat validate`, `next`, `schedules
    import`), it also warns where daylight saving makes the tool's fire times differ from
    kiqbeat's in the 12 months after `now`; without it (an invocation: time is an
    argument, and a cold one should not run that comparison per schedule) it does not.
    `problems` and `warnings` are the reading's (a repeated key is a warning).
    """
    from kiqbeat.document.convert import convert
    from kiqbeat.document.validate import validate

    if doc is None:
        raise ConfigError("the document is empty; expected a mapping with 'schedules:'",
                          source=source)
    converted = convert(doc, options, source=source, now=now)
    try:
        return validate(converted.document, source=source,
                        problems=[*problems, *converted.problems],
                        warnings=[*warnings, *converted.warnings])
    except ConfigError as exc:
        if converted.format == KIQBEAT:
            raise
        where = f"{source} " if source else ""
        raise ConfigError(exc.problems, source=f"{where}(read as a {converted.tool} file)"
                          ) from None


CHECKED_FORMATS = (KIQBEAT, SIDEKIQ_CRON)


@dataclass(frozen=True)
class Checked:
    """One definition as `kiqbeat validate` reads it: its problems, its warnings, and the
    kiqbeat definition it converts to (None when it converts to none)."""

    problems: list[str]
    warnings: list[str]
    definition: dict[str, Any] | None


def check_definition(name: str, definition: Mapping[str, Any], fmt: str = KIQBEAT, *,
                     app_zone: str | None = None, now: datetime | None = None) -> Checked:
    """One schedule read as `kiqbeat validate` reads a file holding it alone, with the same
    messages; nothing is written.

    `fmt` is "kiqbeat" (a definition in a document's schedule form) or "sidekiq-cron" (one
    job hash as sidekiq-cron stores it in Redis, `sidekiq.stored_cron_job`, read by the
    sidekiq-cron importer: fugit's readings, daylight saving in the 12 months after `now`
    when given, the zone a zone-less cron ran in — `app_zone`, the zone sidekiq-cron read
    crons in); the warning on how a file was recognised is left out, the format being
    given. ConfigError when `fmt` or `app_zone` is not one kiqbeat knows.
    """
    from kiqbeat.document import sidekiq  # another tool's job only
    from kiqbeat.document.convert import convert
    from kiqbeat.document.validate import validate

    if fmt not in CHECKED_FORMATS:
        raise ConfigError(f"format {shown(fmt)} must be one of "
                          f"{', '.join(map(repr, CHECKED_FORMATS))}")
    doc: object
    if fmt == SIDEKIQ_CRON:
        doc = [{**sidekiq.stored_cron_job(dict(definition)), "name": name}]
    else:
        doc = {"schedules": {name: dict(definition)}}
    converted = convert(doc, ImportOptions(format=fmt, app_zone=app_zone), now=now)
    if fmt != KIQBEAT:  # its first warning tells how a file was recognised: not asked here
        converted.warnings[:] = converted.warnings[1:]
    if converted.options.format is None:  # the options themselves were refused
        raise ConfigError(converted.problems)
    schedules = converted.document.get("schedules")
    out = schedules.get(name) if isinstance(schedules, dict) else None
    try:
        config = validate(converted.document, problems=converted.problems,
                          warnings=converted.warnings)
    except ConfigError as exc:
        return Checked(list(exc.problems), list(converted.warnings),
                       out if isinstance(out, dict) else None)
    return Checked([], list(config.warnings), out if isinstance(out, dict) else None)
