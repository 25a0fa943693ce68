"""Round trips: every selector and limiter restores items, order, probabilities and counters."""

from __future__ import annotations

import os

import numpy as np
import pytest
from ckpt_helpers import LIMITERS, SELECTORS, ckpt, counters, fill, state

import ostinato as reverb
from ostinato import checkpointers


def _table(sampler: str, limiter: str, max_size: int = 50, name: str = "t") -> reverb.Table:
    lim = (
        reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 1000.0)
        if limiter == "ratio"
        else LIMITERS[limiter]()
    )
    return reverb.Table(name, SELECTORS[sampler](), reverb.selectors.Fifo(), max_size, lim)


def _expected_probs(table: reverb.Table, sampler: str) -> dict[int, float]:
    keys = table.keys().tolist()
    p = np.array([table.get(k)["priority"] for k in keys])
    if sampler == "prioritized":
        w = p**0.8
        return dict(zip(keys, (w / w.sum()).tolist()))
    return {k: 1.0 / len(keys) for k in keys}


@pytest.mark.parametrize("limiter", sorted(LIMITERS))
@pytest.mark.parametrize("sampler", sorted(SELECTORS))
def test_round_trip(tmp_path, make_server, sampler, limiter):
    s1 = make_server(_table(sampler, limiter), checkpointer=ckpt(tmp_path))
    fill(s1.localhost_client(), "t", 80)
    t1 = s1.tables_by_name["t"]
    t1.update_priorities(t1.keys()[:5], [3.0, 0.5, 3.0, 0.5, 2.0])  # heap ties after updates
    t1.sample(7)
    path = s1.localhost_client().checkpoint()
    assert os.path.isdir(path) and path.startswith(str(tmp_path))
    s2 = make_server(_table(sampler, limiter), checkpointer=ckpt(tmp_path))
    t2 = s2.tables_by_name["t"]
    assert state(t2) == state(t1)
    assert counters(t2) == counters(t1)
    if sampler in ("fifo", "lifo", "minheap", "maxheap"):
        a, b = t1.sample(10), t2.sample(10)
        assert a.keys.tolist() == b.keys.tolist()
    else:
        expected = _expected_probs(t1, sampler)
        assert _expected_probs(t2, sampler) == pytest.approx(expected)
        b = t2.sample(30)
        for k, p in zip(b.keys.tolist(), b.probabilities.tolist()):
            assert p == pytest.approx(expected[k])


def test_queue_and_max_times_sampled(tmp_path, make_server):
    s1 = make_server(reverb.Table.queue("q", 20), checkpointer=ckpt(tmp_path))
    fill(s1.localhost_client(), "q", 12)
    s1.tables_by_name["q"].sample(3)
    s1.checkpoint()
    s2 = make_server(reverb.Table.queue("q", 20), checkpointer=ckpt(tmp_path))
    t1, t2 = s1.tables_by_name["q"], s2.tables_by_name["q"]
    assert counters(t2) == counters(t1)
    assert t2.can_sample(7) and not t2.can_sample(8)
    assert t2.sample(7).keys.tolist() == t1.sample(7).keys.tolist()


def test_restored_data_samples_through_client(tmp_path, make_server):
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    fill(s1.localhost_client(), "t", 10, seed=3)
    want = next(iter(s1.localhost_client().sample("t", 1)))
    s1.checkpoint()
    s2 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    got = next(iter(s2.localhost_client().sample("t", 1)))
    assert got[0].info.key == want[0].info.key
    for g, w in zip(got, want):
        for a, b in zip(reverb_flatten(g.data), reverb_flatten(w.data)):
            np.testing.assert_array_equal(a, b)


def reverb_flatten(x):
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in reverb_flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in reverb_flatten(v)]
    return [np.asarray(x)]


def test_network_written_chunks_round_trip(tmp_path, make_server):
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    remote = reverb.Client(f"localhost:{s1.port}", in_process=False)
    fill(remote, "t", 30, seed=5)
    before = state(s1.tables_by_name["t"]) if False else None  # network rows are encoded
    path = remote.checkpoint()
    s2 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    t2 = s2.tables_by_name["t"]
    assert len(t2) == 28 and before is None and os.path.isdir(path)
    obs = np.random.default_rng(5)
    rows = [obs.standard_normal(4).astype(np.float32) for _ in range(30)]
    first = t2.get(t2.keys()[0])["trajectory"]
    from ostinato.core import items as items_lib

    ((c, o, n),) = items_lib.columns(first)[0]
    np.testing.assert_array_equal(c.data[o : o + n], np.stack(rows[0:3]))


def test_mismatched_tables_raise_naming_the_field(tmp_path, make_server):
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    fill(s1.localhost_client(), "t", 5)
    s1.checkpoint()
    with pytest.raises(checkpointers.CheckpointMismatchError, match="max_size"):
        reverb.Server([_table("fifo", "minsize", max_size=60)], checkpointer=ckpt(tmp_path))
    with pytest.raises(checkpointers.CheckpointMismatchError, match="sampler"):
        reverb.Server([_table("lifo", "minsize")], checkpointer=ckpt(tmp_path))
    with pytest.raises(checkpointers.CheckpointMismatchError, match="server tables: other"):
        reverb.Server([_table("fifo", "minsize", name="other")], checkpointer=ckpt(tmp_path))


def test_extra_server_table_starts_empty(tmp_path, make_server, caplog):
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    fill(s1.localhost_client(), "t", 5)
    s1.checkpoint()
    s2 = make_server(
        _table("fifo", "minsize"),
        _table("fifo", "minsize", name="new"),
        checkpointer=ckpt(tmp_path),
    )
    assert len(s2.tables_by_name["t"]) == 3 and len(s2.tables_by_name["new"]) == 0
    assert "new" in caplog.text


def test_keep_last_n_and_foreign_files_untouched(tmp_path, make_server):
    (tmp_path / "notes.txt").write_text("mine")
    fake = tmp_path / "ckpt-20000101T000000.000000Z-000000"
    fake.mkdir()  # our naming pattern but not written by us (no manifest): left alone
    s = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path, keep=2))
    fill(s.localhost_client(), "t", 5)
    paths = [s.checkpoint() for _ in range(4)]
    left = sorted(os.listdir(tmp_path))
    assert left == sorted(["notes.txt", fake.name] + [os.path.basename(p) for p in paths[-2:]])


def test_fallback_checkpoint_path(tmp_path, make_server):
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path / "a"))
    fill(s1.localhost_client(), "t", 6)
    path = s1.checkpoint()
    s2 = make_server(
        _table("fifo", "minsize"), checkpointer=ckpt(tmp_path / "b", fallback_checkpoint_path=path)
    )
    assert state(s2.tables_by_name["t"]) == state(s1.tables_by_name["t"])


def test_constructor_validation_and_reverb_names(tmp_path):
    with pytest.raises(ValueError, match="group"):
        checkpointers.DefaultCheckpointer(str(tmp_path), group="g")
    with pytest.raises(ValueError, match="keep"):
        checkpointers.DefaultCheckpointer(str(tmp_path), keep=0)
    for bad in (0, -0.5, 1.5, True, "half"):
        with pytest.raises(ValueError, match="save_cpu_share"):
            checkpointers.DefaultCheckpointer(str(tmp_path), save_cpu_share=bad)
    c = checkpointers.DefaultCheckpointer(str(tmp_path))
    assert c.save_cpu_share == 0.5
    assert (c.path, c.group, c.fallback_checkpoint_path) == (str(tmp_path), "", None)
    assert isinstance(checkpointers.default_checkpointer(), checkpointers.TempDirCheckpointer)
    assert c.internal_checkpointer() is c


def test_server_without_checkpointer_uses_a_temp_dir(make_server):
    s = make_server(_table("fifo", "minsize"))
    fill(s.localhost_client(), "t", 4)
    path = s.localhost_client().checkpoint()
    assert os.path.isfile(os.path.join(path, "manifest.json"))


@pytest.mark.parametrize("share", [1.0, 0.25])
def test_paced_and_unpaced_saves_are_identical(make_server, tmp_path, share):
    """Pacing only inserts pauses: the checkpoint restores the same state."""
    s1 = make_server(
        _table("uniform", "minsize", max_size=1000),
        checkpointer=ckpt(tmp_path / "a", save_cpu_share=share),
    )
    fill(s1.localhost_client(), "t", 700)
    path = s1.checkpoint()
    s2 = make_server(
        _table("uniform", "minsize", max_size=1000),
        checkpointer=ckpt(tmp_path / "b", fallback_checkpoint_path=path),
    )
    assert len(s2.tables_by_name["t"]) == len(s1.tables_by_name["t"]) > 600
    assert state(s2.tables_by_name["t"]) == state(s1.tables_by_name["t"])


def test_restored_numeric_chunks_keep_one_payload_and_sample_remotely(tmp_path, make_server):
    """Restored numeric chunks hold their rows as one little-endian payload (``Chunk.raw``), as
    chunks received over the network do, so that sample replies slice it; string chunks do
    not. What a remote client then samples is what was written."""
    rng = np.random.default_rng(9)
    obs = rng.standard_normal((40, 4)).astype(np.float32)  # incompressible: stored raw
    s1 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    with reverb.Client(f"localhost:{s1.port}", in_process=False).trajectory_writer(3) as w:
        for i in range(40):
            w.append(
                {
                    "obs": obs[i],
                    "zeros": np.zeros(600, np.float32),  # compressible: stored with zstd
                    "name": b"s%d" % i,
                    "step": np.int64(i),
                }
            )
            if i >= 2:
                w.create_item("t", 1.0, {k: w.history[k][-3:] for k in w.history})
        w.flush()
    s1.checkpoint()
    s2 = make_server(_table("fifo", "minsize"), checkpointer=ckpt(tmp_path))
    t2 = s2.tables_by_name["t"]
    from ostinato.core import items as items_lib

    seen = {"raw": 0, "strings": 0}
    for k in t2.keys().tolist():
        for col in items_lib.columns(t2.get(k)["trajectory"]):
            for c, _, _ in col:
                if c.data.dtype.kind == "O":
                    assert c.raw is None
                    seen["strings"] += 1
                else:
                    assert c.raw is not None and bytes(c.raw) == c.data.tobytes()
                    seen["raw"] += 1
    assert seen["raw"] and seen["strings"]
    remote = reverb.Client(f"localhost:{s2.port}", in_process=False)
    for s in remote.sample("t", 100, emit_timesteps=False):
        name, o, steps, zeros = s.data  # the item's columns, flattened by key
        np.testing.assert_array_equal(o, obs[steps])
        assert not zeros.any() and zeros.shape == (3, 600)
        assert name.tolist() == [b"s%d" % i for i in steps]
