"""The audit trail (kiqbeat.audit): every operator action through the Store, from the Python
API and the command line, read back from the Redis stream itself."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis

from kiqbeat import audit
from kiqbeat.audit import default_actor, read_audit, record_action
from kiqbeat.engine import Engine
from kiqbeat.redis import keys
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [1]}


def stream(client: redis.Redis) -> list[dict[str, str]]:
    """The audit stream's entries, oldest first, as Redis holds them."""
    def text(value: bytes | str) -> str:
        return value.decode() if isinstance(value, bytes) else value

    return [{text(k): text(v) for k, v in fields.items()}
            for _, fields in client.xrange(keys.audit(""))]


def test_every_store_action_is_recorded_with_its_actor_schedule_and_note(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    store = Store(client, actor="ops-bot")
    store.add("a", DIGEST)
    store.put("a", {**DIGEST, "args": [2]})
    store.update("a", {**DIGEST, "args": [2]})
    noted = store.acting("alice", note="INC-42: mail provider down")
    noted.pause("a")
    noted.resume("a")
    manual = store.trigger("a", [9])
    store.import_definitions([("b", DIGEST), ("c", {"cron": "nope"})])
    store.remove("b")
    entries = stream(client)
    assert [(e["actor"], e["action"], e["name"]) for e in entries] == [
        ("ops-bot", "add", "a"), ("ops-bot", "put", "a"), ("ops-bot", "update", "a"),
        ("alice", "pause", "a"), ("alice", "resume", "a"), ("ops-bot", "trigger", "a"),
        ("ops-bot", "import", ""), ("ops-bot", "remove", "b")]
    assert entries[2]["detail"] == "unchanged"
    assert {e["note"] for e in entries[3:5]} == {"INC-42: mail provider down"}
    assert manual.jid in entries[5]["detail"]
    assert entries[6]["detail"] == "1 written, 0 unchanged, 1 invalid, 0 refused"
    assert Store(client).actor == default_actor() and "@" in default_actor()
    # A refused action records nothing.
    with pytest.raises(Exception, match="exists"):
        store.add("a", DIGEST)
    assert len(stream(client)) == len(entries)
    assert [e.action for e in read_audit(client, "", "a")] == [
        "trigger", "resume", "pause", "update", "put", "add"]
    client.close()


def test_a_backfill_is_recorded_once_with_the_count_it_pushed_and_a_dry_run_is_not(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    cfg = config("missed_jobs_window: 1h\nschedules:\n  m: {cron: '* * * * *', class: W}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4)
    engine = Engine(Settings(actor="carol"), client=client)
    engine.run(cfg, now=t0)
    engine.run(cfg, now=t0 + timedelta(hours=2))
    store = engine.store(cfg)
    store.backfill(["m"], dry_run=True)
    store.backfill(["m"])
    assert [(e["actor"], e["action"], e["name"], e["detail"]) for e in stream(client)] == [
        ("carol", "backfill", "m", "60 pushed")]
    client.close()


def test_the_trail_is_bounded(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis.Redis.from_url(redis_url)
    monkeypatch.setattr(audit, "MAX_AUDIT_ENTRIES", 100)
    for n in range(1000):
        record_action(client, "", "bot", "pause", f"s{n}", note="x" * 2000)
    # XADD MAXLEN ~ trims whole nodes of 100 entries: at most one node above the cap.
    assert client.xlen(keys.audit("")) <= 200
    newest = read_audit(client, "", limit=1)[0]
    assert newest.name == "s999" and len(newest.note) == 500
    client.close()


def test_the_command_line_records_its_actor_and_kiqbeat_audit_shows_the_trail(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    definition = json.dumps(DIGEST)
    assert kiqbeat("schedules", "add", "a", "--json-definition", definition).code == 0
    assert kiqbeat("schedules", "pause", "a", "--actor", "dave").code == 0
    monkeypatch.setenv("KIQBEAT_ACTOR", "erin")
    assert kiqbeat("trigger", "a").code == 0
    shown = kiqbeat("audit", "a")
    as_json = kiqbeat("audit", "--json").json()["audit"]
    assert [(e["actor"], e["action"]) for e in as_json] == [
        ("erin", "trigger"), ("dave", "pause"), (default_actor(), "add")]
    assert shown.code == 0 and shown.out.count("\n") == 3 and "dave: pause 'a'" in shown.out
    assert [e["actor"] for e in stream(redis_client)] == [default_actor(), "dave", "erin"]


def test_a_commands_note_goes_into_the_audit_trail_with_the_action(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    assert kiqbeat("schedules", "put", "n", "--json-definition", json.dumps(DIGEST)).code == 0
    paused = kiqbeat("schedules", "pause", "n", "--actor", "erin", "--note", "INC-9: on hold")
    assert paused.code == 0
    (last,) = stream(redis_client)[-1:]
    assert (last["actor"], last["action"], last["name"], last["note"]) == (
        "erin", "pause", "n", "INC-9: on hold")


# Text another language (or an operator) wrote, which must never reach a terminal raw: ESC
# (an escape sequence), U+202E (reverses the rest of the line), a newline (forges a line).
FORGING = "\x1b[31m\u202egnp.exe\nforged"


def test_a_name_that_is_not_utf8_is_recorded_through_a_plain_client_and_listed_by_its_bytes(
    kiqbeat: Kiqbeat, redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)  # the documented Store(redis.Redis(...))
    name = b"bad\xff".decode(errors="surrogateescape")  # as kiqbeat reads such a name
    client.hset(keys.definitions(""), b"bad\xff", json.dumps(DIGEST))
    store = Store(client, actor="ops")
    assert store.pause(name)  # done, and recorded: no UnicodeEncodeError after the action
    ((_, fields),) = client.xrange(keys.audit(""))
    assert fields[b"name"] == b"bad\xff" and fields[b"action"] == b"pause"
    listed = kiqbeat("audit", "--json")
    assert listed.code == 0
    (entry,) = listed.json()["audit"]
    assert (entry["name"], entry["name_hex"]) == ("bad\\udcff", "626164ff")
    assert "pause 'bad\\udcff'" in kiqbeat("audit").out
    client.close()


def test_an_entry_another_tool_wrote_with_bytes_that_are_not_utf8_reads_as_text(
    kiqbeat: Kiqbeat, redis_url: str,
) -> None:
    """The console's JSON (UTF-8, not ASCII-escaped) once answered 500 for a schedule with
    such an entry (the confinement fuzzer found it): the shown fields read as U+FFFD; the
    name keeps its bytes."""
    redis_client = redis.Redis.from_url(redis_url)  # the documented Store(redis.Redis(...))
    redis_client.xadd(keys.audit(""), {"actor": b"ops\xb6", "action": b"pause\x97",
                                       "name": b"a", "note": b"\xff", "detail": b"d"})
    (entry,) = read_audit(redis_client, "", "a")
    body = json.dumps(entry.as_dict(), ensure_ascii=False).encode()  # as the console sends
    assert json.loads(body)["actor"] == "ops\ufffd" and entry.note == "\ufffd"
    assert entry.action == "pause\ufffd" and entry.name == "a"
    listed = kiqbeat("audit", "--json")
    assert listed.code == 0 and listed.json()["audit"][0]["actor"] == "ops\ufffd"
    redis_client.close()


def test_kiqbeat_audit_shows_names_actors_and_notes_escaped_one_line_each(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    record_action(redis_client, "", f"mallory{FORGING}", "pause", f"s{FORGING}",
                  note=f"INC-1{FORGING}", detail=f"d{FORGING}")
    record_action(redis_client, "", "bot", "resume", "x" * 1000)
    shown = kiqbeat("audit")
    assert shown.code == 0 and shown.out.count("\n") == 2
    assert not {"\x1b", "\u202e"} & set(shown.out)
    assert shown.out.count("\\x1b[31m\\u202egnp.exe\\nforged") == 4  # actor, name, note, detail
    assert "x" * 201 not in shown.out  # a name is clipped (MAX_SHOWN_CHARS)


def test_kiqbeat_audit_json_escapes_what_would_forge_text_on_a_terminal(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    """--json is read on a terminal too: U+202E (which JSON need not escape) is written as
    its escape, as every other command's --json writes it (errors.foreign_json), and the
    values read back whole."""
    record_action(redis_client, "", "mallory", "pause", f"s{FORGING}", note=f"n{FORGING}")
    listed = kiqbeat("audit", "--json")
    assert listed.code == 0 and not {"\x1b", "\u202e"} & set(listed.out)
    (entry,) = listed.json()["audit"]
    assert (entry["name"], entry["note"]) == (f"s{FORGING}", f"n{FORGING}")


def test_a_reindex_is_recorded_with_its_actor_note_and_counts(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    assert kiqbeat("schedules", "add", "a", "--json-definition", json.dumps(DIGEST)).code == 0
    done = kiqbeat("schedules", "reindex", "--shard-count", "2", "--actor", "frank", "--note",
                   "INC-7: split")
    assert done.code == 0, done.err
    last = stream(redis_client)[-1]
    assert (last["actor"], last["action"], last["name"], last["note"]) == (
        "frank", "reindex", "", "INC-7: split")
    assert last["detail"] == "2 shard(s): 1 entries, 0 rescored"
    assert "reindex" in audit.ACTIONS


def test_kiqbeat_audit_of_a_schedule_without_entries_shows_its_name_clipped_and_escaped(
    kiqbeat: Kiqbeat,
) -> None:
    name = "\x1b[31m" + "x" * 5000 + "\u202e"
    shown = kiqbeat("audit", name)
    assert shown.code == 0 and "no actions recorded for '\\x1b[31mxxx" in shown.out
    assert "\x1b" not in shown.out and len(shown.out) < 300
