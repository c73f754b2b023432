"""Programs and packages a test needs that scripts/setup installs (promtool, systemd-analyze,
Ruby, Sidekiq and its Debian packages, Chromium).

One rule for all of them (`missing`): absent, the test is skipped with the reason printed —
but fails under CI (`CI` set, as CI services set it and .ci/run does), where scripts/setup has
installed them, so a broken setup can never pass as a run with fewer tests.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def missing(reason: str) -> NoReturn:
    """Skip the test for `reason` (something scripts/setup installs is absent); fail it
    instead under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: scripts/setup should have installed it)")
    pytest.skip(reason)


def tool(command: str, installed_by: str) -> str:
    """The path of `command`; `missing` when it is not installed."""
    found = shutil.which(command)
    if found is None:
        missing(f"{command} is not installed (scripts/setup installs {installed_by})")
    return found
