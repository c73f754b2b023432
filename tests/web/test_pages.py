"""The console's forms without a browser: what they write is checked through the Store."""

from __future__ import annotations

import html
import json
import re

import pytest
import redis

from kiqbeat.audit import read_audit
from kiqbeat.core.limits import MAX_AUDIT_NOTE_CHARS
from kiqbeat.entrypoints.requests import from_event
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys
from kiqbeat.store import Store
from tests.support.console import (
    DIGEST,
    READER_TOKEN,
    Served,
    csrf_of,
    document_schedule,
    form_of,
    path,
)

BAD_YAML = "cron: '0 25 * * *'\nclass: DigestWorker\nqueu: mail\n"


def test_a_schedule_created_in_the_form_is_stored_and_an_invalid_one_shows_validates_messages(
    console: Served, store: Store
) -> None:
    with console.browser() as browser:
        form = browser.get("/new")
        bad = browser.post("/save", data={"csrf": csrf_of(form.text), "name": "digest",
                                          "definition": BAD_YAML})
        good = browser.post("/save", data={
            "csrf": csrf_of(form.text), "name": "team/digest", "note": "ticket 12",
            "definition": "cron: '0 9 * * 1-5'\ntz: Europe/Paris\nclass: DigestWorker\n"})
    assert bad.status_code == 422 and store.get("digest") is None
    with pytest.raises(ConfigError) as raised:
        store.check("digest", {"cron": "0 25 * * *", "class": "DigestWorker", "queu": "mail"})
    shown = html.unescape(bad.text)
    assert all(p in shown for p in raised.value.problems) and len(raised.value.problems) == 2
    assert BAD_YAML.splitlines()[2] in shown  # the text typed is kept for a fix
    assert good.status_code == 200 and "Created" in good.text
    row = store.get("team/digest")
    assert row is not None and row.definition == {"cron": "0 9 * * 1-5", "tz": "Europe/Paris",
                                                  "class": "DigestWorker"}
    assert [(a.actor, a.action, a.note) for a in
            read_audit(store.client, "", "team/digest")] == [
        ("web:alice", "put", "ticket 12")]


def test_a_documents_schedule_cannot_be_edited_or_deleted_in_the_console(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    document_schedule(redis_client, "owned")
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "owned"})
        edit = browser.get("/edit", params={"name": "owned"})
        delete = browser.post("/act", data={"csrf": csrf_of(page.text), "name": "owned",
                                            "action": "delete", "confirm": "1"})
    assert "belongs to the document" in page.text and "s3://bucket/kiqbeat.yaml" in page.text
    assert 'action="/save"' not in page.text
    assert (edit.status_code, delete.status_code) == (409, 422)
    assert store.get("owned") is not None


def test_delete_asks_for_confirmation_and_a_reader_sees_no_action(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "a"})
        unconfirmed = browser.post("/act", data={"csrf": csrf_of(page.text), "name": "a",
                                                 "action": "delete"})
        assert unconfirmed.status_code == 422 and store.get("a") is not None
        done = browser.post("/act", data={"csrf": csrf_of(page.text), "name": "a",
                                          "action": "delete", "confirm": "1"})
        assert done.status_code == 200 and store.get("a") is None
        again = browser.post("/act", data={"csrf": csrf_of(page.text), "name": "a",
                                           "action": "delete", "confirm": "1"})
        assert again.status_code == 404 and "No such schedule" in again.text  # none removed
    store.put("a", DIGEST)
    with console.browser(READER_TOKEN) as reader:
        page = reader.get("/schedule", params={"name": "a"})
        refused = reader.post("/act", data={"csrf": csrf_of(page.text), "name": "a",
                                            "action": "pause"})
    assert "Run now" not in page.text and "Pause</button>" not in page.text
    assert refused.status_code == 403
    row = store.get("a")
    assert row is not None and row.enabled


def test_the_app_mounted_under_a_prefix_in_another_asgi_app_links_and_signs_in_under_it(
    redis_url: str,
) -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from kiqbeat.engine import Engine
    from kiqbeat.settings import Settings
    from kiqbeat.web.app import create_app
    from kiqbeat.web.auth import Auth, Token
    from tests.support.console import OPERATOR_TOKEN, serve

    engine = Engine(Settings(redis_url=redis_url))
    engine.store().put("team/digest", DIGEST)  # its links (macros.html) are under it too
    inner = create_app(engine, Auth([Token("a", "operator", OPERATOR_TOKEN)]),
                       root_path="/kiqbeat")
    server, thread, url = serve(Starlette(routes=[Mount("/kiqbeat", inner)]))
    try:
        with httpx.Client(base_url=url) as client:
            first = client.get("/kiqbeat/")
            form = client.get("/kiqbeat/login")
            signed = client.post("/kiqbeat/login", data={
                "token": OPERATOR_TOKEN, "csrf": csrf_of(form.text), "next": "/kiqbeat/"})
            overview = client.get("/kiqbeat/")
            listed = client.get("/kiqbeat/schedules")
            css = client.get("/kiqbeat/static/console.css")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()
    assert first.headers["location"] == "/kiqbeat/login?next=%2Fkiqbeat%2F"
    assert signed.headers["location"] == "/kiqbeat/"
    links = re.findall(r'(?:href|action)="([^"]+)"', overview.text + listed.text)
    assert overview.status_code == listed.status_code == 200
    assert "/kiqbeat/schedule?name=team%2Fdigest" in links and all(
        link.startswith("/kiqbeat/") for link in links)
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]


def test_each_form_acts_on_the_schedule_shown_not_on_one_named_as_its_escaped_form(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    bidi = "nightly\u202ereport"
    decoy = "nightly\\u202ereport"  # a separate schedule, literally named as `bidi` is shown
    redis_client.hset(keys.definitions(""), bidi, json.dumps(DIGEST))  # other languages
    store.put(decoy, DIGEST)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": bidi})
        paused = browser.post("/act", data=form_of(page.text, "/act", 'value="pause"'))
        edit = browser.get("/edit", params={"name": bidi})
        # kiqbeat's own writers refuse such a name: saving it is refused, not the decoy saved
        saved = browser.post("/save", data=form_of(edit.text, "/save"))
        deleted = browser.post("/act", data=form_of(page.text, "/act", 'value="delete"')
                                | {"confirm": "1"})
    assert (paused.status_code, saved.status_code, deleted.status_code) == (200, 422, 200)
    assert decoy in html.unescape(page.text)  # `bidi` is shown escaped, as the decoy's name
    untouched = store.get(decoy)
    assert untouched is not None and untouched.enabled
    assert [a.action for a in read_audit(store.client, "", decoy)] == ["put"]
    assert [a.action for a in reversed(read_audit(store.client, "", bidi))] == [
        "pause", "remove"]
    assert store.get(bidi) is None


def test_the_edit_and_new_forms_submitted_unchanged_save_the_same_definition(
    console: Served, store: Store
) -> None:
    definition = {**DIGEST, "args": ["line one\nline two", "\u202e"], "queue": "mail"}
    store.put("digest", definition)
    with console.browser() as browser:
        edit = browser.get("/edit", params={"name": "digest"})
        saved = browser.post("/save", data=form_of(edit.text, "/save"))
        new = browser.get("/new")
        created = browser.post("/save", data=form_of(new.text, "/save") | {"name": "fresh"})
    assert saved.status_code == 200 and "Saved" in saved.text
    row = store.get("digest")
    assert row is not None and row.definition == definition
    assert created.status_code == 200 and store.get("fresh") is not None


def test_a_note_over_the_audit_trails_bound_is_refused_not_cut(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    long_note = "n" * (MAX_AUDIT_NOTE_CHARS + 1)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "a"})
        refused = browser.post("/act", data=form_of(page.text, "/act", 'value="pause"') | {
            "note": long_note})
    with console.api() as api:
        answers = [api.post(path("a") + "/pause", json={"note": long_note}),
                   api.put(path("a"), json=DIGEST, headers={"x-kiqbeat-note": long_note}),
                   api.delete(path("a"), headers={"x-kiqbeat-note": long_note}),
                   api.post(path("a") + "/backfill", json={"note": long_note})]
    assert refused.status_code == 422 and f"at most {MAX_AUDIT_NOTE_CHARS}" in refused.text
    assert [a.status_code for a in answers] == [422] * 4
    assert all(f"at most {MAX_AUDIT_NOTE_CHARS}" in a.json()["error"] for a in answers)
    row = store.get("a")
    assert row is not None and row.enabled and read_audit(store.client, "", "a") == [
        a for a in read_audit(store.client, "", "a") if a.action == "put"]


def test_the_schedule_page_shows_its_life_and_skips_its_next_ticks_from_a_form(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    store.put("limited", {**DIGEST, "max_runs": 5, "jitter": "90s", "overlap": "skip",
                          "end_at": "2099-01-01T00:00:00Z", "except": ["2099-12-25"]})
    redis_client.hset(keys.runs(""), "limited", 3)  # as three pushes left it
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "limited"})
        skipped = browser.post("/act", data=form_of(page.text, "/act", 'value="skip"')
                               | {"count": "2"})
        bad = browser.post("/act", data=form_of(page.text, "/act", 'value="skip"')
                           | {"count": "two"})
        after = browser.get("/schedule", params={"name": "limited"})
    text = html.unescape(page.text)
    assert "3 of 5 (max_runs)" in text and "up to 90 s after its tick" in text
    assert "2099-01-01T00:00:00Z" in text and "2099-12-25 (Asia/Kolkata)" in text
    assert "skip: no tick while its previous job waits or runs" in text
    assert skipped.status_code == 200 and bad.status_code == 422
    # the request model's reading and message, as `kiqbeat skip --count two` gets it
    assert "count: expected a whole number of ticks, 1 to 10,000, not 'two'" in html.unescape(
        bad.text)
    assert redis_client.hget(keys.skips(""), "limited") == "2"
    assert re.search(r'class="life-skips">2<', after.text)
    assert next(a.action for a in read_audit(store.client, "", "limited")) == "skip"


DEEP: list[object] = [1]
for _ in range(120):  # deeper than Sidekiq's JSON parser reads (MAX_JSON_DEPTH)
    DEEP = [DEEP]


@pytest.mark.parametrize(("action", "field", "typed", "value"), [
    ("skip", "count", "10001", 10_001),
    ("skip", "count", "0", 0),
    ("trigger", "args", json.dumps(DEEP), DEEP),
])
def test_a_forms_bad_value_is_refused_with_the_message_the_cli_the_lambda_and_the_api_give(
    console: Served, store: Store, redis_client: redis.Redis, action: str, field: str,
    typed: str, value: object,
) -> None:
    """A form's request is read by the request model of every other front end and run by
    their one dispatch: the same check, the same message (only the field's name is each
    front end's), and nothing done."""
    store.put("a", DIGEST)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "a"})
        bad = browser.post("/act", data=form_of(page.text, "/act", f'value="{action}"')
                           | {field: typed})
    with pytest.raises(ConfigError) as refused:
        from_event({"kiqbeat": action, "name": "a", field: value})
    assert bad.status_code == 422
    message = str(refused.value).replace(f'the event\'s "{field}"', field)
    assert message in html.unescape(bad.text)
    assert redis_client.hget(keys.skips(""), "a") is None
    assert redis_client.llen("queue:default") == 0


def test_the_paused_filter_and_the_overviews_count_see_pause_records(
    console: Served, store: Store
) -> None:
    for name in ("held", "flagged", "running"):
        store.put(name, DIGEST)
    store.pause("held", note="a pause record")  # kiqbeat:paused, the definition untouched
    store.put("flagged", {**DIGEST, "enabled": False})  # the older way
    with console.api() as api:
        assert api.get("/api/v1/status").json()["counts"]["paused"] == 2
        def names(state: str) -> list[str]:
            got = api.get("/api/v1/schedules", params={"state": state}).json()
            return sorted(r["name"] for r in got["items"])
        assert names("paused") == ["flagged", "held"]
        assert names("active") == ["running"]


def test_the_schedule_page_marks_each_dst_night_with_the_schedule_s_policy(
    console: Served, store: Store
) -> None:
    # Sundays of March at 02:30 in New York: each year's spring-forward night is one, which
    # dst: fugit leaves unfired, and the page says so on that night's line.
    store.put("march", {"cron": "30 2 * 3 0", "tz": "America/New_York", "class": "MarchJob",
                        "dst": "fugit"})
    store.put("march_cron", {"cron": "30 2 * 3 0", "tz": "America/New_York",
                             "class": "MarchJob"})
    with console.browser() as browser:
        fugit = html.unescape(browser.get("/schedule", params={"name": "march"}).text)
        cron = html.unescape(browser.get("/schedule", params={"name": "march_cron"}).text)
    assert "02:30 skipped by DST; not fired that day (dst: skip)" in fugit
    assert "02:30 skipped by DST; fired when the gap ended (dst: shift)" in cron
    assert "not fired that day" not in cron
