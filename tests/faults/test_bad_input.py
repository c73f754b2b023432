"""Any schedule document, however wrong, gives ConfigError with a message, never a crash.

Hypothesis builds documents of kiqbeat's own shape, sidekiq-scheduler's and sidekiq-cron's
(hash and list forms), with plausible and hostile values (wrong types, huge numbers, NaN,
unicode, bad crons and zones), and also arbitrary structures and raw text. Each goes
through `load_config_text` and through the real `kiqbeat validate FILE` command code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.fields import SCHEDULE_KEYS, TOP_LEVEL_KEYS
from kiqbeat.entrypoints.cli import main as cli
from kiqbeat.errors import ConfigError
from tests.support.invariants import LONG, Outcome, record

EXAMPLES = 1500 if LONG else 250

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**15),
    st.integers(max_value=-(10**15)), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.sampled_from(["", " ", "\x00", "\u202e", "💥", "1e999", "-1"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=10) | st.integers(), inner, max_size=4),
    max_leaves=12,
)
cron_fields = st.sampled_from(["*", "*/5", "0", "59", "60", "-1", "1-5", "5-1", "*/0", "mon",
                               "jan", "L", "?", "1,2,", "0/15", "99999999999", "*/1000", "é"])
crons = st.one_of(
    st.lists(cron_fields, min_size=0, max_size=7).map(" ".join),
    st.sampled_from(["@hourly", "@daily", "@reboot", "@every 5m", "* * * * * Mars/Base",
                     "0 9 * * 1-5 Europe/Paris", "30 1 * * * America/New_York"]),
    values,
)
zones = st.one_of(st.sampled_from(["UTC", "America/New_York", "Nowhere/Land", "", "../etc",
                                   "Etc/GMT+14", "EST5EDT", "utc"]), values)
durations = st.one_of(st.sampled_from(["90s", "15m", "1h30m", "2d", "0", "-5m", "10y", "1e9h",
                                       "99999999999999999999d", "m", "NaN"]), values)
field_values: dict[str, st.SearchStrategy[Any]] = {
    "cron": crons, "every": durations, "class": st.one_of(st.text(max_size=20), values),
    "queue": st.one_of(st.text(max_size=10), values), "tz": zones, "lookahead": durations,
    "catch_up": st.one_of(st.sampled_from(["all", "latest", "none", "some"]), values),
}


def _schedule() -> st.SearchStrategy[dict[Any, Any]]:
    keys = st.sampled_from([*SCHEDULE_KEYS, "quue", "klass", "description", "status"])
    return st.dictionaries(keys, values, max_size=6).flatmap(
        lambda base: st.fixed_dictionaries(
            {k: field_values.get(k, values) for k in base}).map(lambda d: base | d))


names = st.one_of(st.text(min_size=0, max_size=12), st.integers(), st.just("a\nb"))
kiqbeat_docs = st.fixed_dictionaries(
    {"schedules": st.one_of(st.dictionaries(names, _schedule() | values, max_size=4), values)},
    optional={k: values | durations | zones for k in TOP_LEVEL_KEYS if k != "schedules"})
scheduler_docs = st.dictionaries(names, _schedule(), max_size=3).map(
    lambda s: {":scheduler": {":schedule": s}})
cron_hash_docs = st.dictionaries(names, _schedule(), max_size=3)
cron_list_docs = st.lists(_schedule().map(lambda d: {"name": "job"} | d), max_size=3)
documents = st.one_of(kiqbeat_docs, scheduler_docs, cron_hash_docs, cron_list_docs, values)


def _texts(doc: Any) -> list[str]:
    out = [json.dumps(doc, default=str)]
    with contextlib.suppress(yaml.YAMLError):
        out.append(yaml.safe_dump(doc, allow_unicode=True))
    return out


def _load(text: str) -> Config | ConfigError:
    """The Config or the ConfigError; any other exception escapes and fails the test."""
    try:
        return load_config_text(text, source="fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).strip(), "ConfigError without a message"
        return exc


def _validate_file(text: str) -> tuple[int, str]:
    """`kiqbeat validate FILE` through the real CLI code: exit code and stderr."""
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = cli(["validate", path])
        return rc, err.getvalue()
    finally:
        os.unlink(path)


_tally = {"documents": 0, "refused": 0}


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=documents)
def test_generated_documents_give_config_or_config_error(doc: Any) -> None:
    """Structured documents of every supported shape: a Config or a ConfigError, no crash."""
    for text in _texts(doc):
        result = _load(text)
        _tally["documents"] += 1
        _tally["refused"] += isinstance(result, ConfigError)
        rc, err = _validate_file(text)
        assert rc == (1 if isinstance(result, ConfigError) else 0), err
        assert rc == 0 or err.startswith("kiqbeat: "), err


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.text(max_size=300) | st.binary(max_size=200).map(
    lambda b: b.decode("latin-1")))
def test_raw_text_gives_config_or_config_error(text: str) -> None:
    """Arbitrary text (YAML and JSON fragments, control characters): a Config or a short
    ConfigError, and `kiqbeat validate` on the same text as a file says the same."""
    result = _load(text)
    if isinstance(result, ConfigError):
        assert len(str(result)) < 2_000  # never the whole text repeated back
    else:
        assert isinstance(result, Config)
    rc, err = _validate_file(text)
    assert rc == (1 if isinstance(result, ConfigError) else 0), err


@pytest.mark.parametrize("text", ["\x1f", "a: \x07", "\ufffe", "schedules: {}\x00"])
def test_non_printable_characters_give_config_error(text: str) -> None:
    """A document with a control character is refused with a ConfigError naming it."""
    with pytest.raises(ConfigError, match=r"."):
        load_config_text(text, source="ctl.yaml")


def test_validate_command_refuses_non_printable_characters_without_a_traceback() -> None:
    """`kiqbeat validate` on such a file exits 1 with a one-line message."""
    rc, err = _validate_file("\x1f")
    assert rc == 1 and err.startswith("kiqbeat: "), err


def test_fuzzing_tally_is_recorded() -> None:
    """Records how many generated documents went through (runs after the two above)."""
    assert _tally["documents"] > 0, "the generated-documents test did not run first"
    record(Outcome(scenario="Hypothesis schedule documents", runs=_tally["documents"],
                   expected=0, pushed=0, duplicates=0, missed=0, early=0, group="input",
                   notes=f"{_tally['refused']} refused with ConfigError, the rest valid; "
                         "no other exception from load_config_text or `kiqbeat validate`; "
                         f"plus {EXAMPLES} raw texts"))
