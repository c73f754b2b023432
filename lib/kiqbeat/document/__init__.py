"""Schedule documents (DESIGN §5): read → convert → validate, the same for every source.

- `read`: bytes or text into plain values (size, encoding, BOM, YAML aliases, duplicates);
- `convert`: other tools' files (sidekiq-scheduler, sidekiq-cron, GoodJob, Solid Queue: `detect`,
  `sidekiq`, `rails`) into kiqbeat's form, with warnings where the meaning changes;
- `validate`: kiqbeat's form into a `Config`, every problem reported at once, driven by the
  field table in `fields`, each job checked by `jobs` as it will be pushed;
- `sources`: where documents and Redis URLs come from (files, S3, SSM, AppConfig, Secrets).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from kiqbeat.core.schedule import Config
from kiqbeat.document.convert import convert
from kiqbeat.document.imported import KIQBEAT, ImportOptions
from kiqbeat.document.read import parse, read_file
from kiqbeat.document.validate import validate
from kiqbeat.errors import ConfigError


def load_config_text(data: bytes | str, *, source: str = "",
                     options: ImportOptions | None = None,
                     now: datetime | None = None) -> Config:
    """The validated Config of a YAML or JSON document in any supported format (`now`: as
    `parse_config`)."""
    doc, duplicates = parse(data, source)
    return parse_config(doc, source=source, problems=duplicates, options=options, now=now)


def load_config_file(path: str | Path, options: ImportOptions | None = None,
                     now: datetime | None = None) -> Config:
    """The validated Config of a schedule file (`options`: how to import another tool's;
    `now`: as `parse_config`)."""
    source = str(path)
    data = read_file(source)
    return load_config_text(data, source=source, options=options, now=now)


def parse_config(doc: object, *, source: str = "", problems: Sequence[str] = (),
                 options: ImportOptions | None = None, now: datetime | None = None) -> Config:
    """The validated Config of an already decoded document in any supported format.

    Another tool's file is converted first (`options` say how); its errors name the tool.
    Given `now` (an import a person reads: `kiqbeat validate`, `next`, `schedules
    import`), it also warns where daylight saving makes the tool's fire times differ from
    kiqbeat's in the 12 months after `now`; without it (an invocation: time is an
    argument, and a cold one should not run that comparison per schedule) it does not.
    """
    if doc is None:
        raise ConfigError("the document is empty; expected a mapping with 'schedules:'",
                          source=source)
    converted = convert(doc, options, source=source, now=now)
    try:
        return validate(converted.document, source=source,
                        problems=[*problems, *converted.problems], warnings=converted.warnings)
    except ConfigError as exc:
        if converted.format == KIQBEAT:
            raise
        where = f"{source} " if source else ""
        raise ConfigError(exc.problems, source=f"{where}(read as a {converted.tool} file)"
                          ) from None
