"""A client process that ends normally is not counted as a cancelled or failed request."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ostinato as reverb
from _helpers import wait_until

CHILD = """
import sys
import numpy as np
import ostinato as reverb
c = reverb.Client(sys.argv[1], in_process=False)
w = c.trajectory_writer(1)
for i in range(3):
    w.append({"x": np.float32(i)})
    w.create_item("q", 1.0, {"x": w.history["x"][-1]})
w.flush()
if sys.argv[2] == "close":
    w.close()  # else exit with the writer still open
c.insert([np.zeros(2, np.float32)], {"q": 1.0})
c.server_info()
"""


@pytest.mark.parametrize("ending", ["close", "exit-with-writer-open"])
def test_a_client_exiting_normally_is_not_counted_as_cancelled(ending):
    server = reverb.Server([reverb.Table.queue("q", 100)])
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, f"localhost:{server.port}", ending],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert reverb.Client(f"localhost:{server.port}").server_info()["q"].current_size == 4
        # The server sees the connection end a little later.
        wait_until(lambda: server.service.active_streams == 0, 10, "the stream to end")
        requests = server.metrics()["server"]["requests"]
        statuses = {s for by_status in requests.values() for s in by_status}
        assert statuses == {"OK"}, requests
    finally:
        server.stop()
