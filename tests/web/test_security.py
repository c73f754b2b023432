"""The console's security promises (kiqbeat.web.auth, app.py): each against a real server."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import httpx
import pytest
import redis

from kiqbeat.entrypoints.cli import main
from kiqbeat.errors import ConfigError, escaped, shown_name
from kiqbeat.redis import keys
from kiqbeat.redis.names import build
from kiqbeat.store import Store
from kiqbeat.web.auth import SESSION_S, Auth, Principal, Token, is_loopback
from kiqbeat.web.recent import Recent
from tests.support.console import OPERATOR_TOKEN, READER_TOKEN, Served, Start, csrf_of

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [1]}
# Markup, a terminal escape, bidi overrides and a zero-width joiner: a name that would run
# script, colour a terminal, or show "gpj.exe" reversed as "exe.jpg". kiqbeat's writers
# refuse such a name; another language's plain HSET does not.
HOSTILE = "<script>alert(1)</script>\x1b[31m\u202egpj.exe\u2066\u200d"
MARKUP = "<script>alert(3)</script>"  # printable: kiqbeat's writers accept it
HOSTILE_ARGS = ["<img src=x onerror=alert(1)>", "\u202e", "\x00"]
PAGES = ("/", "/schedules", "/audit", "/new")
CAROL_TOKEN = "c-9fK2pQx7LmZ4tR8vW1yN3bH6"  # secrets.token_urlsafe-like


def test_the_command_refuses_a_non_loopback_address_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("KIQBEAT_WEB_TOKEN", "KIQBEAT_WEB_READ_TOKEN", "KIQBEAT_WEB_TOKEN_FILE",
                 "KIQBEAT_WEB_READ_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for host in ("0.0.0.0", "192.168.1.20", "::", "console.internal"):
        assert main(["web", "--host", host, "--redis-url", "redis://127.0.0.1:1"]) == 1
        assert "refusing to listen" in capsys.readouterr().err


def test_short_or_blank_tokens_are_refused_naming_the_variable_not_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    with pytest.raises(ConfigError) as raised:
        Auth.from_environ({"KIQBEAT_WEB_TOKEN": "alice:short-secret"})
    assert "KIQBEAT_WEB_TOKEN" in str(raised.value) and "short-secret" not in str(raised.value)
    auth = Auth.from_environ({"KIQBEAT_WEB_TOKEN": f"alice:{OPERATOR_TOKEN}\n{READER_TOKEN}",
                              "KIQBEAT_WEB_READ_TOKEN": f"carol:{CAROL_TOKEN}"})
    assert [(t.name, t.role) for t in auth.tokens] == [
        ("alice", "operator"), ("operator", "operator"), ("carol", "reader")]
    assert OPERATOR_TOKEN not in repr(auth.tokens)


def test_a_session_is_signed_expires_and_is_refused_when_forged() -> None:
    auth = Auth([Token("alice", "operator", OPERATOR_TOKEN)])
    now = time.time()
    cookie = auth.session(Principal("alice", "operator"), Auth.new_session_id(), now_s=now)
    session = auth.verify_session(cookie, now_s=now + 60)
    assert session is not None and session.principal == Principal("alice", "operator")
    assert auth.verify_session(cookie, now_s=now + SESSION_S + 1) is None
    mac = cookie.split(".")[1]
    forged = auth._sign(b"x" * 24 + b"\noperator\n9999999999\nmallory").split(".")[0] + "." + mac
    assert auth.verify_session(forged) is None and auth.verify_session("x.y") is None
    other = Auth([Token("alice", "operator", CAROL_TOKEN)])
    assert other.verify_session(cookie, now_s=now) is None  # new tokens end every session
    assert OPERATOR_TOKEN not in cookie


def test_signing_in_sets_an_httponly_samesite_strict_cookie_and_a_bad_token_is_refused(
    console: Served,
) -> None:
    with httpx.Client(base_url=console.url) as browser:
        form = browser.get("/login")
        assert 'name="token"' in form.text
        refused = browser.post("/login", data={"token": "n" * 32, "csrf": csrf_of(form.text)})
        assert refused.status_code == 401 and "kiqbeat_session" not in refused.headers.get(
            "set-cookie", "")
        done = browser.post("/login", data={"token": OPERATOR_TOKEN, "csrf": csrf_of(form.text),
                                            "next": "//evil.example/"})
    assert done.status_code == 303 and done.headers["location"] == "/"  # no open redirect
    cookie = done.headers["set-cookie"]
    assert cookie.startswith("kiqbeat_session=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert OPERATOR_TOKEN not in cookie


def test_a_form_without_its_csrf_field_or_from_another_origin_changes_nothing(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "a"})
        token = csrf_of(page.text)
        without = browser.post("/act", data={"name": "a", "action": "pause"})
        forged = browser.post("/act", data={"name": "a", "action": "pause", "csrf": "0" * 64})
        elsewhere = browser.post("/act", data={"name": "a", "action": "pause", "csrf": token},
                                 headers={"origin": "https://evil.example"})
        assert (without.status_code, forged.status_code, elsewhere.status_code) == (403,) * 3
        row = store.get("a")
        assert row is not None and row.enabled
        done = browser.post("/act", data={"name": "a", "action": "pause", "csrf": token})
    assert done.status_code == 200 and "Paused." in done.text
    row = store.get("a")
    assert row is not None and not row.enabled
    # A browser without the nonce cookie (another site's form) cannot reuse the field.
    with console.browser() as other:
        other.cookies.delete("kiqbeat_csrf")
        refused = other.post("/act", data={"name": "a", "action": "resume", "csrf": token})
    assert refused.status_code == 403


def test_every_page_and_answer_carries_a_strict_policy_and_no_script(
    console: Served, store: Store
) -> None:
    store.put("a", DIGEST)
    with console.browser() as browser, console.api() as api:
        answers = [browser.get(p) for p in (*PAGES, "/login")]
        answers += [browser.get("/schedule", params={"name": "a"}),
                    api.get("/api/v1/schedules"), api.get("/api/v1/nothing")]
    for answer in answers:
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "script-src" not in policy and "unsafe-inline" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "<script" not in answer.text.lower() and " on" + "load=" not in answer.text


def test_names_and_args_from_the_store_are_shown_escaped_and_visible(
    console: Served, redis_client: redis.Redis, store: Store
) -> None:
    store.put(MARKUP, {**DIGEST, "args": HOSTILE_ARGS, "queue": "<b>q</b>"})
    store.trigger(MARKUP, HOSTILE_ARGS)
    # Written by other languages: the name kiqbeat refuses, and an invalid definition.
    redis_client.hset(keys.definitions(""), HOSTILE, json.dumps(
        {**DIGEST, "args": HOSTILE_ARGS}))
    redis_client.hset(keys.definitions(""), "<svg onload=alert(2)>", "{\"cron\": \"<i>\"}")
    redis_client.hset(keys.rejected(""), "<svg onload=alert(2)>", "<iframe src=x>")
    with console.browser() as browser:
        pages = [browser.get(p).text for p in PAGES]
        pages += [browser.get("/schedules", params={"prefix": "<"}).text,
                  browser.get("/schedules", params={"state": "set_aside"}).text,
                  browser.get("/schedule", params={"name": MARKUP}).text,
                  browser.get("/audit", params={"name": MARKUP}).text,
                  browser.get("/schedule", params={"name": HOSTILE}).text]
    for html in pages:
        for raw in ("<script>alert", "<img src", "<svg", "<iframe", "<b>q", "<i>"):
            assert raw not in html
        for invisible in ("\x1b", "\u202e", "\u2066", "\u200d", "\x00"):
            assert invisible not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[6]  # its args, in the definition
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m\\u202egpj.exe" in pages[-1]


def test_no_token_reaches_a_page_an_answer_a_header_or_a_log(
    console: Served, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store.put("a", DIGEST)
    seen: list[str] = []
    with console.browser() as browser, console.api() as api, console.api(READER_TOKEN) as rd:
        answers = [browser.get(p) for p in PAGES]
        answers += [browser.get("/schedule", params={"name": "a"}),
                    browser.post("/login", data={"token": OPERATOR_TOKEN}),
                    api.get("/api/v1/status"), api.put("/api/v1/schedules/b", json={"x": 1}),
                    rd.post("/api/v1/schedules/a/pause"), api.get("/metrics"),
                    api.get("/api/v1/openapi.json")]
        for answer in answers:
            seen += [answer.text, str(answer.headers)]
    seen += [r.getMessage() for r in caplog.records]
    for text in seen:
        assert OPERATOR_TOKEN not in text and READER_TOKEN not in text


def test_an_anonymous_console_answers_only_to_a_loopback_host(start_console: Start) -> None:
    served = start_console(tokens=[], anonymous=True)
    with httpx.Client(base_url=served.url) as client:
        assert client.get("/api/v1/status").status_code == 200
        assert client.get("/").status_code == 200
        rebound = client.get("/api/v1/status", headers={"host": "attacker.example:8080"})
    assert rebound.status_code == 403


def test_the_console_works_under_its_documented_least_privilege_acl(
    start_console: Start, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/console.md's ACL line: every page, search, API read, write and action works."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "console.md").read_text()
    line = doc.split("ACL SETUSER kiqbeat-console ", 1)[1].split("```", 1)[0]
    rules = [r.replace("PASSWORD", "console-pw") for r in line.split()]
    redis_client.execute_command("ACL", "SETUSER", "kiqbeat-console", "reset", *rules)
    try:
        url = redis_url.replace("redis://", "redis://kiqbeat-console:console-pw@")
        served = start_console(url=url)
        with served.api() as api, served.browser() as browser:
            assert api.put("/api/v1/schedules/a%2Fb", json=DIGEST).status_code == 201
            for verb in ("pause", "resume", "trigger"):
                assert api.post(f"/api/v1/schedules/a%2Fb/{verb}").status_code in (200, 201)
            assert api.post("/api/v1/schedules/a%2Fb/backfill", json={}).status_code == 200
            for page in (*PAGES, "/schedules?prefix=a", "/schedules?state=paused",
                         "/schedules?state=set_aside", "/schedules?state=failing",
                         "/schedule?name=a%2Fb"):
                assert browser.get(page).status_code == 200, page
            for answer in (api.get("/api/v1/status"), api.get("/api/v1/missed"),
                           api.get("/api/v1/audit"), api.get("/metrics"),
                           api.get("/api/v1/schedules/a%2Fb/report")):
                assert answer.status_code == 200
            assert api.delete("/api/v1/schedules/a%2Fb").status_code == 204
        with redis.Redis.from_url(url) as user:  # its thread's work, under the same user
            build(user, "")
            recent = Recent(user, "")
            while not recent.step():
                pass
    finally:
        redis_client.acl_deluser("kiqbeat-console")
    assert re.search(r"\+zrangebylex", line)


def test_an_anonymous_console_answers_to_exactly_the_loopback_hosts_it_may_listen_on(
    start_console: Start,
) -> None:
    served = start_console(tokens=[], anonymous=True)
    hosts = ("127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "::1", "0.0.0.0",
             "192.168.1.20", "console.internal", "127.0.0.1.evil.example")
    with httpx.Client(base_url=served.url) as client:
        answered = {host: client.get("/api/v1/status", headers={
            "host": (f"[{host}]" if ":" in host else host) + ":8080"}).status_code != 403
            for host in hosts}
    assert answered == {host: is_loopback(host) for host in hosts}
    assert [h for h, ok in answered.items() if ok] == ["127.0.0.1", "127.0.0.2", "localhost",
                                                       "LOCALHOST", "::1"]


def test_names_the_command_line_tells_apart_look_different_in_the_console(
    console: Served, redis_client: redis.Redis
) -> None:
    lookalikes = ["x\u3164", "x\u115f", "x\u2800", "x\u00a0", "x\u202f", "x\u034f"]
    for name in lookalikes:
        redis_client.hset(keys.definitions(""), name, json.dumps(DIGEST))
    with console.browser() as browser:
        pages = [browser.get("/schedule", params={"name": n}).text for n in lookalikes]
    for name, html in zip(lookalikes, pages, strict=True):
        assert name[1] not in html
        assert f"<h1>{escaped(name)} " in html and escaped(name) in shown_name(name)
