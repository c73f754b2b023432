"""The fingerprint of a document's bytes and the record kept of it (document/fingerprint.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import kiqbeat
from kiqbeat.document.fingerprint import Applied, fingerprint, namespace_guess

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "guess"), [
    (b"schedules: {}\n", ""),
    (b'namespace: "exq:"\nschedules: {}\n', "exq:"),
    (b"time_zone: UTC\nnamespace: 'app:'  # the app's\n", "app:"),
    (b"namespace: myapp:\r\n", "myapp:"),
    (b'{"namespace": "exq:", "schedules": {}}', "exq:"),
    (b"schedules:\n  a:\n    namespace: nested\n", ""),  # not top-level: no guess
])
def test_the_namespace_is_guessed_from_a_top_level_line(text: bytes, guess: str) -> None:
    assert namespace_guess(text) == guess


def test_the_fingerprint_changes_with_anything_that_changes_what_the_bytes_mean() -> None:
    base = {"window_s": None, "namespace": None}
    marks = {fingerprint("d", "a.yaml", **base), fingerprint("e", "a.yaml", **base),
             fingerprint("d", "b.yaml", **base),
             fingerprint("d", "a.yaml", window_s=60.0, namespace=None),
             fingerprint("d", "a.yaml", window_s=None, namespace="")}
    assert len(marks) == 5


@pytest.mark.parametrize("stored", [None, b"", b"{not json", b"[]", b'{"mark": "m"}',
                                    b'{"mark":"m","definitions":"d","namespace":"",'
                                    b'"window_s":"x","time_zone":"UTC","wait_replicas":0,'
                                    b'"wait_timeout_s":1}'])
def test_a_missing_or_garbled_record_is_no_record(stored: bytes | None) -> None:
    assert Applied.decode(stored) is None


def test_a_record_reads_back_as_written() -> None:
    record = Applied("m", "d", "exq:", 1800.0, "Asia/Kolkata", 1, 0.5)
    assert Applied.decode(record.encode()) == record
    assert Applied.decode(record.encode().encode()) == record


def test_the_package_version_is_the_one_pyproject_gives() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert kiqbeat.__version__ == project["version"]
