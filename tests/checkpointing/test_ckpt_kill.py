"""kill -9 of the server process in the middle of a save leaves the previous checkpoint whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from ckpt_helpers import ckpt

import ostinato as reverb

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {helpers!r})
    import ostinato as reverb
    from ostinato.checkpointing import store
    from ckpt_helpers import ckpt, fill
    store.DATA_FILE_BYTES = 256  # several data files, so a kill can land between them
    root, phase = sys.argv[1], sys.argv[2]
    table = reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 1000,
                         reverb.rate_limiters.MinSize(1))
    c = ckpt(root)
    s = reverb.Server([table], checkpointer=c)
    fill(s.localhost_client(), "t", 50, seed=1)
    s.checkpoint()                                   # the previous checkpoint: 48 items
    fill(s.localhost_client(), "t", 30, seed=2)      # 28 more
    def hook(p):
        if p == phase:
            os.kill(os.getpid(), signal.SIGKILL)
    c._hook = hook
    s.checkpoint()
    print("finished")
""")


def _table() -> reverb.Table:
    return reverb.Table(
        "t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 1000, reverb.rate_limiters.MinSize(1)
    )


@pytest.mark.parametrize(
    "phase,expected",
    [
        ("snapshot", 48),
        ("data-file-0", 48),
        ("data-file-2", 48),
        ("data", 48),
        ("items", 48),
        ("manifest", 48),
        ("renamed", 76),
    ],
)
def test_kill_during_save(tmp_path, phase, expected):
    root = str(tmp_path / "root")
    code = CHILD.format(helpers=os.path.dirname(__file__))
    p = subprocess.run(
        [sys.executable, "-c", code, root, phase], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    s = reverb.Server([_table()], checkpointer=ckpt(root))
    try:
        assert len(s.tables_by_name["t"]) == expected
        s.checkpoint()  # the next save removes the dead process's temporary directory
        assert not [n for n in os.listdir(root) if n.startswith(".tmp-")]
    finally:
        s.stop()
