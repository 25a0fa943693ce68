"""Keys drawn by writers: distinct across threads and across forked processes."""

from __future__ import annotations

import os
import threading

import pytest

from ostinato.core import keys


def test_new_key_range_and_distinct():
    drawn = [keys.new_key() for _ in range(5_000)]
    assert len(set(drawn)) == len(drawn)
    assert all(0 <= k < 2**64 - 1 for k in drawn)


def test_new_key_from_threads_distinct():
    out: list[list[int]] = [[] for _ in range(4)]

    def draw(i: int) -> None:
        out[i] = [keys.new_key() for _ in range(3_000)]

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [k for part in out for k in part]
    assert len(set(every)) == len(every) == 12_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_processes_draw_their_own_keys():
    """Actors forked from one parent (multiprocessing's default on Linux) used to copy the
    generator's state and draw the very same item and chunk keys."""
    keys.new_key()  # the parent has drawn (and pooled) keys before it forks
    children = []
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its next keys, then leave at once
            os.close(r)
            os.write(w, ",".join(str(keys.new_key()) for _ in range(50)).encode())
            os._exit(0)
        os.close(w)
        children.append((pid, r))
    mine = {keys.new_key() for _ in range(50)}
    drawn = []
    for pid, r in children:
        with os.fdopen(r) as f:
            drawn.append({int(x) for x in f.read().split(",")})
        assert os.waitpid(pid, 0)[1] == 0
    assert len(drawn[0]) == len(drawn[1]) == 50
    assert not drawn[0] & drawn[1]
    assert not mine & drawn[0] and not mine & drawn[1]
