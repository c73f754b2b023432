"""Any text in any position of a cron expression is read, or refused with a ConfigError.

Each field position of the 5- and 6-field forms (the other fields valid), and the zone
position, gets arbitrary text: any Unicode, text over the cron alphabet, and text mixing
that alphabet with non-ASCII digits, spaces and control characters. Nothing but a Cron or a
ConfigError may come out, and a ConfigError names the field and shows the value, cut short.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kiqbeat.core.cron import Cron, parse_cron
from kiqbeat.core.natural import is_natural
from kiqbeat.errors import ConfigError

FUZZ_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CRON_ALPHABET = "0123456789*,-/abcdefghijklmnopqrstuvwxyzLW#?"
# Unicode digits and numbers (Nd: '٣' '５', No: '¹' '½', Nl: 'ⅻ'), separators (Zs: U+00A0,
# U+3000; Zl, Zp) and control or format characters (Cc: NUL, TAB; Cf: U+200B).
ODD_CHARACTERS = st.characters(categories=["Nd", "No", "Nl", "Zs", "Zl", "Zp", "Cc", "Cf"])
TEXT = st.one_of(
    st.text(),
    st.text(alphabet=CRON_ALPHABET, min_size=1, max_size=12),
    st.text(alphabet=st.one_of(st.sampled_from(CRON_ALPHABET), ODD_CHARACTERS), max_size=12),
    st.integers(min_value=0, max_value=10**30).map(str),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**25), st.integers(0, 10**25)),
    st.builds(lambda n: f"*/{n}", st.integers(0, 10**25)),
    # Past int()'s 4300-digit limit, drawn cheaply: a digit (any script) repeated.
    st.builds(lambda c, n: c * n, st.sampled_from("19٣５"), st.integers(4000, 5000)),
)
FIVE = ["0", "9", "*", "*", "*"]
SIX = ["0", "0", "9", "*", "*", "*"]
NAMES = ["second", "minute", "hour", "day-of-month", "month", "day-of-week"]
BLANKS = " \t\r\n\f\v"


def _shown(text: str) -> str:
    """What a message shows of `text`: its repr, or the start of it when long."""
    head = repr(text[:40])
    return head if len(text) <= 40 and len(head) <= 42 else head[:41]


def _read_or_refused(expr: str) -> ConfigError | None:
    """None when `expr` parses; else its ConfigError (any other exception fails the test)."""
    try:
        cron = parse_cron(expr)
    except ConfigError as exc:
        assert len(str(exc)) < 500, "a message must not repeat a huge value in full"
        return exc
    assert isinstance(cron, Cron)
    return None


@pytest.mark.parametrize(
    ("fields", "position"),
    [(FIVE, i) for i in range(5)] + [(SIX, i) for i in range(6)],
)
@FUZZ_SETTINGS
@given(text=TEXT)
@example(text="0&")  # a day field's '&' is part of the field the message names
@example(text="ON")  # natural language, as fugit reads it
def test_any_text_in_a_field_is_read_or_refused_naming_the_field(
    fields: list[str], position: int, text: str
) -> None:
    written = [*fields]
    written[position] = text
    error = _read_or_refused(" ".join(written))
    single_token = text and not any(c in BLANKS for c in text)
    last = position == len(fields) - 1
    shortcut = position == 0 and text.startswith("@")
    # 'on 0 9 * * *' opens as fugit's natural language does ('on monday at 9'), and is read
    # (and refused) as that, as fugit reads it.
    natural = position == 0 and is_natural(" ".join(written))
    if error is None or not single_token or last or shortcut or natural:
        # A last token may be read as a zone; with blanks the count of fields changes.
        return
    name = NAMES[position + (6 - len(fields))]
    message = str(error)
    assert f"{name} field {_shown(text)}" in message, message


@pytest.mark.parametrize("head", ["0 9 * * *", "0 0 9 * * *", "@daily"])
@FUZZ_SETTINGS
@given(text=TEXT)
def test_any_text_in_the_zone_position_is_read_or_refused(head: str, text: str) -> None:
    _read_or_refused(f"{head} {text}")


@FUZZ_SETTINGS
@given(text=TEXT)
def test_any_text_as_the_tz_argument_is_read_or_refused(text: str) -> None:
    try:
        parse_cron("0 9 * * *", text)
    except ConfigError as exc:
        assert "time zone" in str(exc)
        assert len(str(exc)) < 500
