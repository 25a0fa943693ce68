"""Table signatures are saved in checkpoints: kept, adopted, checked, and old checkpoints load."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from ckpt_helpers import ckpt, fill, state

import ostinato as reverb
from ostinato import checkpointers
from ostinato.checkpointing import format as fmt
from ostinato.checkpointing import store
from ostinato.core.specs import TensorSpec

SIG = {"obs": TensorSpec([None, 4], np.float32), "step": TensorSpec([3], np.int64, "step")}
# Every container kind a signature may use, and names both set and unset.
NESTED = {
    "a": (TensorSpec([2], np.int32, "x"), [TensorSpec([], np.bool_)]),
    "b": {"c": TensorSpec([None, None, 3], np.float16), "d": TensorSpec([1], np.uint8, "")},
}


def _table(name: str = "t", signature=None) -> reverb.Table:
    return reverb.Table(
        name,
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def _saved(tmp_path, make_server) -> tuple[reverb.Server, str]:
    s = make_server(_table(signature=SIG), _table("n", NESTED), checkpointer=ckpt(tmp_path))
    fill(s.localhost_client(), "t", 10)
    return s, s.checkpoint()


def test_round_trip_keeps_the_signature(tmp_path, make_server):
    _saved(tmp_path, make_server)
    s2 = make_server(_table(signature=SIG), _table("n", NESTED), checkpointer=ckpt(tmp_path))
    assert len(s2.tables_by_name["t"]) == 8
    for client in (s2.localhost_client(), reverb.Client(f"localhost:{s2.port}", in_process=False)):
        info = client.server_info()
        assert info["t"].signature == SIG and info["n"].signature == NESTED


def test_table_without_signature_adopts_the_checkpoints(tmp_path, make_server, caplog):
    _saved(tmp_path, make_server)
    caplog.set_level(logging.INFO, logger="ostinato.checkpointing")
    s2 = make_server(_table(), _table("n"), checkpointer=ckpt(tmp_path))
    t2 = s2.tables_by_name["t"]
    assert t2.signature == SIG and t2.info.signature == SIG
    assert [s.name for s in t2.flat_signature] == ["obs", "step"]
    n2 = s2.tables_by_name["n"].signature  # the nest's containers come back as they were
    assert n2 == NESTED and type(n2["a"]) is tuple and type(n2["a"][1]) is list
    remote = reverb.Client(f"localhost:{s2.port}", in_process=False)
    assert remote.server_info()["t"].signature == SIG
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("'t' has no signature" in m and "checkpoint" in m for m in msgs), msgs
    # The adopted signature is enforced like one given to the constructor.
    with s2.localhost_client().trajectory_writer(1) as w:
        w.append({"obs": np.zeros(4, np.float64), "step": np.int64(0)})
        with pytest.raises(ValueError, match="inconsistent with the table signature"):
            w.create_item("t", 1.0, {"obs": w.history["obs"][-1:], "step": w.history["step"][-1:]})


@pytest.mark.parametrize(
    "server_sig",
    [
        {"obs": TensorSpec([None, 4], np.float64), "step": SIG["step"]},  # dtype
        {"obs": SIG["obs"], "step": TensorSpec([3], np.int64, "other")},  # name
        {"obs": SIG["obs"]},  # structure
    ],
)
def test_different_signatures_raise_naming_table_and_field(tmp_path, make_server, server_sig):
    _saved(tmp_path, make_server)
    with pytest.raises(checkpointers.CheckpointMismatchError) as ei:
        reverb.Server([_table(signature=server_sig), _table("n")], checkpointer=ckpt(tmp_path))
    msg = str(ei.value)
    assert "table 't'" in msg and "signature: checkpoint" in msg, msg
    assert "max_size" not in msg  # only the differing field is listed


def _strip_signatures(path: str) -> None:
    """Rewrites the manifest as an Ostinato that did not record signatures wrote it."""
    body = fmt.read_manifest(path)
    for meta in body["tables"]:
        del meta["signature"]
    fmt.write_manifest(path, body)


@pytest.mark.parametrize("server_sig", [None, SIG])
def test_checkpoint_without_signatures_keeps_the_servers(tmp_path, make_server, server_sig):
    s1, path = _saved(tmp_path, make_server)
    _strip_signatures(path)
    assert all("signature" not in m for m in fmt.read_manifest(path)["tables"])
    s2 = make_server(_table(signature=server_sig), _table("n"), checkpointer=ckpt(tmp_path))
    t2 = s2.tables_by_name["t"]
    assert t2.signature == server_sig and s2.tables_by_name["n"].signature is None
    assert state(t2) == state(s1.tables_by_name["t"])


def test_checkpoint_of_tables_without_signatures_records_none(tmp_path, make_server):
    s = make_server(_table(), checkpointer=ckpt(tmp_path))
    fill(s.localhost_client(), "t", 5)
    path = s.checkpoint()
    assert fmt.read_manifest(path)["tables"][0]["signature"] is None
    s2 = make_server(_table(signature=SIG), checkpointer=ckpt(tmp_path))
    assert s2.tables_by_name["t"].signature == SIG and len(s2.tables_by_name["t"]) == 3


def test_malformed_signature_in_manifest_is_reported_as_corrupt(tmp_path, make_server):
    _, path = _saved(tmp_path, make_server)
    body = fmt.read_manifest(path)
    body["tables"][0]["signature"] = {"spec": [[4], "not-a-dtype", None]}
    fmt.write_manifest(path, body)
    with pytest.raises(checkpointers.CheckpointCorruptError, match="manifest.json"):
        store.load(path, {"t": _table(), "n": _table("n")})


@pytest.mark.parametrize(
    "sig",
    [
        {("a", 1): TensorSpec([1], np.int32)},  # a key JSON cannot keep
        {"s": TensorSpec([], np.dtype("M8[s]"))},
    ],
)  # a dtype it cannot
def test_signature_a_restore_could_not_read_fails_the_save(tmp_path, make_server, sig):
    s = make_server(_table(signature=sig), checkpointer=ckpt(tmp_path))
    with pytest.raises(checkpointers.CheckpointError, match="signature of table 't'"):
        s.checkpoint()
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []  # nothing half-written


def test_on_disk_signature_encoding_is_pinned():
    """Checkpoints share the wire codec's nest encoding; a change there must not silently
    change what old checkpoints mean."""
    from ostinato.checkpointing import encode

    on_disk = {
        "dict": [
            ["obs", {"spec": [[-1, 4], "<f4", None]}],
            ["step", {"tuple": [{"spec": [[3], "<i8", "step"]}]}],
        ]
    }
    sig = {"obs": TensorSpec([None, 4], np.float32), "step": (TensorSpec([3], np.int64, "step"),)}
    assert encode.signature_from_json(on_disk, "m") == sig
    assert encode.signature_to_json(_table(signature=sig)) == on_disk
    assert encode.signature_from_json(None, "m") is None
