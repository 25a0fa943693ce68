"""Fixtures for the dataset tests: a hang guard, so a broken sampler fails instead of hanging."""

from __future__ import annotations

import faulthandler
import sys

import pytest

#: A dataset test that runs longer than this dumps every thread's stack and ends the run.
HANG_GUARD_S = 90


@pytest.fixture(autouse=True)
def _hang_guard():
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
