"""A value from outside shown in a message, a line or JSON output: escaped so that nothing
can forge or hide text on a terminal or in a log line, clipped, and (in JSON) lossless."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kiqbeat.core.limits import MAX_REASON_CHARS, MAX_SHOWN_CHARS
from kiqbeat.errors import (
    ConfigError,
    escaped,
    foreign_json,
    json_name,
    shown,
    shown_name,
    shown_text,
)
from kiqbeat.redis.connection import connect
from kiqbeat.settings import Settings

# Each would forge or hide text shown raw: a colour, a window title, a reversed line, a
# new line starting with a made-up message, a zero-width space, a Hangul filler, a byte
# that is not UTF-8 (read with surrogateescape).
FORGING = ["\x1b[31mred", "\x1b]0;title\x07", "a\u202ebc", "a\u2066b\u2069", "a\u200fb",
           "one\nset aside: forged", "a\rb", "a\u200bb", "a\u3164b", "bad\udcffname",
           "a\x7fb", "a\x85b", "a\u2028b", "tag\U000e0041"]


@pytest.mark.parametrize("text", FORGING)
def test_every_forging_character_is_shown_escaped_in_each_form(text: str) -> None:
    for form in (shown(text), shown_name(text), shown_text(text)):
        assert form.isprintable(), form
        assert "\u3164" not in form
        assert "\\" in form  # visibly escaped


def test_escapes_are_the_python_ones_a_reader_recognises() -> None:
    assert shown_text("a\x1bb\u202ec\udcffd\ne") == "a\\x1bb\\u202ec\\udcffd\\ne"


def test_a_plain_name_is_shown_as_it_is_and_an_escaped_one_quoted() -> None:
    assert shown_name("digest:42 résumé") == "digest:42 résumé"
    assert shown_name("a\x1bb") == "'a\\x1bb'"
    # A name that merely looks escaped is quoted too, so a quoted name always means escaping.
    assert shown_name("a\\x1bb") == "'a\\\\x1bb'"
    assert shown_name("'quoted'") != "'quoted'"
    assert shown_name(b"bad\xff") == "'bad\\udcff'"


@given(st.text(), st.integers(min_value=1, max_value=10 * MAX_SHOWN_CHARS))
def test_every_form_is_printable_and_clipped_to_the_bound(text: str, limit: int) -> None:
    # Quotes and "..." beyond the bound; a reason (shown_text) may be longer than a value.
    shown_bound = max(min(limit, MAX_SHOWN_CHARS) + 5, 2 + 5)
    text_bound = min(limit, MAX_REASON_CHARS) + 3
    for form, bound in ((shown(text, limit), shown_bound), (shown_name(text, limit), shown_bound),
                        (shown_text(text, limit), text_bound)):
        assert form.isprintable()
        assert len(form) <= bound, (form, limit)


def test_a_huge_value_is_never_repeated_whole() -> None:
    huge = "x" * 100_000
    for form in (shown(huge, 10**6), shown_name(huge), shown_text(huge)):
        assert len(form) <= MAX_SHOWN_CHARS + 5
        assert form.endswith("...")
    # A message kiqbeat stored (a set-aside reason) may be longer, and is bounded too.
    assert len(shown_text(huge, 10**6)) == MAX_REASON_CHARS + 3


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=10))
def test_json_output_is_valid_printable_and_lossless(value: object) -> None:
    for indent in (None, 2):
        text = foreign_json(value, indent=indent)
        assert json.loads(text) == value
        assert text.replace("\n", "").isprintable()


def test_json_output_keeps_ordinary_non_ascii_text_as_it_is() -> None:
    assert foreign_json({"name": "résumé 日本"}) == '{"name": "résumé 日本"}'
    assert foreign_json(["a\u202eb"]) == '["a\\u202eb"]'


def test_a_name_that_is_not_utf8_is_given_in_json_escaped_with_its_bytes_in_hex() -> None:
    fields = json_name(b"bad\xff\x1b".decode(errors="surrogateescape"))
    assert fields == {"name": "bad\\udcff\\x1b", "name_hex": "626164ff1b"}
    assert bytes.fromhex(fields["name_hex"]) == b"bad\xff\x1b"
    assert json_name("good\x1b") == {"name": "good\x1b"}  # UTF-8: lossless as it is


def test_the_settings_repr_never_shows_a_redis_password() -> None:
    settings = Settings(redis_url="redis://kiqbeat:S3CRET-pass@db.example:6380/2",
                        fallback_redis_url="rediss://:0THER%40secret@cache:6379/0")
    for text in (repr(settings), str(settings), f"{settings}", repr([settings])):
        assert "S3CRET" not in text and "0THER" not in text
        assert "db.example:6380/2" in text
    assert "<unparsable Redis URL>" in repr(Settings(redis_url="redis://u:p@ss@w0rd@h/0"))
    assert "ss@w0rd" not in repr(Settings(redis_url="redis://u:p@ss@w0rd@h/0"))


def test_a_missing_ca_file_is_reported_before_any_connection(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    with pytest.raises(ConfigError) as caught:
        connect(f"rediss://127.0.0.1:1/0?ssl_ca_certs={missing}")
    assert str(caught.value) == (f"the CA file '{missing}' given by ssl_ca_certs does not "
                                 "exist")


def test_an_unreadable_tls_file_is_reported_as_unreadable(tmp_path: Path) -> None:
    # A directory: unreadable as a file even for root (who reads any file whatever its mode).
    with pytest.raises(ConfigError, match=r"the certificate file '.*' given by ssl_certfile "
                                          r"cannot be read: Is a directory"):
        connect(f"rediss://127.0.0.1:1/0?ssl_certfile={tmp_path}")
    key = tmp_path / "key.pem"
    key.write_text("")
    key.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(ConfigError, match=r"key file .* cannot be read: Permission denied"):
            connect(f"rediss://127.0.0.1:1/0?ssl_keyfile={key}")


@given(st.text(max_size=80))
@example("a'\"\x00")  # both quotes: repr escapes the one it quotes with (Hypothesis' find)
def test_escaped_shows_a_whole_name_as_shown_name_escapes_it(text: str) -> None:
    """The same escapes, except where shown_name's quoting must add its own (as repr does): a
    backslash doubled, and a quote of the kind around it (a name starting with a quote, or
    holding both kinds), so a quoted name always reads back as one."""
    whole = escaped(text)
    assert whole.isprintable() and (not text or whole in shown_name(text, 400)
                                    or "\\" in text or text[0] in "'\""
                                    or ("'" in text and '"' in text))


@pytest.mark.parametrize("text", FORGING)
def test_escaped_leaves_no_forging_character_and_does_not_clip(text: str) -> None:
    long = text * 100
    assert escaped(long) == escaped(text) * 100
    assert all(c not in escaped(long) for c in "\x1b\u202e\u2066\u200f\n\r\u200b\u3164\udcff")


def test_operator_answers_carry_a_name_that_is_not_utf8_in_hex_and_stay_json() -> None:
    from datetime import UTC, datetime

    from kiqbeat.core.report import PushedJob
    from kiqbeat.operator import Backfill, Triggered

    name = b"bad\xff".decode(errors="surrogateescape")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    job = PushedJob(name, at, "0" * 24, "default")
    backfilled = Backfill(pushed=1, last=job, jobs=[job]).as_dict()
    triggered = Triggered(name, "manual" + "0" * 18, "default", at).as_dict()
    assert backfilled["last"]["schedule_hex"] == "626164ff"
    assert backfilled["jobs"][0]["schedule_hex"] == "626164ff"
    assert triggered["name_hex"] == "626164ff"
    json.dumps([backfilled, triggered]).encode()  # valid JSON that UTF-8 can carry
