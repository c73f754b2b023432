"""Command-line tools a test runs (promtool, systemd-analyze) that scripts/setup installs."""

from __future__ import annotations

import os
import shutil

import pytest


def tool(command: str, installed_by: str) -> str:
    """The path of `command`. Missing, the test is skipped with the reason printed — but
    fails under CI (`CI` set), where scripts/setup has installed it."""
    found = shutil.which(command)
    if found is None:
        reason = f"{command} is not installed (scripts/setup installs {installed_by})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found
