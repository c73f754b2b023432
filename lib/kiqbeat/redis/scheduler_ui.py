"""sidekiq-scheduler's Recurring Jobs tab (DESIGN §4 `sidekiq_scheduler_ui`), and living beside it.

Pure functions: they build the hash fields the engine writes and read the fields it fetched;
the Redis I/O belongs to the engine's read pipeline and push step.

What the tab reads, from sidekiq-scheduler's source (github.com/sidekiq-scheduler/
sidekiq-scheduler: `redis_manager.rb`, `schedule.rb`, `scheduler.rb`, `job_presenter.rb`,
`web.rb` and `web/views/recurring_jobs.erb`, read in the 3.x-5.x versions, the newest with
Sidekiq 8 support in `web.rb`; these keys and formats did not change across them). Every
key goes through `Sidekiq.redis`, so a Sidekiq 6 app using redis-namespace sees them under
its prefix: `ns` below.

- `schedules` (hash): schedule name -> `JSON.generate(spec)`. `Sidekiq.schedule!` does
  `JSON.parse` on every value (one bad value breaks the whole tab). The tab shows
  `spec['description']`, `spec['class']`, `spec['args']`, the interval
  (`spec['cron'] || spec['interval'] || spec['every'] || ...`) and `spec.fetch('queue',
  'default')`. Written here: `class`, `queue`, `args`, `description`, `enabled`, one of
  `cron` / `every`, and `"kiqbeat": true` so kiqbeat's entries can be told from
  sidekiq-scheduler's own (the tab ignores the key).
- `sidekiq-scheduler:states` (hash): name -> `JSON.generate({"enabled" => bool})`. Only the
  tab's Enable/Disable button writes it (`toggle_job_enabled`); a job is enabled when
  `state.fetch('enabled', spec.fetch('enabled', true))`. kiqbeat never writes it (writing
  would erase the button's choice) and reads it with that same rule: the button wins over
  the file, in both directions, as it does for sidekiq-scheduler.
- `sidekiq-scheduler:last_times`, `sidekiq-scheduler:next_times` (hashes): name -> a time
  string that `Time.parse` reads. sidekiq-scheduler stores rufus' `EoTime#to_s`,
  `"%Y-%m-%d %H:%M:%S %z"`; kiqbeat writes the same shape in UTC
  (`"2026-05-01 09:00:00 +0000"`). last = the newest tick pushed, next = the next tick.

Keys a *live* sidekiq-scheduler leaves, used by `coexistence_problems`:
`sidekiq-scheduler:pushed:<name>` (sorted set of pushed instants, re-expired 24 h after each
push: it exists iff sidekiq-scheduler pushed that job in the last 24 h), its own entries in
`schedules`, and `schedules_changed` (sorted set of edits, never expires).

In Exq's namespace the `schedules` hash is exq-scheduler's (github.com/activesphere/
exq-scheduler, `lib/exq_scheduler/storage.ex`, `Storage.persist_schedule`, read in its
storage module's versions since 2018): at every start it HSETs each configured job into
`<exq ns>:schedules` (JSON of description, queue, class, name, cron, args,
include_metadata, enabled, retry) and its toggle into `<exq ns>:sidekiq-scheduler:states`
(older versions: `<its own ns>:states`); it also keeps `last_times`, `next_times`,
`first_runs`, `last_runs` hashes there and takes one `<exq ns>:enqueued_jobs:<md5>:<time>`
lock per push. It never writes `sidekiq-scheduler:pushed:*` nor `schedules_changed`, and it
runs only the jobs of its own config (`Scheduler.Server.update_schedules`), never other
entries of the hash. So an entry kiqbeat did not write is exq-scheduler's there, and
sidekiq-scheduler's anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kiqbeat.core.cron import Cron
from kiqbeat.core.lifecycle import OneShot, base
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.core.zones import zone_key
from kiqbeat.errors import shown
from kiqbeat.redis import keys

# Marks a `schedules` entry as written by kiqbeat; sidekiq-scheduler's tab ignores it.
MARKER = "kiqbeat"
TIME_FORMAT = "%Y-%m-%d %H:%M:%S +0000"
# Exq's default namespace `exq`, as Exq's `full_key` joins it ("exq:queue:default"): the
# namespace where `schedules` belongs to exq-scheduler (module docstring).
EXQ_NAMESPACE = "exq:"


def schedules_owner(ns: str) -> str:
    """The tool whose `schedules` entries those are under namespace `ns`, when not kiqbeat's."""
    return "exq-scheduler" if ns == EXQ_NAMESPACE else "sidekiq-scheduler"


def time_text(instant: datetime) -> str:
    """An instant as sidekiq-scheduler stores times: `Time.parse`-able, UTC, whole seconds."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"instant must be an aware datetime, got naive {instant!r}")
    return instant.astimezone(UTC).strftime(TIME_FORMAT)


def schedule_spec(schedule: Schedule) -> dict[str, Any]:
    """The decoded `schedules` value for one schedule, as the tab lists it."""
    spec: dict[str, Any] = {}
    timetable = base(schedule.timetable)  # the tab shows the cron under start/end/except
    if isinstance(timetable, Cron):
        # fugit (the tab's reader) knows IANA names and offsets, not Rails names
        spec["cron"] = f"{timetable.expr} {zone_key(timetable.zone_name)}"
    elif isinstance(timetable, OneShot):
        spec["at"] = time_text(timetable.at)  # sidekiq-scheduler's own one-shot key
    else:
        spec["every"] = schedule.timing.removeprefix("every ").strip() or timetable.key
    spec["class"] = schedule.job_class
    spec["queue"] = schedule.queue
    spec["args"] = list(schedule.args)
    if schedule.description:
        spec["description"] = schedule.description
    spec["enabled"] = schedule.enabled
    spec[MARKER] = True
    return spec


@dataclass(frozen=True)
class UiFields:
    """Hash fields to HSET in one invocation (field -> value), per key; states is never written."""

    schedules: dict[str, str] = field(default_factory=dict)
    last_times: dict[str, str] = field(default_factory=dict)
    next_times: dict[str, str] = field(default_factory=dict)


def ui_fields(
    schedules: Iterable[Schedule],
    last_ticks: Mapping[str, datetime],
    next_ticks: Mapping[str, datetime],
) -> UiFields:
    """What to write for the tab: each of `schedules`' spec, and the times known for each.

    `last_ticks`: schedule name -> newest tick pushed (only schedules that pushed now or
    whose last tick is known); `next_ticks`: name -> its next tick after this invocation.
    """
    out = UiFields()
    for schedule in schedules:
        name = schedule.name
        out.schedules[name] = json.dumps(schedule_spec(schedule), separators=(",", ":"),
                                         ensure_ascii=False)
        if name in last_ticks:
            out.last_times[name] = time_text(last_ticks[name])
        if name in next_ticks:
            out.next_times[name] = time_text(next_ticks[name])
    return out


def stale_names(specs: Mapping[str, str | bytes], config: Config) -> list[str]:
    """Entries kiqbeat wrote in `schedules` whose schedule is gone from the config (to HDEL).

    `specs`: the whole `schedules` hash (HGETALL). Only marked entries are returned, never
    sidekiq-scheduler's own. Call it with the whole config, not one shard's: each shard
    would otherwise delete the others' entries.
    """
    names = {s.name for s in config.schedules}
    return sorted(n for n, v in specs.items() if n not in names and _is_kiqbeat(v))


def read_toggles(raw_states: Mapping[str, str | bytes | None]) -> tuple[dict[str, bool], list[str]]:
    """The tab's toggle per schedule name (only names that have one), and warnings for garbage.

    `raw_states`: name -> the `sidekiq-scheduler:states` value (HMGET of the config's names).
    A value the tab would not have written is ignored with a warning, not an error: the
    toggle is an override, and the file's `enabled` still applies without it.
    """
    toggles: dict[str, bool] = {}
    warnings: list[str] = []
    for name, raw in raw_states.items():
        if raw is None:
            continue
        try:
            state = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            state = None
        if not isinstance(state, dict):
            warnings.append(f"schedule {shown(name)}: ignoring sidekiq-scheduler:states value "
                            f"{shown(raw)}: expected JSON such as {{\"enabled\":false}}")
            continue
        enabled = state.get("enabled")
        if isinstance(enabled, bool):
            toggles[name] = enabled
        elif "enabled" in state:
            warnings.append(f"schedule {shown(name)}: ignoring sidekiq-scheduler:states "
                            f"'enabled' {shown(enabled)}: expected true or false")
    return toggles, warnings


def with_toggles(config: Config, toggles: Mapping[str, bool]) -> Config:
    """The config with each schedule's `enabled` replaced by the tab's toggle where one is set.

    Same rule as sidekiq-scheduler's `job_enabled?`: the toggle wins over the file. A
    disabled schedule's watermark still moves, so re-enabling it does not backfill.
    """
    changed = tuple(
        replace(s, enabled=toggles[s.name]) if s.name in toggles and toggles[s.name] != s.enabled
        else s
        for s in config.schedules
    )
    return replace(config, schedules=changed)


def coexistence_problems(
    config: Config,
    *,
    specs: Mapping[str, str | bytes | None],
    pushed_recently: Mapping[str, bool],
    cron_jobs: Mapping[str, bool],
) -> list[str]:
    """Why kiqbeat must not run beside what it found of another scheduler running its jobs.

    A `schedules` entry kiqbeat did not write is `schedules_owner`'s (sidekiq-scheduler's or
    exq-scheduler's); a `cron_job:<name>` hash is sidekiq-cron's.

    Inputs, all read in the engine's first round trip:
    - `specs`: `schedules` values: HMGET of the config's names, or HGETALL when
      `sidekiq_scheduler_ui` is on (then any foreign entry counts);
    - `pushed_recently`: name -> EXISTS `sidekiq-scheduler:pushed:<name>`;
    - `cron_jobs`: name -> EXISTS `cron_job:<name>` (sidekiq-cron's job hash).

    Empty list: safe. Otherwise each message names the schedule, the key, and the cleanup.
    Schedules under different names in the two tools cannot be detected; docs say so.
    """
    ns = config.namespace
    owner = schedules_owner(ns)
    where = ("config (`config :exq_scheduler, :schedules`) and restart it"
             if owner == "exq-scheduler" else "schedule")
    problems: list[str] = []
    names = [s.name for s in config.schedules]
    for name in names:
        if pushed_recently.get(name):
            problems.append(
                f"schedule {shown(name)}: sidekiq-scheduler pushed it within the last 24 h "
                f"({keys.pushed_key(ns, name)} exists), so it may still be running and would push "
                "every tick a second time. Remove the job from sidekiq-scheduler's schedule "
                f"and restart it (or stop it), then `DEL {keys.pushed_key(ns, name)}`")
        spec = specs.get(name)
        if spec is not None and not _is_kiqbeat(spec):
            problems.append(
                f"schedule {shown(name)}: {owner}'s schedule has a job of that name "
                f"(field of {keys.schedules_key(ns)}); running both would push it twice. Remove it "
                f"from {owner}'s {where}, then `HDEL {keys.schedules_key(ns)} {name}`")
        if cron_jobs.get(name):
            problems.append(
                f"schedule {shown(name)}: sidekiq-cron has a job of that name "
                f"({keys.cron_job_key(ns, name)}); "
                "its poller would push it as well. Remove it from sidekiq-cron "
                f"(Sidekiq::Cron::Job.destroy({name!r})) before kiqbeat schedules it")
    if config.sidekiq_scheduler_ui:
        foreign = sorted(n for n, v in specs.items()
                         if v is not None and n not in names and not _is_kiqbeat(v))
        if foreign:
            listed = ", ".join(map(shown, foreign[:5])) + (", ..." if len(foreign) > 5 else "")
            if owner == "exq-scheduler":
                why = ("exq-scheduler rewrites its entries there at every start, and the tab "
                       "would list and toggle both tools' jobs as one")
                cleanup = keys.schedules_key(ns)
            else:
                why = ("a running sidekiq-scheduler deletes entries it did not write and, "
                       "with dynamic: true, would load kiqbeat's entries and push them too")
                cleanup = f"{keys.schedules_key(ns)} {keys.schedules_changed_key(ns)}"
            problems.append(
                f"sidekiq_scheduler_ui: {keys.schedules_key(ns)} holds {owner}'s own jobs "
                f"({listed}): {why}. Use the tab with kiqbeat only once {owner} is gone: "
                f"remove it, then `DEL {cleanup}`")
    return problems


def _is_kiqbeat(raw: str | bytes | None) -> bool:
    if raw is None:
        return False
    try:
        spec = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(spec, dict) and spec.get(MARKER) is True
