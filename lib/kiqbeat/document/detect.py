"""Which tool wrote a schedule file, and where in it the jobs are.

The jobs of another tool's file may sit under per-environment sections (Rails' `config_for`
style: `development:` / `production:`, often sharing an `&anchor`) or under one wrapping key
(`cron_jobs:`, `:cron:`, `good_job: cron:`). `--section NAME` picks a section; without it, a
file whose top-level keys look like environments is refused with a message suggesting it. A
single wrapping key is unwrapped, with a warning.

The tool is then told by what the file says it is (`:scheduler:` / `:schedule:`, a name such
as `recurring.yml` or `good_job_cron.yml`) and by its entries' keys:

- `schedule` or `command`: Solid Queue's `recurring.yml`;
- `kwargs`, `set` or `enabled_by_default`: GoodJob's `config.good_job.cron`;
- `every`, `at`, `in`, `interval`, `enabled`, `include_metadata`, `rails_env`, a cron with
  rufus options, or a job without `class`: sidekiq-scheduler (which takes the name as the
  class, where sidekiq-cron refuses the job);
- `klass`, `status`, `active_job`, `date_as_argument`, `queue_name_prefix`, ...: sidekiq-cron;
- `cron` and `class` alone fit several tools: sidekiq-cron, which the warning names, saying
  how to choose another (`--format`).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from kiqbeat.document.fields import KIQBEAT_MARKERS
from kiqbeat.document.imported import (
    GOOD_JOB,
    KIQBEAT,
    SIDEKIQ_CRON,
    SIDEKIQ_SCHEDULER,
    SOLID_QUEUE,
    TOOLS,
    Converted,
)
from kiqbeat.errors import did_you_mean, shown

_JOB_MARKERS = ("cron", "class", "klass", "every", "schedule", "command", "at", "in",
                "interval")
_SOLID_QUEUE_ONLY = ("schedule", "command", "priority")
_GOOD_JOB_ONLY = ("kwargs", "set", "enabled_by_default")
_SCHEDULER_ONLY = ("every", "at", "in", "interval", "include_metadata", "enabled", "rails_env")
_CRON_ONLY = ("klass", "status", "active_job", "date_as_argument", "queue_name_prefix",
              "queue_name_delimiter", "symbolize_args", "message", "source",
              "last_enqueue_time")
# Names Rails apps give their environments (config_for sections); `default` and `shared`
# hold the anchors the others merge.
ENVIRONMENTS = frozenset({
    "development", "test", "production", "staging", "default", "defaults", "shared", "qa",
    "sandbox", "preview", "review", "uat", "demo", "local", "ci", "integration", "preprod",
    "preproduction", "stage", "prod", "dev"})


def is_job(entry: object) -> bool:
    """True when `entry` looks like one job of some tool (a mapping with a timer or class)."""
    # A job's timer or class is a string (or a list: rufus options), never a mapping: a
    # `cron:` holding a mapping is a wrapper of jobs (`good_job: cron: {...}`).
    return isinstance(entry, dict) and any(
        k in entry and not isinstance(entry[k], dict) for k in _JOB_MARKERS)


def _looks_like_jobs(doc: object) -> bool:
    """A mapping of names to mappings (or empty entries), at least one a job (a paused
    sidekiq-scheduler entry may have no timer)."""
    return (isinstance(doc, dict) and bool(doc)
            and all(isinstance(v, dict) or v is None for v in doc.values())
            and any(is_job(v) for v in doc.values()))


def environments(doc: dict[Any, Any]) -> list[str]:
    """The top-level keys that look like per-environment sections (mappings, not jobs)."""
    return [k for k, v in doc.items() if isinstance(k, str) and k.lower() in ENVIRONMENTS
            and (v is None or (isinstance(v, dict) and not is_job(v)))]


def locate(doc: object, out: Converted) -> object:
    """The part of `doc` that holds the jobs: the chosen section, or inside one wrapping key;
    problems and warnings go to `out`."""
    section = out.options.section
    if section is not None:
        if not isinstance(doc, dict) or section not in doc:
            keys = ", ".join(map(shown, list(doc)[:10])) if isinstance(doc, dict) else "none"
            out.problems.append(f"no section {shown(section)} in the file (its top-level keys: "
                                f"{keys})")
            return {}
        doc = doc[section]
        if doc is None:
            return {}
    if not isinstance(doc, dict) or any(k in doc for k in KIQBEAT_MARKERS):
        return doc
    if section is None:
        envs = environments(doc)
        if envs and len(envs) >= len(doc) - 1:
            choice = "production" if "production" in envs else envs[-1]
            out.problems.append(
                f"the top-level keys {', '.join(map(shown, envs))} look like per-environment "
                f"sections; choose the one to import with --section {choice} (or "
                f"section: {choice} under a top-level kiqbeat: key)")
            return {}
    for _ in range(2):  # `good_job: {cron: {...}}` is two wrappers deep
        if len(doc) != 1:
            break
        ((key, inner),) = doc.items()
        nested = isinstance(inner, dict) and len(inner) == 1 and _looks_like_jobs(
            next(iter(inner.values())))
        if key in ("scheduler", "schedule") or is_job(inner) or (
                isinstance(key, str) and did_you_mean(key, KIQBEAT_MARKERS)) or not (
                isinstance(inner, list) or _looks_like_jobs(inner) or nested):
            break
        out.warnings.append(f"the jobs were read from under the single top-level key "
                            f"{shown(key)}")
        if isinstance(key, str) and key.lower() in ("good_job", "goodjob"):
            out.hints.append(GOOD_JOB)
        doc = inner
        if not isinstance(doc, dict):
            break
    return doc


def detect_format(doc: object, source: str = "", hints: tuple[str, ...] = ()) -> tuple[str, str]:
    """Which tool wrote `doc` (decoded YAML/JSON), and why that one."""
    if isinstance(doc, list):
        return SIDEKIQ_CRON, "a list of jobs"
    if not isinstance(doc, dict) or any(k in doc for k in KIQBEAT_MARKERS):
        return KIQBEAT, ""
    if isinstance(doc.get("scheduler"), dict) or isinstance(doc.get("schedule"), dict):
        return SIDEKIQ_SCHEDULER, "its :scheduler: / :schedule: section"
    if not _looks_like_jobs(doc):
        return KIQBEAT, ""
    entries = [e for e in doc.values() if isinstance(e, dict)]  # an empty entry is None

    def has(keys: tuple[str, ...]) -> str | None:
        return next((k for e in entries for k in keys if k in e), None)

    for fmt, only in ((SOLID_QUEUE, _SOLID_QUEUE_ONLY), (GOOD_JOB, _GOOD_JOB_ONLY),
                      (SIDEKIQ_SCHEDULER, _SCHEDULER_ONLY)):  # in this order: the first wins
        if key := has(only):
            return fmt, f"its jobs' {key!r} key"
    if any(isinstance(e.get("cron"), list) for e in entries):
        return SIDEKIQ_SCHEDULER, "a cron with rufus options"
    # Only entries with a timer count: a mapping that merely holds YAML anchors
    # (`x-defaults: &defaults {queue: low}`) has no class in any tool's file.
    if any("class" not in e and "klass" not in e and is_job(e) for e in entries):
        return SIDEKIQ_SCHEDULER, "jobs without 'class' (sidekiq-scheduler takes the name)"
    if key := has(_CRON_ONLY):
        return SIDEKIQ_CRON, f"its jobs' {key!r} key"
    name = PurePosixPath(source.split("?")[0]).name.lower()
    if GOOD_JOB in hints or "good_job" in name or "goodjob" in name:
        return GOOD_JOB, "its name"
    if name.startswith("recurring"):
        return SOLID_QUEUE, "its name"
    return SIDEKIQ_CRON, (f"jobs with cron and class only, which {TOOLS[GOOD_JOB]} files have "
                          "too; pass --format good_job if it is one")
