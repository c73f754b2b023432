"""What every import of another tool's file shares: the tools' names, the import options,
the result of a conversion, and the readings every tool's entries go through.

- A natural-language schedule (fugit's `every day at 3am`) becomes the cron fugit makes of
  it, with a warning showing the translation (`core.natural`).
- Keys the tool itself ignores are ignored, listed once per file in a warning (with a
  did-you-mean hint when one looks like a typo of a key the tool reads), never refused.
- A per-job zone key (`tz`, `timezone`, `time_zone`) that the tool ignores is ignored too,
  with a warning saying so; `honour_tz` (`--honour-tz`) applies it as kiqbeat's `tz`.
- A value written as a Ruby symbol (`queue: :critical`) is its name (`critical`): all four
  tools load their files with Ruby's YAML, and Sidekiq and ActiveJob turn a symbol queue,
  class or argument into its name (`ruby_values`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiqbeat.errors import ConfigError, did_you_mean, shown

KIQBEAT = "kiqbeat"
SIDEKIQ_SCHEDULER = "sidekiq-scheduler"
SIDEKIQ_CRON = "sidekiq-cron"
GOOD_JOB = "good_job"
SOLID_QUEUE = "solid_queue"
FORMATS = (SIDEKIQ_CRON, SIDEKIQ_SCHEDULER, GOOD_JOB, SOLID_QUEUE, KIQBEAT)
TOOLS = {SIDEKIQ_CRON: "sidekiq-cron", SIDEKIQ_SCHEDULER: "sidekiq-scheduler",
         GOOD_JOB: "GoodJob", SOLID_QUEUE: "Solid Queue", KIQBEAT: "kiqbeat"}
# Per-job zone keys seen in sidekiq-cron and sidekiq-scheduler files; neither gem reads them.
ZONE_KEYS = ("tz", "timezone", "time_zone")
# kiqbeat's own schedule fields, which no other tool has: kept when a sidekiq-cron or
# sidekiq-scheduler file carries them (the tool ignored them), with a warning saying so, so
# that `catch_up: latest` or `dst: fugit` added to the file before moving does what it says.
KIQBEAT_OWN_KEYS = ("catch_up", "dst", "lookahead", "timestamp_format", "start_at", "end_at",
                    "max_runs", "jitter", "overlap", "except")
# The `kiqbeat:` mapping a foreign file may carry to say how to import it (flags win).
OPTION_KEYS = ("format", "section", "app_zone", "honour_tz")


@dataclass(frozen=True)
class ImportOptions:
    """How to read another tool's file: which tool (None: detect), which per-environment
    section, the app's zone for zone-less crons, and whether to apply per-job zone keys."""

    format: str | None = None
    section: str | None = None
    app_zone: str | None = None
    honour_tz: bool = False

    def merged(self, value: object) -> tuple[ImportOptions, list[str]]:
        """These options completed by a document's `kiqbeat:` mapping (these win), and its
        problems."""
        if not isinstance(value, dict):
            return self, [f"top-level key 'kiqbeat': expected a mapping of import options "
                          f"({', '.join(OPTION_KEYS)}), got {shown(value)}"]
        problems = [f"kiqbeat: unknown import option {shown(k)}"
                    + (did_you_mean(k, OPTION_KEYS) if isinstance(k, str) else "")
                    for k in value if k not in OPTION_KEYS]
        given: dict[str, Any] = {}
        for key in ("format", "section", "app_zone"):
            if key in value and not isinstance(value[key], str):
                problems.append(f"kiqbeat: {key} {shown(value[key])} must be a string")
            elif key in value:
                given[key] = value[key]
        if "honour_tz" in value and not isinstance(value["honour_tz"], bool):
            problems.append(f"kiqbeat: honour_tz {shown(value['honour_tz'])} must be true or "
                            "false")
        elif "honour_tz" in value:
            given["honour_tz"] = value["honour_tz"]
        return ImportOptions(
            format=self.format or given.get("format"),
            section=self.section or given.get("section"),
            app_zone=self.app_zone or given.get("app_zone"),
            honour_tz=self.honour_tz or bool(given.get("honour_tz"))), problems


class RubySymbol(str):
    """An unquoted YAML value starting with ':' (`:critical`), which Ruby's YAML loader reads
    as the Symbol `critical`; kiqbeat's own documents read it as the text it is."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The symbol's name, as Ruby's `to_s` gives it (Psych drops the first ':')."""
        return str(self[1:])


def strip_symbol(key: object) -> object:
    """Ruby symbol keys (`:schedule:`) are plain strings in YAML; read them without the ':'."""
    return key[1:] if isinstance(key, str) and key.startswith(":") else key


def ruby_values(value: object) -> object:
    """`value` with each Ruby symbol (`:critical`, a `RubySymbol`) replaced by its name, as
    Sidekiq (`queue.to_s`) and JSON (`:a.to_json` is `"a"`) read it."""
    if isinstance(value, RubySymbol):
        return value.name
    if isinstance(value, dict):
        return {k: ruby_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ruby_values(v) for v in value]
    return value


def check_format(fmt: str) -> str:
    """A format name given by the user; ConfigError listing the names."""
    if fmt not in FORMATS:
        raise ConfigError(f"format {shown(fmt)} is not one of {', '.join(FORMATS)}"
                          f"{did_you_mean(fmt, FORMATS)}")
    return fmt


@dataclass
class Converted:
    """A document in kiqbeat's form, with what the conversion changed or could not keep."""

    format: str
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    options: ImportOptions = field(default_factory=ImportOptions)
    # key -> schedules whose entry had it: keys the tool ignores, reported once per file.
    ignored: dict[str, list[str]] = field(default_factory=dict)
    kept: dict[str, list[str]] = field(default_factory=dict)  # kiqbeat's own keys
    hints: list[str] = field(default_factory=list)  # formats the file's wrapper names

    @property
    def tool(self) -> str:
        """The name of the tool whose file this is."""
        return TOOLS[self.format]

    def ignore(self, name: object, key: object) -> None:
        """Record that the tool ignores `key` in schedule `name`'s entry."""
        self.ignored.setdefault(str(key), []).append(str(name))

    def keep(self, name: object, key: object) -> None:
        """Record that kiqbeat keeps its own field `key` of schedule `name`'s entry, which
        the tool ignored."""
        self.kept.setdefault(str(key), []).append(str(name))

    def report_kept(self) -> None:
        """One warning listing kiqbeat's own fields kept though the tool ignored them."""
        if not self.kept:
            return
        parts = [f"{shown(key)} ({', '.join(map(shown, names[:3]))}"
                 f"{', ...' if len(names) > 3 else ''})" for key, names in self.kept.items()]
        self.warnings.append(f"kiqbeat's own keys kept, though {self.tool} ignored them: "
                             + "; ".join(parts) + " (kiqbeat applies them; the file means "
                             f"the same to {self.tool} as without them)")

    def report_ignored(self, known: tuple[str, ...]) -> None:
        """One warning listing the keys the tool ignored, with typo hints against `known`."""
        if not self.ignored:
            return
        parts = []
        for key, names in self.ignored.items():
            listed = ", ".join(map(shown, names[:3])) + (", ..." if len(names) > 3 else "")
            parts.append(f"{shown(key)}{did_you_mean(key, known)} ({listed})")
        self.warnings.append(f"{self.tool} ignores these keys, so kiqbeat does too: "
                             + "; ".join(parts))

    def report_unqueued(self, names: list[str], how: str) -> None:
        """One warning for the jobs whose queue the tool took from their class (`how`)."""
        if names:
            listed = ", ".join(map(shown, names[:5])) + (", ..." if len(names) > 5 else "")
            self.warnings.append(
                f"{len(names)} job(s) without a queue ({listed}): {self.tool} enqueued them on "
                f"{how}, which kiqbeat cannot read; they go to 'default' unless you add queue:")

    def zone_key(self, label: str, key: str, value: object, converted: dict[str, Any]) -> None:
        """A per-job zone key the tool ignores: kept ignored (the tool's reading), or applied
        as `tz` when the import options say so."""
        if self.options.honour_tz:
            converted["tz"] = value
            self.warnings.append(
                f"{label}: {key} {shown(value)} applied as kiqbeat's tz (honour_tz); "
                f"{self.tool} ignored it and read the cron in the app's zone")
            return
        self.warnings.append(
            f"{label}: {key} {shown(value)} ignored, as {self.tool} ignores it (its crons "
            "run in the app's zone unless the cron string ends with a zone); kiqbeat kept "
            f"{self.tool}'s reading. To apply it, pass --honour-tz (or honour_tz: true under "
            "a top-level kiqbeat: key), or append the zone to the cron")

    def timer(self, label: str, value: object, *, translate: bool = True) -> object:
        """A cron value as the tool reads it: natural language becomes fugit's cron, with
        a warning showing the translation; None, with a problem, when kiqbeat cannot
        translate it or (`translate=False`) the tool does not read natural language. A cron
        in a form fugit reads and kiqbeat's grammar lacks (`@noon`, hour 24, `+09:00`) is
        rewritten to the same instants, with a warning (`core.fugit.fugit_cron`)."""
        # Imported here: only another tool's file needs them, and an invocation reading
        # kiqbeat's own document should not pay for loading them (DESIGN §7, the cold path).
        from kiqbeat.core.fugit import fugit_cron
        from kiqbeat.core.natural import is_natural, natural_cron

        if not isinstance(value, str) or not value.strip():
            return value
        if not is_natural(value):
            rewritten, notes = fugit_cron(value)
            if notes:
                self.warnings.append(f"{label}: {self.tool} (fugit) reads the cron "
                                     f"{shown(value)} as {rewritten!r}, which kiqbeat uses: "
                                     + "; ".join(notes))
            return rewritten
        try:
            reading = natural_cron(value)
        except ConfigError as exc:
            self.problems.extend(f"{label} (field 'cron'): {p}" for p in exc.problems)
            return None
        if not translate:
            self.problems.append(
                f"{label} (field 'cron'): {shown(value)} is natural language, which "
                f"{self.tool}'s cron reader (rufus-scheduler) refuses too; fugit's "
                f"natural-language reader would make it {reading.cron!r}: write that")
            return None
        note = f" ({reading.note})" if reading.note else ""
        self.warnings.append(f"{label}: {shown(value)} is natural language; {self.tool} "
                             f"(fugit) reads it as the cron {reading.cron!r}, which kiqbeat "
                             f"uses{note}")
        return reading.cron
