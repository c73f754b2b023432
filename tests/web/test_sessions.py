"""Sessions, CSRF, the token rule and the throttle (issue 26): each against a real console
over a real Redis, the forgery the issue found replayed first."""

from __future__ import annotations

import base64
import secrets
import time

import httpx
import pytest
import redis

from kiqbeat.errors import ConfigError
from kiqbeat.web.auth import NONCE_CHARS, Auth, Principal, Token, token_bits
from kiqbeat.web.throttle import OVERALL_BURST, PER_ADDRESS_BURST, PER_ADDRESS_REFILL_S, Throttle
from tests.support.console import OPERATOR_TOKEN, READER_TOKEN, Served, csrf_of

# The issue's forgery: a nonce cookie the client chose, read by the console as
# "ROLE\nEXPIRES\nNAME" once its CSRF field was taken for a session cookie's signature.
FORGING_NONCE = "\n99999999999\nmallory"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _quoted_cookie(value: str) -> str:
    """A cookie value as a quoted string, newlines as octal escapes (Python's and
    Starlette's cookie parsers unquote them)."""
    return '"' + value.replace("\\", "\\134").replace("\n", "\\012") + '"'


def _session_keys(client: redis.Redis) -> list[bytes]:
    return list(client.scan_iter(match="kiqbeat:web_session:*"))


def test_the_issues_forged_session_from_a_chosen_nonce_reads_nothing(console: Served) -> None:
    with httpx.Client(base_url=console.url) as mallory:
        login = mallory.get("/login", headers={
            "cookie": f"kiqbeat_csrf={_quoted_cookie(FORGING_NONCE)}"})
        field = csrf_of(login.text)
        forged = _b64(b"csrf\0" + FORGING_NONCE.encode()) + "." + _b64(bytes.fromhex(field))
        answers = {path: mallory.get(path, headers={"cookie": f"kiqbeat_session={forged}"},
                                     follow_redirects=False)
                   for path in ("/", "/audit", "/schedules", "/metrics")}
    assert {p: a.status_code for p, a in answers.items()} == {
        "/": 303, "/audit": 303, "/schedules": 303, "/metrics": 401}
    # The chosen nonce was not even kept: the page came with a nonce of the console's own.
    issued = login.cookies.get("kiqbeat_csrf")
    assert issued is not None and len(issued) == NONCE_CHARS and issued != FORGING_NONCE


def test_no_csrf_field_verifies_as_a_session_whatever_its_nonce() -> None:
    auth = Auth([Token("alice", "operator", OPERATOR_TOKEN)])
    for nonce in (Auth.new_nonce(), FORGING_NONCE, "x" * NONCE_CHARS):
        field = bytes.fromhex(auth.csrf_field(nonce))
        for payload in (nonce.encode(), b"csrf\0" + nonce.encode(),
                        b"kiqbeat-csrf-v2\0" + nonce.encode()):
            assert auth.verify_session(_b64(payload) + "." + _b64(field)) is None


def test_only_the_roles_operator_and_reader_make_a_session() -> None:
    auth = Auth([Token("alice", "operator", OPERATOR_TOKEN)])
    sid = Auth.new_session_id()
    for role in ("csrf\0", "admin", "", "operator "):
        cookie = auth._sign(f"{sid}\n{role}\n9999999999\nmallory".encode())
        assert auth.verify_session(cookie) is None, role
    good = auth._sign(f"{sid}\nreader\n9999999999\nbob".encode())
    session = auth.verify_session(good)
    assert session is not None and session.principal == Principal("bob", "reader")
    with pytest.raises(ConfigError, match="role"):
        Auth([Token("x", "admin", OPERATOR_TOKEN)])


def test_a_nonce_cookie_of_another_shape_is_replaced_never_used(console: Served) -> None:
    auth = Auth([Token("alice", "operator", OPERATOR_TOKEN),  # the console's own tokens
                 Token("bob", "reader", READER_TOKEN)])
    for chosen in ("a" * 20, "a" * (NONCE_CHARS - 1) + ".", "a" * (NONCE_CHARS + 1),
                   "a" * (NONCE_CHARS - 1) + "\n", FORGING_NONCE):
        cookie = {"cookie": f"kiqbeat_csrf={_quoted_cookie(chosen)}"}
        with httpx.Client(base_url=console.url) as browser:
            page = browser.get("/login", headers=cookie)
            issued = page.cookies.get("kiqbeat_csrf")
            assert issued is not None and issued != chosen and len(issued) == NONCE_CHARS
            assert csrf_of(page.text) == auth.csrf_field(issued)
            # A field made for the chosen nonce is refused.
            refused = browser.post("/login", headers=cookie, data={
                "token": OPERATOR_TOKEN, "csrf": auth.csrf_field(chosen)})
            assert refused.status_code == 403, chosen


def test_sign_out_ends_the_session_everywhere_even_for_a_copied_cookie(
    console: Served, redis_client: redis.Redis
) -> None:
    with console.browser() as browser:
        assert len(_session_keys(redis_client)) == 1
        copied = browser.cookies.get("kiqbeat_session")
        assert copied is not None
        with httpx.Client(base_url=console.url) as thief:
            thief.cookies.set("kiqbeat_session", copied)
            assert thief.get("/", follow_redirects=False).status_code == 200
            page = browser.get("/")
            out = browser.post("/logout", data={"csrf": csrf_of(page.text)},
                               follow_redirects=False)
            assert out.status_code == 303
            assert _session_keys(redis_client) == []
            after = thief.get("/", follow_redirects=False)
            metrics = thief.get("/metrics")
    assert after.status_code == 303 and after.headers["location"].startswith("/login")
    assert metrics.status_code == 401


def test_the_csrf_nonce_is_rotated_at_sign_in_and_the_old_field_refused(
    console: Served, redis_client: redis.Redis
) -> None:
    redis_client.hset("kiqbeat:schedules", "a", '{"cron": "0 9 * * *", "class": "W"}')
    with httpx.Client(base_url=console.url, follow_redirects=True) as browser:
        login = browser.get("/login")
        before_nonce, before_field = browser.cookies.get("kiqbeat_csrf"), csrf_of(login.text)
        done = browser.post("/login", data={"token": OPERATOR_TOKEN, "csrf": before_field})
        assert done.status_code == 200
        after_nonce = browser.cookies.get("kiqbeat_csrf")
        assert after_nonce and after_nonce != before_nonce
        assert csrf_of(done.text) != before_field
        stale = browser.post("/act", data={"name": "a", "action": "pause",
                                           "csrf": before_field})
        fresh = browser.post("/act", data={"name": "a", "action": "pause",
                                           "csrf": csrf_of(done.text)})
    assert stale.status_code == 403 and fresh.status_code == 200


def test_tokens_with_too_little_entropy_are_refused_with_the_rule() -> None:
    weak = ["c" * 40, "op-" + "7" * 29, "password12345678", "abababababababababababab",
            "Ab3" * 8, secrets.token_urlsafe(12)]  # the last: 16 characters, too short
    for secret in weak:
        with pytest.raises(ConfigError, match="token must be") as raised:
            Auth.from_environ({"KIQBEAT_WEB_TOKEN": f"alice:{secret}"})
        assert secret not in str(raised.value)
    for _ in range(200):  # what the docs say to run is always accepted
        for secret in (secrets.token_urlsafe(32), secrets.token_urlsafe(16),
                       secrets.token_hex(16)):
            assert Auth.from_environ({"KIQBEAT_WEB_TOKEN": secret}).tokens
    assert token_bits("abcdefghijklmnopqrst") > 72 > token_bits("password12345678")


def test_wrong_bearer_tokens_are_throttled_with_a_429_that_says_when(console: Served) -> None:
    with console.api("wrong-" + secrets.token_urlsafe(24)) as guesser:
        codes = [guesser.get("/api/v1/status").status_code for _ in range(PER_ADDRESS_BURST)]
        refused = guesser.get("/api/v1/status")
        metrics = guesser.get("/metrics")
    assert codes == [401] * PER_ADDRESS_BURST
    assert refused.status_code == 429 and metrics.status_code == 429
    assert "too many wrong tokens" in refused.json()["error"]
    assert 1 <= int(refused.headers["retry-after"]) <= PER_ADDRESS_REFILL_S + 1
    # A right token from the throttled address gets the same answer (no oracle) ...
    with console.api() as right:
        assert right.get("/api/v1/status").status_code == 429
        # ... and the sign-in form too: one throttle for every way a token is presented.
        with httpx.Client(base_url=console.url) as browser:
            page = browser.get("/login")
            login = browser.post("/login", data={"token": OPERATOR_TOKEN,
                                                 "csrf": csrf_of(page.text)})
    assert login.status_code == 429 and "Too many wrong tokens" in login.text
    assert "kiqbeat_session" not in login.headers.get("set-cookie", "")


def test_the_sign_in_form_is_throttled_per_address(console: Served) -> None:
    with httpx.Client(base_url=console.url) as browser:
        page = browser.get("/login")
        codes = [browser.post("/login", data={"token": secrets.token_urlsafe(24),
                                              "csrf": csrf_of(page.text)}).status_code
                 for _ in range(PER_ADDRESS_BURST + 1)]
    assert codes == [401] * PER_ADDRESS_BURST + [429]
    with console.api(READER_TOKEN) as reader:  # the same address: refused too, for now
        assert reader.get("/api/v1/status").status_code == 429


def test_the_throttle_refills_and_an_overall_flood_spares_addresses_that_never_failed(
) -> None:
    now = [1000.0]
    throttle = Throttle(clock=lambda: now[0])
    for _ in range(PER_ADDRESS_BURST):
        assert throttle.wait_s("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == pytest.approx(PER_ADDRESS_REFILL_S)
    now[0] += PER_ADDRESS_REFILL_S
    assert throttle.wait_s("10.0.0.1") == 0
    # Many addresses, a few guesses each: the overall bucket empties ...
    for i in range(OVERALL_BURST):
        throttle.failed(f"10.1.{i // 250}.{i % 250}")
    assert throttle.wait_s("10.1.0.1") > 0 and throttle.wait_s("10.0.0.1") > 0
    # ... and an address with no wrong token is still served.
    assert throttle.wait_s("192.0.2.7") == 0
    now[0] += 3600
    assert throttle.wait_s("10.1.0.1") == 0


def test_a_session_record_expires_with_its_cookie(console: Served,
                                                  redis_client: redis.Redis) -> None:
    before = time.time()
    with console.browser():
        (key,) = _session_keys(redis_client)
        ttl = redis_client.ttl(key)
    assert 12 * 3600 - 60 <= ttl <= 12 * 3600 and time.time() - before < 60
