"""Row encoding and decoding from several threads at once (a server encodes samples on several
RPC threads, a client decodes them on several sampler workers). zstandard's compressor objects
must not be shared between threads: a shared one produced corrupt frames ("Destination buffer is
too small") in a full CI run."""

from __future__ import annotations

import threading

import numpy as np

from ostinato.wire import codec


def test_concurrent_compressed_round_trips_are_exact():
    errors = []
    barrier = threading.Barrier(8)

    def work(seed):
        rng = np.random.default_rng(seed)
        barrier.wait()
        try:
            for _ in range(150):
                n = int(rng.integers(50, 400))
                rows = np.repeat(rng.integers(0, 4, size=(n, 1)), 64, axis=1).astype(np.float32)
                objs = np.array([b"x" * int(k) for k in rng.integers(0, 300, size=n)], dtype=object)
                for arr in (rows, objs):
                    c, payload = codec.encode_rows(arr, compress=True)
                    back = codec.decode_payload(c, bytes(payload), arr.dtype, arr.shape[1:], n)
                    if not (back.shape == arr.shape and (back == arr).all()):
                        errors.append("mismatch")
                        return
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
