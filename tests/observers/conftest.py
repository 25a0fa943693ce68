"""Fixtures for the observer tests (helpers are in ``_observer_helpers``)."""

from __future__ import annotations

import pytest

import ostinato as reverb


@pytest.fixture()
def queue_server():
    """A server with queue tables "a" and "b" (items come out in insertion order)."""
    server = reverb.Server([reverb.Table.queue("a", 10_000), reverb.Table.queue("b", 10_000)])
    yield server
    server.stop()
