import numpy as np
import pytest

import ostinato as reverb


@pytest.fixture()
def make_server():
    """Builds servers and stops them at the end of the test."""
    servers = []

    def make(*tables, **kwargs):
        s = reverb.Server(list(tables), **kwargs)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture()
def rng():
    return np.random.default_rng(1234)
