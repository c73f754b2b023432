"""The JSON API against a real console and a real Redis: what it writes is checked in Redis
and through the Python API, not in its own answers alone."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, progress
from kiqbeat.redis.names import NameIndex, build
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from kiqbeat.web.recent import Recent
from tests.support.cli import kiqbeat_cli
from tests.support.clock import minute_floor, redis_now
from tests.support.console import DIGEST, READER_TOKEN, Served, document_schedule, form_of, path
from tests.support.engine import config, pushed_jobs
from tests.support.marks import stored_mark, write_marks
from tests.support.name_index import indexed

OUTAGE = """
missed_jobs_window: 1h
schedules:
  minutely: {cron: "* * * * *", class: MinuteWorker}
"""


def test_a_schedule_put_through_the_api_is_stored_as_the_python_api_would_store_it(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    with console.api() as api:
        created = api.put(path("digest:42"), json=DIGEST)
        replaced = api.put(path("digest:42"), json={**DIGEST, "args": [43]})
        again = api.put(path("digest:42"), json={**DIGEST, "args": [43]})
    assert (created.status_code, replaced.status_code, again.status_code) == (201, 200, 200)
    row = store.get("digest:42")
    assert row is not None and row.definition == {**DIGEST, "args": [43]} and row.source == ""
    assert created.json()["reading"] == "at 09:00" and created.json()["zone"] == "Asia/Kolkata"
    assert redis_client.zscore(keys.due(""), "digest:42") == 0  # "plan me"


def test_a_phrase_a_rails_zone_and_fugits_day_forms_are_stored_as_written_and_read(
    console: Served, store: Store
) -> None:
    standup = {"cron": "every weekday at 9:15am", "tz": "Eastern Time (US & Canada)",
               "class": "StandupWorker"}
    close = {"cron": "0 18 L * * +05:30", "class": "CloseWorker"}
    with console.api() as api:
        answers = [api.put(path("standup"), json=standup), api.put(path("close"), json=close)]
        shown = api.get(path("standup"))
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json()["reading"] == "at 09:15 on Monday through Friday"
    assert answers[0].json()["zone"] == "Eastern Time (US & Canada)"
    assert answers[1].json()["reading"] == "at 18:00 on the last day of the month"
    row = store.get("standup")
    assert row is not None and row.definition == standup  # the phrase, as written
    assert shown.status_code == 200
    assert "every weekday at 9:15am → 15 9 * * 1-5" in json.dumps(shown.json(),
                                                                  ensure_ascii=False)


def test_an_invalid_definition_is_answered_422_with_the_messages_of_validate_and_not_written(
    console: Served, store: Store, redis_client: redis.Redis, tmp_path: Path
) -> None:
    bad = {"cron": "61 9 * * *", "class": "DigestWorker", "quue": "mail"}
    with console.api() as api:
        answer = api.put(path("digest"), json=bad)
    assert answer.status_code == 422
    problems = answer.json()["problems"]
    with pytest.raises(ConfigError) as raised:
        store.check("digest", bad)
    assert problems == raised.value.problems
    assert any("'quue'" in p and "did you mean 'queue'" in p for p in problems)
    assert any("(field 'cron')" in p and "'61'" in p for p in problems)
    # `kiqbeat validate` of a document holding the same schedule says the same things.
    document = tmp_path / "doc.yaml"
    document.write_text(json.dumps({"schedules": {"digest": bad}}))
    validated = kiqbeat_cli("validate", str(document))
    assert validated.returncode == 1
    assert all(p in validated.stderr for p in problems)
    assert not redis_client.hexists(keys.definitions(""), "digest")


@pytest.mark.parametrize("name", ["a/b", "team/eu/daily report", "50% off", "ünïcødé ✓",
                                  "x/pause", "?#&=+"])
def test_any_name_kiqbeat_allows_round_trips_through_the_path(
    console: Served, store: Store, name: str
) -> None:
    with console.api() as api:
        assert api.put(path(name), json=DIGEST).status_code == 201
        assert api.get(path(name)).json()["name"] == name
        assert api.post(path(name) + "/pause").json() == {"name": name, "paused": True,
                                                          "changed": True}
        row = store.get(name)
        assert row is not None and not row.enabled
        assert api.delete(path(name)).status_code == 204
    assert store.get(name) is None


def test_a_documents_schedule_is_read_only_through_the_api_but_may_be_paused(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    document_schedule(redis_client, "owned")
    with console.api() as api:
        put = api.put(path("owned"), json=DIGEST)
        delete = api.delete(path("owned"))
        paused = api.post(path("owned") + "/pause", json={"note": "INC-7"})
    assert (put.status_code, delete.status_code, paused.status_code) == (409, 409, 200)
    assert "s3://bucket/kiqbeat.yaml" in put.json()["error"]
    row = store.get("owned")
    assert row is not None and row.source == "s3://bucket/kiqbeat.yaml" and not row.enabled


def test_a_manual_run_through_the_api_pushes_one_job_with_the_args_given(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    store.put("report", DIGEST)
    with console.api() as api:
        done = api.post(path("report") + "/trigger", json={"args": [7, "eu"]})
        refused = api.post(path("report") + "/trigger", json={"args": "7"})
        missing = api.post(path("nobody") + "/trigger")
    assert (done.status_code, refused.status_code, missing.status_code) == (201, 422, 404)
    jobs = pushed_jobs(redis_client)
    assert [(j["jid"], j["args"], j["class"]) for j in jobs] == [
        (done.json()["jid"], [7, "eu"], "DigestWorker")]
    assert [p.kind for p in store.history("report")] == ["manual"]


def test_a_backfill_through_the_api_counts_first_then_pushes_each_recorded_tick_once(
    console: Served, redis_client: redis.Redis
) -> None:
    cfg = config(OUTAGE)
    client = redis.Redis.from_url(console.redis_url)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5)
    t1 = t0 + timedelta(hours=3)
    engine = Engine(Settings(), client=client)
    engine.run(cfg, now=t0)
    engine.run(cfg, now=t1)
    with console.api() as api:
        missed = api.get("/api/v1/missed").json()["missed"]
        dry = api.post(path("minutely") + "/backfill", json={"dry_run": True}).json()
        jobs_before = len(pushed_jobs(redis_client))
        done = api.post(path("minutely") + "/backfill", json={}).json()
        again = api.post(path("minutely") + "/backfill", json={}).json()
    assert [m["ticks"] for m in missed] == [120]
    assert dry["planned"] == 120 and dry["pushed"] == 0
    assert jobs_before == 60  # the invocation at t1 pushed the last hour's
    assert done["pushed"] == 120 and again["pushed"] == 0
    jids = Counter(j["jid"] for j in pushed_jobs(redis_client))
    expected = {jid("minutely", t0 + timedelta(minutes=m)) for m in range(1, 181)}
    assert set(jids) == expected and max(jids.values()) == 1
    client.close()


def test_schedules_are_paged_by_cursor_and_filtered_by_prefix_state_queue_and_source(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    for n in range(120):
        store.put(f"team-{n % 3}/job-{n:03}", {**DIGEST, "queue": "mail" if n % 4 else "low",
                                               "enabled": n % 5 != 0})
    store.put("other", DIGEST)
    document_schedule(redis_client, "team-9/owned")
    build(redis_client, "")  # the document's schedule was written by plain commands
    with console.api() as api:
        seen: list[str] = []
        cursor = ""
        pages = 0
        while True:
            answer = api.get("/api/v1/schedules", params={"limit": 50, "cursor": cursor}).json()
            seen += [r["name"] for r in answer["items"]]
            pages += 1
            if not answer["next_cursor"]:
                break
            cursor = answer["next_cursor"]

        def names(**params: str) -> list[str]:
            out, cursor = [], ""
            while True:
                page = api.get("/api/v1/schedules", params={**params, "cursor": cursor}).json()
                out += [r["name"] for r in page["items"]]
                if not (cursor := page["next_cursor"]):
                    return out

        by_prefix = names(prefix="team-1/")
        paused = names(state="paused", prefix="team-")
        low = names(queue="low")
        documents = names(source="s3://bucket/kiqbeat.yaml")
        api_owned = names(source="api", prefix="o")
        bad_state = api.get("/api/v1/schedules", params={"state": "sleeping"})
    assert pages == 3 and sorted(seen) == seen and len(seen) == len(set(seen)) == 122
    assert by_prefix == sorted(f"team-1/job-{n:03}" for n in range(120) if n % 3 == 1)
    assert paused == sorted(f"team-{n % 3}/job-{n:03}" for n in range(120) if n % 5 == 0)
    assert low == sorted(f"team-{n % 3}/job-{n:03}" for n in range(120) if n % 4 == 0)
    assert documents == ["team-9/owned"] and api_owned == ["other"]
    assert bad_state.status_code == 422 and "sleeping" in bad_state.json()["error"]


def test_a_schedule_written_with_plain_redis_commands_is_found_and_a_removed_one_is_not(
    console: Served, redis_client: redis.Redis
) -> None:
    # docs/store.md's protocol, with the name index: found by prefix at once.
    redis_client.hset(keys.definitions(""), "ruby/weekly", json.dumps(DIGEST))
    redis_client.zadd(keys.due(""), {"ruby/weekly": 0})
    redis_client.zadd(keys.names(""), {"ruby/weekly": 0})
    # The previous release's protocol, without it: found by its exact name at once.
    redis_client.hset(keys.definitions(""), "ruby/nightly", json.dumps(DIGEST))
    redis_client.zadd(keys.due(""), {"ruby/nightly": 0})
    with console.api() as api:
        listed = api.get("/api/v1/schedules", params={"prefix": "ruby/"}).json()
        assert [r["name"] for r in listed["items"]] == ["ruby/weekly"]
        exact = api.get("/api/v1/schedules", params={"prefix": "ruby/nightly"}).json()
        assert [r["name"] for r in exact["items"]] == ["ruby/nightly"]
        # The protocol's removal, leaving the name index as the previous release did.
        redis_client.hdel(keys.definitions(""), "ruby/nightly")
        redis_client.zrem(keys.due(""), "ruby/nightly")
        gone = api.get("/api/v1/schedules", params={"prefix": "ruby/"}).json()
    assert [r["name"] for r in gone["items"]] == ["ruby/weekly"]
    assert b"ruby/nightly" not in indexed(redis_client)


def test_the_index_build_indexes_a_store_written_before_it_and_counts_the_disabled(
    redis_client: redis.Redis, store: Store
) -> None:
    for n in range(1200):  # written as the previous release's protocol said: no name index
        redis_client.hset(keys.definitions(""), f"s{n:04}", json.dumps(
            {**DIGEST, "enabled": n % 3 != 0}))
        redis_client.zadd(keys.due(""), {f"s{n:04}": 0})
    store.trigger("s0001")
    index = NameIndex(redis_client, "")
    assert not index.built()
    assert build(redis_client, "") == 1200
    assert build(redis_client, "") == 1200  # idempotent: the counters are not doubled
    assert index.page("s", None, 2000) == [f"s{n:04}" for n in range(1200)]
    assert index.built() and index.disabled() == 400
    recent = Recent(store.client, "")
    while not recent.step():
        pass
    assert [(p.name, p.kind) for p in recent.last or []] == [("s0001", "manual")]


def test_missed_runs_the_clis_request_a_bad_record_costs_only_its_schedule_a_typo_is_404(
    console: Served, store: Store, redis_client: redis.Redis,
) -> None:
    """GET /api/v1/missed is the "missed" request of the CLI and the Lambda, run by their one
    dispatch: a record written by hand that is not one is left out and named (the others
    still listed), and a name with neither a schedule nor a record is refused as the
    command refuses it."""
    for name in ("good", "bad"):
        store.put(name, DIGEST)
    redis_client.hset(keys.missed(""), "good", "1700000000000 1700003600000 window")
    redis_client.hset(keys.missed(""), "bad", "not a range")
    with console.api() as api:
        every = api.get("/api/v1/missed")
        typo = api.get("/api/v1/missed", params={"name": ["good", "nobody"]})
    ran = kiqbeat_cli("missed", "--json", "--redis-url", console.redis_url)
    assert every.status_code == 200, every.text
    assert every.json()["missed"] == json.loads(ran.stdout)["missed"]
    assert [m["name"] for m in every.json()["missed"]] == ["good"]
    (problem,) = every.json()["problems"]
    assert "'bad'" in problem and problem in ran.stderr and ran.returncode == 1
    assert (typo.status_code, typo.json()["error"]) == (
        404, "no schedule 'nobody' in the store (kiqbeat:schedules)")


def test_status_missed_audit_and_the_openapi_description_are_served(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    with console.api() as api:
        status = api.get("/api/v1/status").json()
        audit = api.get("/api/v1/audit").json()["audit"]
        spec = api.get("/api/v1/openapi.json").json()
    assert status["counts"]["schedules"] == 1 and status["most_overdue"][0]["name"] == "a"
    assert [(a["action"], a["name"]) for a in audit] == [("put", "a")]
    assert spec["openapi"].startswith("3.") and {
        "/api/v1/schedules", "/api/v1/schedules/{name}", "/api/v1/schedules/{name}/pause",
        "/api/v1/schedules/{name}/resume", "/api/v1/schedules/{name}/trigger",
        "/api/v1/schedules/{name}/backfill", "/api/v1/missed", "/api/v1/status",
    } <= set(spec["paths"])


def test_a_reader_reads_and_may_not_act_and_no_token_reads_nothing(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    with console.api(READER_TOKEN) as reader, console.api(None) as nobody, \
            console.api("x" * 32) as wrong:
        assert reader.get(path("a")).status_code == 200
        assert reader.post(path("a") + "/pause").status_code == 403
        assert reader.put(path("b"), json=DIGEST).status_code == 403
        assert reader.delete(path("a")).status_code == 403
        assert nobody.get("/api/v1/schedules").status_code == 401
        assert nobody.get("/metrics").status_code == 401
        scraped = reader.get("/metrics").text
        assert wrong.get("/api/v1/schedules").status_code == 401
    row = store.get("a")
    assert row is not None and row.enabled and store.get("b") is None
    assert "kiqbeat_schedules 1.0" in scraped and "kiqbeat_schedules_set_aside 0.0" in scraped


def test_schedules_with_missed_ticks_are_paged_by_cursor_however_small_their_record_hash(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    for n in range(120):
        store.put(f"m{n:03}", DIGEST)
        redis_client.hset(keys.missed(""), f"m{n:03}", "1700000000000 1700003600000 window")
    store.put("fine", DIGEST)
    with console.api() as api:
        seen, cursor, pages = [], "", 0
        while True:
            page = api.get("/api/v1/schedules", params={"state": "missed", "limit": 50,
                                                         "cursor": cursor}).json()
            assert len(page["items"]) <= 50
            seen += [r["name"] for r in page["items"]]
            pages += 1
            if not (cursor := page["next_cursor"]):
                break
    assert pages == 3 and sorted(seen) == [f"m{n:03}" for n in range(120)]


def _outage(console: Served) -> tuple[redis.Redis, datetime]:
    """minutely's record after a 3-hour outage: 120 missed ticks after t0 (returned)."""
    client = redis.Redis.from_url(console.redis_url)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5)
    engine = Engine(Settings(), client=client)
    engine.run(config(OUTAGE), now=t0)
    engine.run(config(OUTAGE), now=t0 + timedelta(hours=3))
    return client, t0


def test_a_backfill_through_the_api_asks_for_yes_above_the_bound_and_before_first_seen(
    console: Served, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, t0 = _outage(console)
    # first seen an hour into the outage: its first 60 missed ticks were never owed
    mark = stored_mark(client, "minutely")
    assert mark is not None
    write_marks(client, "", {"minutely": progress.Mark(
        mark.mark_ms, int((t0 + timedelta(hours=1)).timestamp() * 1000))})
    monkeypatch.setattr("kiqbeat.entrypoints.outcomes.BACKFILL_CONFIRM_JOBS", 100)
    with console.browser() as browser:
        form = browser.get("/backfill", params={"name": "minutely"})
        page = browser.post("/backfill", data=form_of(form.text, "/backfill")).text
    with console.api() as api:
        dry = api.post(path("minutely") + "/backfill", json={"dry_run": True}).json()
        before = len(pushed_jobs(redis_client))
        unasked = api.post(path("minutely") + "/backfill", json={})
        since = (t0 + timedelta(hours=1)).isoformat()
        reversed_ = api.post(path("minutely") + "/backfill", json={"since": since,
                                                              "until": t0.isoformat()})
        pushed_after_refusals = len(pushed_jobs(redis_client))
        some = api.post(path("minutely") + "/backfill", json={"max_jobs": 20, "yes": True})
        rest = api.post(path("minutely") + "/backfill", json={"yes": True})
        bad = api.post(path("minutely") + "/backfill", json={"yes": "please"})
        described = api.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert {"yes", "max_jobs"} <= set(described["Backfill"]["properties"])
    assert 'id="before-first-seen">60 of them' in page and 'name="yes" value="1"' in page
    assert (dry["planned"], dry["before_first_seen"]) == (120, 60)
    assert unasked.status_code == 422 and "first seen" in unasked.json()["error"]
    assert reversed_.status_code == 422 and "later than" in reversed_.json()["error"]
    assert pushed_after_refusals == before
    assert some.status_code == 200 and some.json()["pushed"] == 20
    assert rest.json()["pushed"] == 100
    assert bad.status_code == 422 and "yes" in bad.json()["error"]
    jids = Counter(j["jid"] for j in pushed_jobs(redis_client))
    assert len(jids) == before + 120 and max(jids.values()) == 1
    client.close()


def test_a_backfill_of_more_jobs_than_the_bound_is_refused_without_yes_and_counted_first(
    console: Served, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = _outage(console)
    monkeypatch.setattr("kiqbeat.entrypoints.outcomes.BACKFILL_CONFIRM_JOBS", 100)
    before = len(pushed_jobs(redis_client))
    with console.api() as api:
        refused = api.post(path("minutely") + "/backfill", json={})
        capped = api.post(path("minutely") + "/backfill", json={"max_jobs": 100})
    assert refused.status_code == 422 and "more than 100" in refused.json()["error"]
    assert capped.status_code == 200 and capped.json()["pushed"] == 100  # as --max-jobs
    assert len(pushed_jobs(redis_client)) == before + 100
    monkeypatch.setattr("kiqbeat.entrypoints.outcomes.BACKFILL_CONFIRM_JOBS", 10)
    with console.browser() as browser:  # the page's dry run counts; its button confirms
        form = browser.get("/backfill", params={"name": "minutely"})
        dry = browser.post("/backfill", data=form_of(form.text, "/backfill"))
        done = browser.post("/backfill", data=form_of(dry.text, "/backfill"))
    assert 'id="planned">20<' in dry.text
    assert done.status_code == 200 and 'id="pushed">20<' in done.text
    assert len(set(j["jid"] for j in pushed_jobs(redis_client))) == before + 120
    client.close()


def test_a_forged_cursor_is_refused_naming_it(console: Served) -> None:
    forged = "s" + base64.urlsafe_b64encode(b"x:y").decode()
    with console.api() as api:
        answers = [api.get("/api/v1/schedules", params={"state": "set_aside", "cursor": c})
                   for c in (forged, "s!!", "q" + forged[1:])]
    with console.browser() as browser:
        page = browser.get("/schedules", params={"state": "missed", "cursor": forged})
    assert [a.status_code for a in answers] == [422, 422, 422]
    assert all("cursor" in a.json()["error"] for a in answers)
    assert page.status_code == 422 and "is not one this console gave" in page.text


def test_the_status_answer_carries_a_name_that_is_not_utf8_in_hex(
    console: Served, redis_client: redis.Redis
) -> None:
    name = b"bad\xffname"
    redis_client.hset(keys.definitions(""), name, b'{"cron": "nope", "class": "W"}')
    redis_client.hset(keys.rejected(""), name, "invalid cron")
    redis_client.xadd(keys.audit(""), {"actor": "ruby", "action": "pause", "name": name})
    with console.api() as api:
        answer = api.get("/api/v1/status")
        audit = api.get("/api/v1/audit")
    assert answer.status_code == 200, answer.text
    assert {"name": "bad\\udcffname", "name_hex": name.hex(), "why": "invalid cron"} in \
        answer.json()["set_aside"]
    assert audit.status_code == 200, audit.text
    assert [(e["action"], e["name_hex"]) for e in audit.json()["audit"]] == [
        ("pause", name.hex())]


def _sent_bytes(client: redis.Redis) -> int:
    """Bytes the Redis server has sent to all its clients (INFO stats)."""
    return int(client.info("stats")["total_net_output_bytes"])


def test_the_index_build_never_reads_an_oversized_definition_and_drops_names_that_are_gone(
    redis_client: redis.Redis,
) -> None:
    huge = json.dumps({**DIGEST, "args": ["x" * 4_000_000]})  # far over MAX_DEFINITION_BYTES
    redis_client.hset(keys.definitions(""), "huge", huge)
    # Set aside by an invocation: its due entry gone, its reason recorded.
    redis_client.hset(keys.rejected(""), "huge", "its definition is over the limit")
    for n in range(300):  # written as docs/store.md's protocol says: definition, due entry
        redis_client.hset(keys.definitions(""), f"s{n:03}", json.dumps(DIGEST))
        redis_client.zadd(keys.due(""), {f"s{n:03}": 0})
    redis_client.zadd(keys.names(""), {"removed-by-ruby": 0, "removed/by-cli": 0, "s001": 0})
    before = _sent_bytes(redis_client)
    assert build(redis_client, "") == 301
    sent = _sent_bytes(redis_client) - before
    assert sent < 1_000_000, f"the index build brought back {sent:,} bytes"
    index = indexed(redis_client)
    assert index[b"huge"] == b"?"  # not read: no facets
    assert sorted(index) == sorted([b"huge", *(f"s{n:03}".encode() for n in range(300))])
    assert redis_client.zcard(keys.names("")) == 0


def test_the_history_walk_begins_a_pass_at_most_once_a_minute(redis_client: redis.Redis
                                                                ) -> None:
    redis_client.hset(keys.definitions(""), "a", json.dumps(DIGEST))
    walk = Recent(redis_client, "")
    stop = threading.Event()
    thread = threading.Thread(target=walk.run_until, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while walk.last is None:
            assert time.monotonic() < deadline, "the first pass did not finish"
            time.sleep(0.01)
        redis_client.config_resetstat()
        time.sleep(1.0)  # a hundred pages' time at WALK_PAUSE_S: none is walked
        stats = redis_client.info("commandstats")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert "cmdstat_hscan" not in stats and "cmdstat_evalsha" not in stats


def test_pages_and_answers_never_read_an_oversized_definition_and_show_it_set_aside(
    console: Served, redis_client: redis.Redis
) -> None:
    huge = json.dumps({**DIGEST, "args": ["x" * 4_000_000]})
    redis_client.hset(keys.definitions(""), "big", huge)  # plain Redis: no writer refused it
    time.sleep(0.3)  # the console's first start builds the index (reading no definition)
    before = _sent_bytes(redis_client)
    with console.api() as api, console.browser() as browser:
        filtered = [api.get("/api/v1/schedules", params={"prefix": "big", "state": s})
                    for s in ("paused", "active")]
        queued = api.get("/api/v1/schedules", params={"prefix": "b", "queue": "default"})
        one = api.get(path("big"))
        page = browser.get("/schedule", params={"name": "big"})
    sent = _sent_bytes(redis_client) - before
    assert sent < 1_000_000, f"the console brought back {sent:,} bytes"
    assert [f.json()["items"] for f in filtered] == [[], []] and queued.json()["items"] == []
    assert one.status_code == 200 and one.json()["definition"] is None
    assert one.json()["oversized_bytes"] == len(huge) and one.json()["fires"] == []
    assert page.status_code == 200 and "not read: " in page.text


# ---------------------------------------------------------------------------- validate

NEW_YORK_CRON_JOBS = {  # as Debian's sidekiq-cron 1.8 stores them in Redis
    "weekdays": {"name": "weekdays", "klass": "W", "cron": "0 0 */2 * 1-5", "args": "[]",
                 "message": json.dumps({"queue": "low", "class": "W", "args": []}),
                 "status": "enabled", "active_job": "false", "description": "",
                 "last_enqueue_time": ""},
    "nightly": {"name": "nightly", "klass": "N", "cron": "30 2 * * *", "args": "[1]",
                "message": json.dumps({"queue": "default", "class": "N", "args": [1]}),
                "status": "enabled", "active_job": "false", "description": ""},
}


def test_validate_answers_a_sidekiq_cron_jobs_warnings_as_kiqbeat_validate_gives_them(
    console: Served, tmp_path: Path, redis_client: redis.Redis
) -> None:
    document = tmp_path / "schedule.yml"
    document.write_text("weekdays: {cron: '0 0 */2 * 1-5', class: W, queue: low}\n"
                        "nightly: {cron: '30 2 * * *', class: N, args: [1]}\n")
    printed = kiqbeat_cli("validate", str(document), "--format", "sidekiq-cron",
                          "--app-zone", "America/New_York")
    assert printed.returncode == 0, printed.stderr
    lines = [line.removeprefix("warning: ") for line in printed.stdout.splitlines()
             if line.startswith("warning: ")]
    with console.api(READER_TOKEN) as api:
        answers = {name: api.post("/api/v1/validate", json={
            "definition": job, "format": "sidekiq-cron", "app_zone": "America/New_York"})
            for name, job in NEW_YORK_CRON_JOBS.items()}
    assert {a.status_code for a in answers.values()} == {200}
    for name, answer in answers.items():
        body = answer.json()
        own = [w for w in lines if f"schedule '{name}'" in w]
        assert own and [w for w in body["warnings"] if f"schedule '{name}'" in w] == own
        assert body["problems"] == []
    weekdays, nightly = answers["weekdays"].json(), answers["nightly"].json()
    assert any("fugit" in w and "'*/2'" in w for w in weekdays["warnings"])
    assert any("daylight saving" in w and "(fugit) does not fire" in w
               for w in nightly["warnings"])
    assert any("without a zone" in w and "America/New_York" in w for w in nightly["warnings"])
    assert weekdays["definition"] == {"class": "W", "cron": "0 0 */2 * 1-5", "args": [],
                                      "enabled": True, "queue": "low"}
    assert not redis_client.exists("kiqbeat:schedules")  # it wrote nothing


def test_validate_answers_a_kiqbeat_definitions_problems_and_refuses_a_malformed_request(
    console: Served, store: Store
) -> None:
    bad = {"cron": "* * 31 2 *", "class": "W", "quue": "low"}
    with pytest.raises(ConfigError) as raised:
        store.check("bad", bad)
    with console.api(READER_TOKEN) as api:
        checked = api.post("/api/v1/validate", json={"definition": bad, "name": "bad"})
        unknown = api.post("/api/v1/validate", json={"definition": bad, "format": "cronjob"})
        no_definition = api.post("/api/v1/validate", json={"format": "kiqbeat"})
        bad_now = api.post("/api/v1/validate", json={"definition": bad, "now": "soon"})
        described = api.get("/api/v1/openapi.json").json()
    with console.api(None) as anonymous:
        unauthenticated = anonymous.post("/api/v1/validate", json={"definition": bad})
    assert unauthenticated.status_code == 401
    assert "post" in described["paths"]["/api/v1/validate"]
    assert "Validate" in described["components"]["schemas"]
    assert checked.status_code == 200
    assert checked.json()["problems"] == raised.value.problems
    assert store.get("bad") is None
    assert (unknown.status_code, no_definition.status_code, bad_now.status_code) \
        == (422, 422, 422)
    assert "'cronjob'" in unknown.json()["error"] and "'soon'" in bad_now.json()["error"]


def test_a_pause_through_the_api_takes_a_note_and_an_end_and_the_json_shows_them(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    store.put("digest", DIGEST)
    until = (redis_now(redis_client) + timedelta(hours=2)).replace(microsecond=0)
    with console.api() as api:
        past = api.post(path("digest") + "/pause", json={"until": "2020-01-01T00:00:00Z"})
        paused = api.post(path("digest") + "/pause",
                          json={"note": "INC-9: mailer down", "until": until.isoformat()})
        shown = api.get(path("digest")).json()
    assert past.status_code == 422 and "not in the future" in past.json()["error"]
    assert paused.status_code == 200 and paused.json()["changed"] is True
    assert shown["enabled"] is False and shown["paused"]["note"] == "INC-9: mailer down"
    assert shown["paused"]["until"] == until.isoformat().replace("+00:00", "Z")
    assert shown["paused"]["by"]


def test_a_definition_s_dst_is_checked_and_stored_through_the_api(
    console: Served, store: Store
) -> None:
    good = {"cron": "30 1 * * *", "tz": "America/New_York", "class": "SettleWorker",
            "dst": {"repeated": "both"}}
    with console.api() as api:
        bad = api.put(path("settle"), json={**good, "dst": "fugitt"})
        put = api.put(path("settle"), json=good)
    assert bad.status_code == 422
    assert bad.json()["problems"] == [
        "schedule 'settle' (field 'dst'): 'fugitt' is not a preset; did you mean 'fugit'? "
        "(write a preset ('cron': repeated first, skipped shift; 'fugit': repeated both, "
        "skipped skip) or a mapping such as {repeated: first, skipped: shift} (repeated: "
        "first, last, both; skipped: shift, skip))"]
    assert put.status_code in (200, 201)
    row = store.get("settle")
    assert row is not None and row.definition == good


def test_a_schedules_report_and_health_are_served(console: Served, store: Store) -> None:
    store.put("r/1", {"cron": "* * * * *", "class": "W"})
    engine = Engine(Settings(), client=store.client)
    empty = config("schedules: {}\n")
    minute = minute_floor(redis_now(store.client))
    engine.run(empty, now=minute - timedelta(minutes=2))  # first seen then
    inbox = keys.outcomes_inbox("")
    store.client.lpush(inbox, json.dumps({"s": "r/1", "t": int(minute.timestamp() * 1000),
                                          "j": jid("r/1", minute), "e": "failed", "a": 2,
                                          "d": 40, "x": "E", "m": "no", "at": 0}))
    engine.run(empty, now=minute - timedelta(minutes=2))  # folds
    with console.api() as api:
        got = api.get(path("r/1") + "/report", params={
            "since": (minute - timedelta(minutes=1)).isoformat(),
            "until": (minute + timedelta(minutes=1)).isoformat()})
        detail = api.get(path("r/1")).json()
        bad = api.get(path("r/1") + "/report", params={"since": "yesterday"})
        spec = api.get("/api/v1/openapi.json").json()
    assert got.status_code == 200, got.text
    ticks = got.json()["ticks"]
    (failed,) = [t for t in ticks if t["outcome"] == "failed"]
    assert (failed["jid"], failed["attempts"], failed["error"]) == (jid("r/1", minute), 2,
                                                                    "E: no")
    assert ticks[-1]["outcome"] == "pending"
    assert detail["health"]["consecutive_failures"] == 1
    assert bad.status_code == 422 and bad.json()["error"].startswith("since 'yesterday'")
    assert "/api/v1/schedules/{name}/report" in spec["paths"]


def test_failing_schedules_come_first_in_the_status_and_have_a_filter(
        console: Served, store: Store) -> None:
    for name in ("ok", "bad", "worse"):
        store.put(name, {"cron": "* * * * *", "class": "W"})
    engine = Engine(Settings(), client=store.client)
    minute = minute_floor(redis_now(store.client))
    engine.run(config("schedules: {}\n"), now=minute - timedelta(minutes=5))
    for name, failures in (("ok", 0), ("bad", 1), ("worse", 3)):
        for k in range(4):
            tick = minute - timedelta(minutes=4 - k)
            failed = k >= 4 - failures
            store.client.lpush(keys.outcomes_inbox(""), json.dumps(
                {"s": name, "t": int(tick.timestamp() * 1000), "j": jid(name, tick),
                 "e": "failed" if failed else "succeeded", "a": 1, "d": 5, "at": 0,
                 "x": "E", "m": f"{name} broke"}))
    engine.run(config("schedules: {}\n"), now=minute - timedelta(minutes=5))
    with console.api() as api:
        status = api.get("/api/v1/status").json()
        listed = api.get("/api/v1/schedules", params={"state": "failing"}).json()["items"]
    assert status["failing"]["count"] == 2
    assert [(r["name"], r["health"]["consecutive_failures"], r["health"]["last_error"])
            for r in status["failing"]["schedules"]] == [("worse", 3, "E: worse broke"),
                                                         ("bad", 1, "E: bad broke")]
    assert sorted(r["name"] for r in listed) == ["bad", "worse"]
