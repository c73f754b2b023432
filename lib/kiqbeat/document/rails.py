"""GoodJob cron entries and Solid Queue recurring tasks, converted to kiqbeat's form.

Both enqueue ActiveJob jobs, so a converted job is pushed in Sidekiq's ActiveJob envelope
(`active_job: true`) and runs through the app's `perform`, as the Sidekiq adapter runs it.
Both read their schedules with fugit (`Fugit.parse`: a cron, or natural language) in the
Rails app's `config.time_zone`.

GoodJob (`config.good_job.cron`, bensheldon/good_job `app/models/good_job/cron_entry.rb`):
`cron`, `class`, `args` (splatted: a list), `kwargs` (keyword arguments), `set` (`queue`
is read; `priority`, `wait` and the rest have no Sidekiq meaning and are ignored with a
warning), `description`, `enabled_by_default: false` (a paused schedule).

Solid Queue (`config/recurring.yml`, rails/solid_queue
`app/models/solid_queue/recurring_task.rb`): `class`, `schedule`, `args` (a list, or one
value; a hash at the end is keyword arguments), `queue`, `priority` (ignored, with a
warning), `description`. A `command:` task evaluates Ruby in the app, which kiqbeat cannot
do: refused, naming the task, except Solid Queue's own housekeeping (`SolidQueue::Job.
clear_finished_in_batches`, in Rails 8's generated file), which has no use once jobs run on
Sidekiq: skipped, with a warning. An entry without `schedule` (or empty) is skipped, as
Solid Queue skips it.

Keyword arguments are written as ActiveJob writes them, a last hash marked with
`_aj_ruby2_keywords`, so `perform(name:)` receives them; any other hash in the arguments
is marked with `_aj_symbol_keys`, as both tools hand the job Symbol keys (Solid Queue
`deep_symbolize_keys` its file, GoodJob's YAML comes through Rails' `config_for`). A
Solid Queue `args:` that is a hash (Solid Queue passes `Array(hash)`, key-value pairs) is
refused, saying to write a list. A job without a queue went to its
class's `queue_as`, which kiqbeat cannot see; it goes to `default`, with one warning.
"""

from __future__ import annotations

from typing import Any

from kiqbeat.document.imported import Converted
from kiqbeat.errors import shown

GOOD_JOB_KEYS = ("cron", "class", "args", "kwargs", "set", "description",
                 "enabled_by_default")
SOLID_QUEUE_KEYS = ("class", "command", "schedule", "args", "queue", "priority",
                    "description")
# Where a job without a queue went: one warning names these jobs (`Converted.report_unqueued`).
CLASS_QUEUE = "their class's queue_as"
_KEYWORDS = "_aj_ruby2_keywords"
_SYMBOL_KEYS = "_aj_symbol_keys"


def active_job_keywords(kwargs: dict[Any, Any]) -> dict[Any, Any]:
    """Keyword arguments as ActiveJob serializes them (a hash that lists its keyword keys),
    their values as `symbolized` (every caller's tool symbolizes keys deeply)."""
    return {**symbolized(kwargs, mark=False), _KEYWORDS: [str(k) for k in kwargs]}


def symbolized(value: object, *, mark: bool = True, deep: bool = True) -> Any:
    """`value` with each hash in it (itself too, when `mark`) written as ActiveJob writes a
    hash with Symbol keys, listing them under `_aj_symbol_keys`, so the job's `perform`
    reads `options[:status]` as it did: Solid Queue (`deep_symbolize_keys`) and Rails'
    `config_for` (GoodJob) hand the job Symbol keys; without the list it gets String keys.
    Not `deep`: only the hashes in a list (sidekiq-cron's `symbolize_args`)."""
    if isinstance(value, dict):
        inner = {k: symbolized(v) for k, v in value.items()} if deep else dict(value)
        return {**inner, _SYMBOL_KEYS: [str(k) for k in value]} if mark and value else inner
    if isinstance(value, list):
        return [symbolized(v, deep=deep) for v in value]
    return value


def _common(name: object, entry: dict[Any, Any], timer_key: str, out: Converted,
            unqueued: list[str]) -> dict[str, Any] | None:
    label = f"schedule {shown(name)}"
    if timer_key not in entry:
        out.problems.append(f"{label}: missing {timer_key!r} ({out.tool} needs one)")
        return None
    cron = out.timer(label, entry[timer_key])
    if cron is None:
        return None
    converted: dict[str, Any] = {"cron": cron, "active_job": True}
    if "class" in entry:
        converted["class"] = entry["class"]
    if entry.get("description") is not None:
        converted["description"] = entry["description"]
    unqueued.append(str(name))  # until the caller finds its queue
    return converted


def from_good_job(name: object, entry: dict[Any, Any], out: Converted,
                  unqueued: list[str]) -> dict[str, Any] | None:
    """A GoodJob cron entry in kiqbeat's form (None when it cannot be read)."""
    label = f"schedule {shown(name)}"
    settings = entry.get("set") or {}
    if not isinstance(settings, dict):
        out.problems.append(f"{label} (field 'set'): {shown(settings)} must be a mapping "
                            "(queue, priority, ...)")
        return None
    converted = _common(name, entry, "cron", out, unqueued)
    if converted is None:
        return None
    if settings.get("queue") is not None:
        converted["queue"] = settings["queue"]
        unqueued.remove(str(name))
    for key in entry:
        if key not in GOOD_JOB_KEYS:
            out.ignore(name, key)
    other = [k for k in settings if k != "queue"]
    if other:
        out.warnings.append(f"{label}: set {', '.join(map(shown, other))} ignored: Sidekiq "
                            "jobs have no priority, and kiqbeat pushes each tick when due")
    args = entry.get("args")
    if isinstance(args, dict):
        out.problems.append(f"{label} (field 'args'): {shown(args)} is a hash; GoodJob "
                            "splats args (*args), so give a list, and keyword arguments as "
                            "kwargs")
        return None
    args = [] if args is None else symbolized(args) if isinstance(args, list) else [args]
    kwargs = entry.get("kwargs")
    if kwargs:
        if not isinstance(kwargs, dict):
            out.problems.append(f"{label} (field 'kwargs'): {shown(kwargs)} must be a mapping")
            return None
        args.append(active_job_keywords(kwargs))
    if args:
        converted["args"] = args
    if entry.get("enabled_by_default") is False:
        converted["enabled"] = False
        out.warnings.append(f"{label}: enabled_by_default: false becomes enabled: false; "
                            "GoodJob's dashboard switch (kept in its database) is not read")
    return converted


def from_solid_queue(name: object, entry: dict[Any, Any], out: Converted,
                     unqueued: list[str]) -> dict[str, Any] | None:
    """A Solid Queue recurring task in kiqbeat's form (None when it cannot be read)."""
    label = f"schedule {shown(name)}"
    if "schedule" not in entry:
        # SolidQueue::Configuration#recurring_tasks keeps only entries with a schedule.
        out.warnings.append(f"{label}: skipped: it has no schedule, so Solid Queue did not "
                            "load it either (a holder of YAML anchors?)")
        return None
    command = entry.get("command")
    if "class" not in entry and isinstance(command, str) and command.lstrip(
            ":").startswith("SolidQueue::"):
        out.warnings.append(
            f"{label}: skipped: its command {shown(command)} is Solid Queue's own "
            "housekeeping (Rails' default recurring.yml has one), which has nothing to do "
            "once the jobs run on Sidekiq")
        return None
    if "command" in entry:
        out.problems.append(
            f"{label}: Solid Queue's command: {shown(entry['command'])} evaluates Ruby in the "
            "app, which kiqbeat cannot do (it pushes jobs); move the command into a job "
            "class and give class:")
        return None
    converted = _common(name, entry, "schedule", out, unqueued)
    if converted is None:
        return None
    if "queue" in entry:
        converted["queue"] = entry["queue"]
        unqueued.remove(str(name))
    for key in entry:
        if key not in SOLID_QUEUE_KEYS:
            out.ignore(name, key)
    if entry.get("priority") is not None:
        out.warnings.append(f"{label}: priority {shown(entry['priority'])} ignored: Sidekiq "
                            "jobs have no priority")
    args = entry.get("args")
    if isinstance(args, dict):
        # RecurringTask::Arguments.dump writes Array(args): a list of [key, value] pairs.
        out.problems.append(
            f"{label} (field 'args'): {shown(args)} is a hash, which Solid Queue turns into "
            "a list of [key, value] pairs (Array(hash)) passed as positional arguments; for "
            "keyword arguments write args: [{...}] (a list whose last item is the hash)")
        return None
    if args is not None:
        args = list(args) if isinstance(args, list) else [args]
        keywords = args.pop() if args and isinstance(args[-1], dict) else None
        args = symbolized(args)
        if keywords is not None:  # Solid Queue passes a last hash as keywords
            args.append(active_job_keywords(keywords))
        converted["args"] = args
    return converted
