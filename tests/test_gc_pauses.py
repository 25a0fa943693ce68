"""``ostinato.gc_pauses``: what survives a full garbage collection is frozen (later full
collections skip it); frozen items and chunks are still freed when evicted; cycles that became
garbage while frozen are freed after the next unfreeze. The policy is process-wide, so each
check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ostinato.gc_pauses import keep_gc_pauses_short
from ostinato.server_cli import build_parser


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_survivors_are_frozen_and_cycles_freed_after_an_unfreeze():
    got = _run(
        """
        import gc, json, time, weakref
        from ostinato.gc_pauses import keep_gc_pauses_short

        class Node:
            pass

        policy = keep_gc_pauses_short(unfreeze_every=0.5)
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, alive for now
        alive = weakref.ref(a)
        gc.collect()  # a full collection: the cycle survives it and is frozen
        frozen_after_full = gc.get_freeze_count()
        del a, b  # now garbage, but frozen
        gc.collect()
        kept_while_frozen = alive() is not None
        deadline = time.monotonic() + 20
        while policy.stats()["unfreezes"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        gc.collect()  # everything visited again
        print(json.dumps({
            "frozen_after_full": frozen_after_full,
            "kept_while_frozen": kept_while_frozen,
            "freed_after_unfreeze": alive() is None,
            "stats": policy.stats(),
            "same_policy": keep_gc_pauses_short() is policy,
        }))
        """
    )
    assert got["frozen_after_full"] > 0
    assert got["kept_while_frozen"]
    assert got["freed_after_unfreeze"]
    assert got["stats"]["full_collections"] >= 3
    assert got["stats"]["longest_seconds"] > 0
    assert got["same_policy"]  # installed once per process


def test_frozen_items_and_chunks_are_freed_when_evicted():
    """Stored items form no cycles: an evicted item's chunk goes by reference counting, frozen
    or not, and the table keeps serving."""
    got = _run(
        """
        import gc, json, weakref
        import numpy as np
        import ostinato as reverb
        from ostinato.core import items as items_lib
        from ostinato.gc_pauses import keep_gc_pauses_short

        keep_gc_pauses_short(unfreeze_every=None)
        table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100,
                             reverb.rate_limiters.MinSize(1))
        server = reverb.Server([table])
        client = server.localhost_client()

        def write(n, start):
            with client.trajectory_writer(1) as w:
                for i in range(start, start + n):
                    w.append({"x": np.full(4, i, np.float32)})
                    w.create_item("t", 1.0, {"x": w.history["x"][-1]})

        write(100, 0)
        slots = table._slots
        first = next(t for t in slots.traj if t is not None)
        chunk = weakref.ref(items_lib.chunk_refs(first)[0].data)  # the chunk's own rows view
        del first
        gc.collect()  # the items and chunks are frozen now
        frozen = gc.get_freeze_count()
        write(1000, 100)  # evicts every item of the first write
        x = client.sample_batch("t", batch_size=8).data[0]
        print(json.dumps({
            "frozen": frozen,
            "chunk_freed": chunk() is None,
            "size": client.server_info()["t"].current_size,
            "sampled_new": bool((x >= 100).all()),
        }))
        server.stop()
        """
    )
    assert got["frozen"] > 0
    assert got["chunk_freed"]
    assert got["size"] == 100
    assert got["sampled_new"]


def test_stop_removes_the_policy():
    got = _run(
        """
        import gc, json
        from ostinato.gc_pauses import keep_gc_pauses_short
        policy = keep_gc_pauses_short(unfreeze_every=None)
        policy.stop()
        gc.collect()
        print(json.dumps({"frozen": gc.get_freeze_count(),
                          "callbacks": sum(1 for c in gc.callbacks
                                           if getattr(c, "__self__", None) is policy),
                          "new_policy": keep_gc_pauses_short(None) is not policy}))
        """
    )
    assert got == {"frozen": 0, "callbacks": 0, "new_policy": True}


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "10", True])
def test_a_bad_interval_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="unfreeze_every"):
        keep_gc_pauses_short(unfreeze_every=bad)


def test_server_cli_flags():
    parser = build_parser()
    args = parser.parse_args(["--config", "c.pbtxt"])
    assert not args.no_gc_freeze and args.gc_unfreeze_every == 600.0
    args = parser.parse_args(["--config", "c.pbtxt", "--no-gc-freeze", "--gc-unfreeze-every", "30"])
    assert args.no_gc_freeze and args.gc_unfreeze_every == 30.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--config", "c.pbtxt", "--gc-unfreeze-every", "0"])


def test_gc_figures_are_exported_while_installed():
    pytest.importorskip("prometheus_client")
    got = _run(
        """
        import gc, json, urllib.request
        import ostinato as reverb
        from ostinato.gc_pauses import keep_gc_pauses_short

        server = reverb.Server([reverb.Table.queue("q", 10)], metrics_port=0)
        url = f"http://localhost:{server.metrics_port}/metrics"
        before = urllib.request.urlopen(url, timeout=10).read().decode()
        keep_gc_pauses_short(unfreeze_every=None)
        gc.collect()
        after = urllib.request.urlopen(url, timeout=10).read().decode()
        values = {
            line.split()[0]: float(line.split()[1])
            for line in after.splitlines()
            if line.startswith("ostinato_gc_")
        }
        server.stop()
        print(json.dumps({"before": "ostinato_gc_" in before, "values": values}))
        """
    )
    assert not got["before"]  # nothing to report before the policy is installed
    v = got["values"]
    assert v["ostinato_gc_full_collections_total"] >= 1  # ours (the install's is not counted)
    assert v["ostinato_gc_full_collection_seconds_total"] > 0
    assert v["ostinato_gc_longest_full_collection_seconds"] > 0
    assert v["ostinato_gc_frozen_objects"] > 0


@pytest.mark.parametrize(
    ("how", "env", "installed"),
    [("wait()", "1", True), ("wait()", "0", False), ("wait(5)", "1", False)],
)
def test_a_server_script_that_waits_for_good_keeps_pauses_short(how, env, installed):
    """``server.wait()`` with no timeout (the end of a replay-server script) installs the
    policy unless ``OSTINATO_GC_FREEZE=0``; a bounded wait does not."""
    code = f"""
        import json, os, threading
        import ostinato as reverb
        from ostinato import gc_pauses
        os.environ["OSTINATO_GC_FREEZE"] = "{env}"
        server = reverb.Server([reverb.Table.queue("q", 10)])
        threading.Timer(0.5, server.stop).start()
        server.{how}
        print(json.dumps({{"installed": gc_pauses.active() is not None}}))
        """
    assert _run(code) == {"installed": installed}
