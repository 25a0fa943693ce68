"""Items are confirmed one by one over the network, as embedded (issue: a request was
confirmed only as a whole, so ``flush(block_until_num_items=n)`` timed out over gRPC while
the last item of a request waited for its rate limiter)."""

from __future__ import annotations

import time

import numpy as np
import pytest

TABLES = """
import ostinato as reverb
TABLES = [reverb.Table.queue("q", 1), reverb.Table.queue("other", 10)]
"""


def _item(w, table, x):
    w.append({"x": np.int64(x)})
    w.create_item(table, 1.0, {"x": w.history["x"][-1]})


def test_flush_returns_once_the_first_of_two_items_is_in(serve):
    client = serve(TABLES)
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        _item(w, "q", 1)
        _item(w, "q", 2)  # can only go in after a sample
        t0 = time.monotonic()
        w.flush(block_until_num_items=1, timeout_ms=5000)
        assert time.monotonic() - t0 < 4.0
        with pytest.raises(Exception, match="1 awaiting confirmation|1 items"):
            w.flush(timeout_ms=300)  # the second still waits for the queue
        assert next(client.sample("q"))[0].data[0] == 1
        w.flush(timeout_ms=5000)  # now the second is admitted and confirmed
        assert next(client.sample("q"))[0].data[0] == 2


def test_items_of_several_tables_are_confirmed_in_request_order(serve):
    client = serve(TABLES)
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        _item(w, "q", 1)
        _item(w, "other", 2)
        _item(w, "q", 3)  # waits for a sample of "q"
        w.flush(block_until_num_items=1, timeout_ms=5000)  # "q"/1 and "other"/2 are in
        info = client.server_info()
        assert info["other"].current_size == 1 and info["q"].current_size == 1
        assert next(client.sample("other"))[0].data[0] == 2
        assert next(client.sample("q"))[0].data[0] == 1
        w.flush(timeout_ms=5000)
        assert next(client.sample("q"))[0].data[0] == 3
