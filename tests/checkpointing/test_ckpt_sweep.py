"""Temporary directories of saves that never finished are swept when a checkpointer or server
starts -- and only those: a save in progress (in this process or another) and anything not
named by a save is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from ckpt_helpers import ckpt, fill

import ostinato as reverb
from ostinato.checkpointing import store

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {helpers!r})
    import ostinato as reverb
    from ckpt_helpers import ckpt, fill
    root = sys.argv[1]
    table = reverb.Table.queue("t", 1000)
    c = ckpt(root)
    s = reverb.Server([table], checkpointer=c)
    fill(s.localhost_client(), "t", 30, seed=1)
    s.checkpoint()
    fill(s.localhost_client(), "t", 30, seed=2)
    def hook(p):
        if p == "data":
            os.kill(os.getpid(), signal.SIGKILL)
    c._hook = hook
    s.checkpoint()
""")


def _tmps(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(".tmp-"))


def _killed_save(root: str) -> str:
    """A server process SIGKILLed in the middle of a save; returns its temporary directory."""
    p = subprocess.run(
        [sys.executable, "-c", CHILD.format(helpers=os.path.dirname(__file__)), root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    (tmp,) = _tmps(root)
    return tmp


def test_a_killed_save_is_swept_when_the_next_server_starts(tmp_path):
    root = str(tmp_path / "root")
    tmp = _killed_save(root)
    # A restarted server in a container often has the dead one's PID: make it ours.
    mine = tmp.rsplit("-", 1)[0] + f"-{os.getpid()}"
    os.rename(os.path.join(root, tmp), os.path.join(root, mine))
    (tmp_path / "root" / ".tmp-not-ours").mkdir()
    (tmp_path / "root" / "notes.txt").write_text("keep me")
    s = reverb.Server([reverb.Table.queue("t", 1000)], checkpointer=ckpt(root))
    try:
        assert _tmps(root) == [".tmp-not-ours"]  # swept at start, before any save
        assert len(s.tables_by_name["t"]) == 28  # the finished checkpoint was restored
        assert (tmp_path / "root" / "notes.txt").read_text() == "keep me"
    finally:
        s.stop()


def test_a_save_in_progress_is_never_swept(tmp_path):
    root = str(tmp_path / "root")
    table = reverb.Table.queue("t", 1000)
    c = ckpt(root)
    s = reverb.Server([table], checkpointer=c)
    try:
        fill(s.localhost_client(), "t", 20)
        reached, go = threading.Event(), threading.Event()

        def hook(phase: str) -> None:
            if phase == "data":
                reached.set()
                assert go.wait(20)

        c._hook = hook
        saver = threading.Thread(target=s.checkpoint, daemon=True)
        saver.start()
        assert reached.wait(20)
        (busy,) = _tmps(root)
        assert store.sweep_temporary(root) == []  # this process, but a save holds it
        ckpt(root)  # another checkpointer starting on the same directory
        assert _tmps(root) == [busy]
        go.set()
        saver.join(20)
        assert _tmps(root) == [] and len(store.list_checkpoints(root)) == 1
    finally:
        go.set()
        s.stop()


def test_a_failed_save_removes_its_temporary_directory(tmp_path):
    root = str(tmp_path / "root")
    c = ckpt(root)
    s = reverb.Server([reverb.Table.queue("t", 1000)], checkpointer=c)
    try:
        fill(s.localhost_client(), "t", 20)

        def hook(phase: str) -> None:
            if phase == "items":
                raise OSError(28, "No space left on device (simulated)")

        c._hook = hook
        with pytest.raises(OSError, match="No space left"):
            s.checkpoint()
        assert _tmps(root) == []
    finally:
        s.stop()
