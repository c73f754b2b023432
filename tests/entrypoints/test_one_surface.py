"""One operation surface: each operator request — status, the schedules changes, reindex —
read from a command line or from a Lambda event into one request model, checked and run by
the same code; and the shard count, one knob (--shard-count, KIQBEAT_SHARD_COUNT) for both."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from handler import app

from kiqbeat.entrypoints.requests import FIELDS
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys
from tests.support.aws import Context
from tests.support.cli import Kiqbeat

DIGEST = {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "DigestWorker", "args": [42]}
HOURLY = {"cron": "0 * * * *", "class": "HourlyWorker", "queue": "low"}
Invoke = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture
def invoke(kiqbeat: Kiqbeat) -> Iterator[Invoke]:
    """The real Lambda handler, in the environment the `kiqbeat` runner sets (the test's
    Redis, no document): an operator's event in, the function's answer out."""
    app.forget_warm()

    def run(event: dict[str, Any]) -> dict[str, Any]:
        return app.lambda_handler(event, Context())

    yield run
    app.forget_warm()


def snapshot(client: redis.Redis) -> dict[str, Any]:
    """Every key and its value, by type: what a write left in Redis (but the audit trail's
    stream and a pause record's who and when, which differ by entrypoint)."""
    held: dict[str, Any] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        if kind == "stream":
            continue
        held[key] = (client.hgetall(key) if kind == "hash" else
                     client.zrange(key, 0, -1, withscores=True) if kind == "zset" else
                     client.lrange(key, 0, -1) if kind == "list" else
                     client.smembers(key) if kind == "set" else client.get(key))
    for name, record in held.get(keys.paused(""), {}).items():
        held[keys.paused("")][name] = json.loads(record) | {"by": "", "at": 0}
    return held


def cli_args(kind: str, fields: dict[str, Any]) -> list[str]:
    """The command line of an event's request (`kiqbeat schedules put NAME --json-definition
    ...`, `kiqbeat status NAME ...`)."""
    argv = ["status"] if kind == "status" else ["schedules", kind]
    for key, value in fields.items():
        if key == "name":
            argv.append(value)
        elif key == "names":
            argv += value
        elif key == "definition":
            argv += ["--json-definition", json.dumps(value)]
        elif value is True:
            argv.append(FIELDS[kind][key])
        else:
            argv += [FIELDS[kind][key], str(value)]
    return argv


# The same request refused: as an event and as a command line, each naming a field its own
# way ({limit}: `--limit` / `the event's "limit"`); anything else in the message is the same.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("status", {"limit": 0}, "{limit}: expected a whole number of schedules, 1 to 10,000, "
                             "not 0"),
    ("status", {"limit": 10_001}, "{limit}: expected a whole number of schedules, 1 to "
                                  "10,000, not 10001"),
    ("status", {"offset": -1}, "{offset}: expected a whole number of schedules, 0 or more, "
                               "not -1"),
    ("status", {"names": ["nope"]}, "no schedule 'nope' in the store (kiqbeat:schedules)"),
    ("get", {"name": ""}, "{name}: expected a schedule name, not ''"),
    ("get", {"name": "x" * 131_073},
     "{name}: '" + "x" * 60 + "... is 131,073 characters, more than a request may give "
     "(131,072); kiqbeat writes no name over 1,000"),
    ("get", {"name": "nope"}, "no schedule 'nope' in the store (kiqbeat:schedules)"),
    ("pause", {"name": "nope"}, "no schedule 'nope' in the store (kiqbeat:schedules)"),
    ("resume", {"name": "nope"}, "no schedule 'nope' in the store (kiqbeat:schedules)"),
    ("update", {"name": "nope", "definition": DIGEST},
     "no schedule 'nope' in the store (kiqbeat:schedules)"),
    ("add", {"name": "hourly", "definition": DIGEST},
     "schedule 'hourly' exists; update or put it instead"),
    ("put", {"name": "x", "definition": [1]},
     "schedule 'x': a definition is a mapping of fields (cron, class, ...), got [1]"),
    ("put", {"name": "x", "definition": DIGEST | {"source": "s3://b/k"}},
     "schedule 'x': 'source' is kiqbeat's (who wrote the schedule), not a field to set"),
    ("put", {"name": "x", "definition": {"cron": "61 * * * *", "class": "W"}}, "CRON"),
]


@pytest.mark.parametrize(("kind", "fields", "message"), REFUSED,
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(REFUSED)])
def test_the_lambda_and_the_cli_refuse_the_same_requests_with_the_same_message(
    kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis, kind: str,
    fields: dict[str, Any], message: str,
) -> None:
    assert kiqbeat("schedules", "put", "hourly", "--json-definition", json.dumps(HOURLY)).code == 0
    before = snapshot(redis_client)
    cli = kiqbeat(*cli_args(kind, fields))
    assert cli.code == 1 and cli.out == ""
    with pytest.raises(ConfigError) as refused:
        invoke({"kiqbeat": kind, **fields})
    assert snapshot(redis_client) == before  # nothing written by either
    named = FIELDS[kind]
    if message == "CRON":  # the store's (a document's) message, whatever its wording
        assert "'61 * * * *'" in cli.err
        message = cli.err.removeprefix("kiqbeat: ").removesuffix("\n")
    assert cli.err == "kiqbeat: " + message.format(**named) + "\n"
    assert str(refused.value) == message.format(**{f: f"the event's \"{f}\"" for f in named})


@pytest.mark.parametrize(("event", "refused"), [
    ({"kiqbeat": "put", "name": "x"}, r"'put' needs the event's \"definition\""),
    ({"kiqbeat": "pause"}, r"'pause' needs the event's \"name\""),
    ({"kiqbeat": "remove", "name": "hourly", "force_owner": "yes"},
     r"the event's \"force_owner\": expected true or false, not 'yes'"),
    ({"kiqbeat": "status", "limit": "5"},
     r"the event's \"limit\": expected a whole number of schedules, 1 to 10,000, not '5'"),
    ({"kiqbeat": "get", "name": "hourly", "json": True},
     r"the event's \"json\" is not a field of 'get'; its fields: name"),
    ({"kiqbeat": "import", "file": "x"}, r"the event's \"kiqbeat\": 'import' is not an operation"),
])
def test_an_event_only_form_of_a_bad_request_is_refused_naming_the_field(
    kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis, event: dict[str, Any],
    refused: str,
) -> None:
    assert kiqbeat("schedules", "put", "hourly", "--json-definition", json.dumps(HOURLY)).code == 0
    before = snapshot(redis_client)
    with pytest.raises(ConfigError, match=refused):
        invoke(event)
    assert snapshot(redis_client) == before


# A session of schedules changes, each as an event's fields.
CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("add", {"name": "digest:42", "definition": DIGEST}),
    ("put", {"name": "hourly", "definition": HOURLY}),
    ("put", {"name": "hourly", "definition": HOURLY}),  # unchanged
    ("update", {"name": "hourly", "definition": HOURLY | {"args": [1, "x"]}}),
    ("put", {"name": "gone", "definition": HOURLY}),
    ("pause", {"name": "digest:42"}),
    ("pause", {"name": "hourly"}),
    ("resume", {"name": "hourly"}),
    ("resume", {"name": "hourly"}),  # running already
    ("remove", {"name": "gone"}),
    ("remove", {"name": "gone"}),  # none: nothing removed
    ("put", {"name": "forced", "definition": HOURLY, "force_owner": True}),
]


def test_schedules_changes_from_events_write_what_the_cli_writes_and_answer_alike(
    kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis,
) -> None:
    answers = []
    for kind, fields in CHANGES:
        ran = kiqbeat(*cli_args(kind, fields), "--json")
        assert ran.code == 0, ran.err
        answers.append(ran.json())
    by_cli = snapshot(redis_client)
    # Pause and resume leave the definition alone (the pause is a record of its own).
    assert json.loads(by_cli[keys.definitions("")]["hourly"]) == HOURLY | {"args": [1, "x"]}
    assert set(by_cli[keys.definitions("")]) == {"digest:42", "hourly", "forced"}
    redis_client.flushdb()
    for (kind, fields), answer in zip(CHANGES, answers, strict=True):
        assert invoke({"kiqbeat": kind, **fields}) == {"kiqbeat": kind} | answer
    assert snapshot(redis_client) == by_cli
    # get: the same row (its lag aside, which moves with the clock)
    got = kiqbeat("schedules", "get", "digest:42", "--json").json()
    answer = invoke({"kiqbeat": "get", "name": "digest:42"})
    assert answer.pop("kiqbeat") == "get"
    assert answer | {"lag_s": 0} == got | {"lag_s": 0}
    assert (answer["definition"], answer["enabled"]) == (DIGEST, False)  # paused by its record


def test_status_from_an_event_answers_what_status_json_prints(
    kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis,
) -> None:
    for name, definition in (("digest:42", DIGEST), ("hourly", HOURLY)):
        assert kiqbeat("schedules", "put", name, "--json-definition",
                       json.dumps(definition)).code == 0
    assert kiqbeat("run-once").code == 0  # planned: each has a next tick
    assert kiqbeat("trigger", "hourly").code == 0  # a push in its history

    def steady(answer: dict[str, Any]) -> dict[str, Any]:  # what moves with the clock aside
        return answer | {"now": None, "schedules": [r | {"lag_s": 0}
                                                    for r in answer["schedules"]]}

    cli = kiqbeat("status", "--json").json()
    answer = invoke({"kiqbeat": "status"})
    assert answer.pop("kiqbeat") == "status"
    assert steady(answer) == steady(cli)
    assert answer["summary"]["schedules"] == redis_client.hlen(keys.definitions("")) == 2
    assert sorted(r["name"] for r in answer["schedules"]) == ["digest:42", "hourly"]

    named = invoke({"kiqbeat": "status", "names": ["hourly"], "limit": 1})
    (row,) = named["schedules"]
    assert [p["kind"] for p in row["history"]] == ["manual"]
    assert row["missed"] == [] and named["limit"] == 1
    cli_named = kiqbeat("status", "hourly", "--limit", "1", "--json").json()
    assert steady(named | {"kiqbeat": None}) == steady(cli_named | {"kiqbeat": None})


# --------------------------------------------------------------------------- the shard count


@pytest.mark.parametrize("given", ["flag", "variable"])
def test_the_shard_count_refuses_a_run_of_another_count_and_reindex_splits_into_it(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, given: str,
) -> None:
    count = ["--shard-count", "3"] if given == "flag" else []
    if given == "variable":
        monkeypatch.setenv("KIQBEAT_SHARD_COUNT", "3")
    assert kiqbeat("schedules", "put", "hourly", "--json-definition", json.dumps(HOURLY)).code == 0
    before = snapshot(redis_client)
    other = kiqbeat("run-once", "--shard", "1/4", *count)
    assert other.code == 1
    assert other.err == ("kiqbeat: --shard (KIQBEAT_SHARD) 1/4 is not one of this deployment's "
                         "3 shards (KIQBEAT_SHARD_COUNT, --shard-count); expected I/3\n")
    none = kiqbeat("run-once", *count)
    assert none.code == 1
    assert none.err == ("kiqbeat: this deployment runs 3 shards (KIQBEAT_SHARD_COUNT, "
                        "--shard-count): name one with --shard I/3 (KIQBEAT_SHARD)\n")
    assert kiqbeat("status", "--shard", "0/2", *count).code == 1  # the store's commands too
    assert snapshot(redis_client) == before

    split = kiqbeat("schedules", "reindex", *count, "--json")
    assert split.code == 0, split.err
    # With the variable set, the put above already wrote into the deployment's 3 shards (a
    # sharded deployment's store API uses its count); with the flag on the reindex alone,
    # the put went to the unsplit index and the reindex moves it.
    moved = 1 if given == "flag" else 0
    assert (split.json()["shards"], split.json()["moved"]) == (3, moved)
    assert redis_client.get(keys.shards("")) == "3"
    assert kiqbeat("run-once", "--shard", "2/3", *count).code == 0
    assert kiqbeat("status", *count, "--json").json()["summary"]["indexed"] == 1


@pytest.mark.parametrize(("value", "where"), [("0", "--shard-count"),
                                              ("1025", "--shard-count"),
                                              ("three", "KIQBEAT_SHARD_COUNT")])
def test_a_bad_shard_count_is_refused_naming_the_flag_or_the_variable(
    kiqbeat: Kiqbeat, monkeypatch: pytest.MonkeyPatch, value: str, where: str,
) -> None:
    if where == "--shard-count":
        ran = kiqbeat("run-once", "--shard-count", value)
    else:
        monkeypatch.setenv("KIQBEAT_SHARD_COUNT", value)
        ran = kiqbeat("run-once")
    assert ran.code == 1
    assert ran.err == (f"kiqbeat: {where}: '{value}' must be a whole number of shards, 1 to "
                       "1,024\n")


def test_a_reindex_event_of_another_count_than_the_functions_is_refused(
    invoke: Invoke, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIQBEAT_SHARD_COUNT", "3")
    with pytest.raises(ConfigError, match=r"^a reindex into 2 shard\(s\), but this deployment "
                                          r"runs 3 \(KIQBEAT_SHARD_COUNT, --shard-count\); "
                                          "nothing was done$"):
        invoke({"kiqbeat": "reindex", "shards": 2})
    assert redis_client.dbsize() == 0
    assert invoke({"kiqbeat": "reindex", "shards": 3})["shards"] == 3
    assert redis_client.get(keys.shards("")) == "3"
