"""Corrupted or truncated files, consistency under load, periodic checkpoints."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest
from ckpt_helpers import ckpt, fill

import ostinato as reverb
from _helpers import wait_until
from ostinato import checkpointers
from ostinato.core import items as items_lib


def _table() -> reverb.Table:
    return reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
    )


@pytest.fixture()
def saved(tmp_path, make_server):
    s = make_server(_table(), checkpointer=ckpt(tmp_path))
    fill(s.localhost_client(), "t", 40)
    return s.checkpoint()


@pytest.mark.parametrize(
    "victim", ["data-00000.bin", "items-0000.bin", "chunks.bin", "manifest.json"]
)
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_file_gives_error_naming_it(tmp_path, saved, victim, damage):
    path = os.path.join(saved, victim)
    raw = open(path, "rb").read()
    if damage == "flip":
        b = bytearray(raw)
        b[len(b) // 2] ^= 0x40
        open(path, "wb").write(bytes(b))
    elif damage == "truncate":
        open(path, "wb").write(raw[: len(raw) // 2])
    else:
        os.remove(path)
    with pytest.raises(checkpointers.CheckpointCorruptError, match=victim.replace(".", r"\.")):
        reverb.Server([_table()], checkpointer=ckpt(tmp_path))


def test_future_format_version_is_refused(tmp_path, saved):
    path = os.path.join(saved, "manifest.json")
    doc = json.load(open(path))
    doc["version"] = 99
    json.dump(doc, open(path, "w"))
    with pytest.raises(checkpointers.CheckpointError, match="version 99"):
        reverb.Server([_table()], checkpointer=ckpt(tmp_path))


def _check_consistent(table: reverb.Table) -> None:
    """Every item's rows are the steps it was created from; counters add up."""
    for k in table.keys().tolist():
        cols = items_lib.columns(table.get(k)["trajectory"])
        steps = np.concatenate([c.data[o : o + n] for c, o, n in cols[1]])
        obs = np.concatenate([c.data[o : o + n] for c, o, n in cols[0]])
        assert (np.diff(steps) == 1).all()
        np.testing.assert_array_equal(obs[:, 0], steps.astype(np.float32))
    info = table.info
    r = info.rate_limiter_info
    assert info.current_size == r.insert_stats.completed - r.delete_count


def test_checkpoints_taken_under_load_are_consistent(tmp_path, make_server):
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        500,
        reverb.rate_limiters.MinSize(1),
    )
    s = make_server(table, checkpointer=ckpt(tmp_path / "root", keep=10))
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            with s.localhost_client().trajectory_writer(num_keep_alive_refs=4) as w:
                i = 0
                while not stop.is_set():
                    w.append({"obs": np.full(3, i, np.float32), "step": np.int64(i)})
                    if i >= 3:
                        w.create_item(
                            "t",
                            1.0 + seed,
                            {"obs": w.history["obs"][-4:], "step": w.history["step"][-4:]},
                        )
                    i += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def sampler() -> None:
        try:
            while not stop.is_set():
                b = table.sample(8, timeout=5)
                table.update_priorities(b.keys, np.full(len(b), 2.0))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=sampler) for _ in range(2)]
    for t in threads:
        t.start()
    paths = []
    try:
        time.sleep(0.3)
        for _ in range(4):
            paths.append(s.checkpoint())
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    for p in paths:
        fresh = reverb.Table(
            "t",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            500,
            reverb.rate_limiters.MinSize(1),
        )
        s2 = make_server(fresh, checkpointer=ckpt(tmp_path / "x", fallback_checkpoint_path=p))
        assert len(fresh) > 0
        _check_consistent(fresh)
        s2.stop()


def test_periodic_checkpoints(tmp_path, make_server):
    c = ckpt(tmp_path, keep=3, every_seconds=0.1)
    s = make_server(_table(), checkpointer=c)
    fill(s.localhost_client(), "t", 5)
    wait_until(
        lambda: len(checkpointers.store_list(str(tmp_path))) >= 2,
        5,
        "two periodic checkpoints",
        interval=0.05,
    )
    s.stop()
    assert 2 <= len(checkpointers.store_list(str(tmp_path))) <= 3
    assert c._thread is None
