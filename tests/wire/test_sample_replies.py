"""Sample replies of items a writer in the server's own process wrote, sampled by a remote
client: rows read from the writer's blocks (``Chunk.origin``) must be exactly the items' rows,
also for chunks trimmed at an episode's end, and for byte orders that cannot be sent as they are
(those take the general path)."""

from __future__ import annotations

import numpy as np
import pytest

import ostinato as reverb
from _helpers import uniform_table
from ostinato.core import items as items_lib
from ostinato.core.chunks import chunk_row_bytes
from ostinato.wire import sample_replies
from ostinato.writers import lanes as lanes_mod


@pytest.mark.parametrize("dtype", ["<f4", ">i4", "<u2"])
def test_remote_samples_of_in_process_items_are_their_rows(dtype):
    table = uniform_table(max_size=10_000)
    server = reverb.Server([table])
    try:
        want = {}
        with server.localhost_client().trajectory_writer(num_keep_alive_refs=2) as w:
            step = 0
            for length in [7, 1, 13, 2, 30]:  # episode ends trim chunks
                for _ in range(length):
                    w.append({"x": np.full(3, step, dtype), "step": np.int64(step)})
                    if w.episode_steps >= 2:
                        w.create_item(
                            "t", 1.0, {"x": w.history["x"][-2:], "s": w.history["step"][-2:]}
                        )
                        want[step] = np.array([[step - 1] * 3, [step] * 3], dtype)
                    step += 1
                w.end_episode()
        assert any(
            c.origin is not None
            for k in table.keys().tolist()
            for col in items_lib.columns(table.get(k)["trajectory"])
            for c, _, _ in col
        )
        remote = reverb.Client(f"localhost:{server.port}", in_process=False)
        seen = set()
        for s in remote.sample("t", 400, emit_timesteps=False):
            steps, x = s.data  # flattened by key: "s", "x"
            last = int(steps[-1])
            np.testing.assert_array_equal(x, want[last])
            assert x.dtype == np.dtype(dtype).newbyteorder("=")
            seen.add(last)
        assert len(seen) > len(want) // 2
    finally:
        server.stop()


def test_a_block_that_is_gone_is_not_read():
    assert sample_replies._block_bytes(-1) is None


@pytest.mark.parametrize(("steps", "carry"), [(1, True), (10, True), (10, False)])
def test_reply_columns_hold_exactly_each_items_rows(steps, carry, monkeypatch):
    """Items of 16 vectorised environments (the batched observer carves their chunks out of
    blocks). 10-step items lie in one chunk when full chunks pass their newest rows on
    (``Lanes.carry``), and span several chunks without that. Every reply column must be the
    items' rows in order, as the general row access (``chunk_row_bytes``) reads them."""
    if not carry:
        monkeypatch.setattr(lanes_mod, "CARRY_SHARE", 10**9)  # no chunk is long enough
    table = uniform_table(max_size=100_000)
    server = reverb.Server([table])
    try:
        rng = np.random.default_rng(steps)
        obs = reverb.observers.BatchedTrajectoryObserver(
            server.localhost_client(), "t", steps, num_envs=16
        )
        for t in range(400):
            step_type = np.full(16, 0 if t == 0 else 1, np.int32)
            if t >= 20:
                step_type[t % 16] = 2  # episodes end at different steps
            step = {"step_type": step_type, "o": rng.standard_normal((16, 5)).astype(np.float32)}
            obs({**step, "a": np.arange(16)})
        obs.close()
        spanning = 0
        for _ in range(10):
            batch = table.sample_now(64)
            reply = sample_replies.sample_reply(batch)
            assert "cols" in reply
            per_item = [items_lib.columns(t) for t in batch.trajectories]
            spanning += sum(len(c[0]) > 1 for c in per_item)
            for ci, col in enumerate(reply["cols"]):
                want = b"".join(
                    chunk_row_bytes(c, o, o + n) for cols in per_item for c, o, n in cols[ci]
                )
                assert col["b"] == want
        assert spanning if not carry else not spanning
    finally:
        server.stop()
