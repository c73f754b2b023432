"""`kiqbeat convert`: another tool's file written as a kiqbeat document, from the command
line (the document's content is checked in tests/unit/test_convert.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiqbeat.entrypoints.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "unit" / "import_corpus"


def test_convert_prints_a_document_that_validates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(CORPUS / "cron_migration.yml"), "--app-zone",
                 "America/New_York", "--catch-up", "latest"]) == 0
    out, err = capsys.readouterr()
    document = yaml.safe_load(out)
    assert document["time_zone"] == "America/New_York"
    assert {s["catch_up"] for s in document["schedules"].values()} == {"latest"}
    assert err.startswith("kiqbeat: converted 4 schedule(s) of ")
    path = tmp_path / "kiqbeat.yml"
    path.write_text(out)
    assert main(["validate", str(path)]) == 0
    assert "OK, 4 schedules" in capsys.readouterr().out


def test_convert_writes_the_file_given_with_o(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.yml"
    assert main(["convert", str(CORPUS / "dst_new_york.yml"), "--dst", "fugit",
                 "-o", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"into {target}" in err
    assert yaml.safe_load(target.read_text())["dst"] == "fugit"


def test_convert_refuses_what_validate_refuses_with_the_same_messages(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(CORPUS / "natural_refused.yml")]) == 1
    refused = capsys.readouterr().err
    assert main(["convert", str(CORPUS / "natural_refused.yml")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == refused
    assert main(["convert", str(CORPUS / "missing.yml")]) == 1
    assert "schedule file not found" in capsys.readouterr().err
