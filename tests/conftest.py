import tempfile

import numpy as np
import pytest

import ostinato as reverb


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytests_basetemp(tmp_path_factory):
    """Temporary files of this process (e.g. the temporary-directory checkpointer Reverb's API
    falls back to) go under pytest's base temp, which pytest prunes, instead of piling up in
    /tmp. Child processes keep the environment's TMPDIR."""
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    yield
    tempfile.tempdir = old


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


@pytest.fixture(params=["embedded", "networked"])
def mode(request):
    """Runs a test against an in-process server and against a server in another process."""
    return request.param


@pytest.fixture()
def serve(mode, make_server):
    """serve(code) -> Client for a server whose tables are built by ``code`` (which must define
    ``TABLES``), in this process or in a child process depending on ``mode``."""
    from server_process import ServerProcess

    children = []

    def start(code):
        if mode == "embedded":
            ns = {}
            exec(code, ns)
            server = make_server(*ns["TABLES"])
            return reverb.Client(f"localhost:{server.port}")
        proc = ServerProcess(code)
        children.append(proc)
        return reverb.Client(proc.address, in_process=False, unavailable_timeout=5)

    yield start
    for p in children:
        p.stop()
