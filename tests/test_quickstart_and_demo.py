"""Reverb's quick start runs unchanged with `import ostinato as reverb`; the demo runs."""

import subprocess
import sys

import numpy as np

import ostinato as reverb

QUICKSTART = """
import ostinato as reverb

server = reverb.Server(tables=[
    reverb.Table(
        name='my_table',
        sampler=reverb.selectors.Prioritized(priority_exponent=0.8),
        remover=reverb.selectors.Fifo(),
        max_size=int(1e6),
        rate_limiter=reverb.rate_limiters.MinSize(2)),
])
client = reverb.Client(f'localhost:{server.port}')
client.insert([0, 1], priorities={'my_table': 1.0})
client.insert([2, 3], priorities={'my_table': 0.5})
samples = list(client.sample('my_table', num_samples=2))
assert len(samples) == 2 and len(samples[0]) == 1
with client.trajectory_writer(num_keep_alive_refs=3) as writer:
    writer.append({'a': 2, 'b': 12})
    writer.append({'a': 3, 'b': 13})
    writer.append({'a': 4})
    writer.create_item(
        table='my_table',
        priority=1.5,
        trajectory={
            'a': writer.history['a'][:],
            'b': writer.history['b'][:2],
        })
    writer.end_episode()
info = client.server_info()['my_table']
assert info.current_size == 3, info
print('quickstart ok')
"""


def test_reverb_quickstart_runs_unchanged():
    out = subprocess.run(
        [sys.executable, "-c", QUICKSTART], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "quickstart ok" in out.stdout


def test_demo_runs_and_prints_throughput():
    out = subprocess.run(
        [sys.executable, "-m", "ostinato.demo", "--seconds", "2", "--actors", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "items/s" in out.stdout and "Done:" in out.stdout


def test_demo_stops_cleanly_without_tracebacks():
    # Issue 12 item 6: the demo used to stop the server under actors still blocked on the rate
    # limiter, and their threads died printing "CancelledError: Table 'replay' has been closed."
    # tracebacks. Four actors against one learner keep the rate limiter busy at the stop.
    out = subprocess.run(
        [sys.executable, "-m", "ostinato.demo", "--seconds", "2", "--actors", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Done:" in out.stdout, text
    assert "Traceback" not in text and "CancelledError" not in text, text


def test_demo_worker_is_quiet_when_the_server_stops_under_it(make_server, capsys):
    import threading

    from ostinato.demo import _Worker

    # A full queue: the second insert blocks until the server stops.
    server = make_server(reverb.Table.queue("t", 1))
    client = server.localhost_client()
    client.insert(0, {"t": 1.0})
    stopping = threading.Event()
    w = _Worker("blocked", lambda: client.insert(1, {"t": 1.0}), (), stopping)
    w.start()
    w.join(0.3)
    assert w.is_alive()  # really blocked in the call
    stopping.set()
    server.stop()
    w.join(10)
    assert not w.is_alive() and w.error is None
    assert capsys.readouterr().err == ""


def test_demo_worker_reports_real_errors(capsys):
    import threading

    from ostinato.demo import _Worker

    def boom():
        raise ValueError("a real bug")

    stopping = threading.Event()
    stopping.set()  # even during shutdown, an error that is not "server stopped" is reported
    w = _Worker("learner", boom, (), stopping)
    w.start()
    w.join(10)
    assert isinstance(w.error, ValueError)
    err = capsys.readouterr().err
    assert "learner failed" in err and "Traceback" in err and "a real bug" in err

    # A "server stopped" error while the server is meant to be running is reported too.
    def cancelled():
        raise reverb.errors.CancelledError("Table 't' has been closed.")

    w = _Worker("actor 0", cancelled, (), threading.Event())
    w.start()
    w.join(10)
    assert isinstance(w.error, reverb.errors.CancelledError)
    assert "actor 0 failed" in capsys.readouterr().err


class _FakeTFShape:
    def __init__(self, dims):
        self._dims = dims

    def as_list(self):
        return list(self._dims)


class _FakeTFDType:
    def __init__(self, np_dtype):
        self.as_numpy_dtype = np_dtype


class TensorSpec:  # duck-types tf.TensorSpec without importing TensorFlow
    def __init__(self, shape, dtype, name=None):
        self.shape = _FakeTFShape(shape)
        self.dtype = _FakeTFDType(dtype)
        self.name = name

    def is_compatible_with(self, other):  # pragma: no cover - present on the real class
        return True


def test_tf_style_signature_is_accepted_and_validated(make_server):
    sig = {"obs": TensorSpec([2, 3], np.float32), "act": TensorSpec([2], np.int64)}
    server = make_server(reverb.Table.queue("q", 10, signature=sig))
    client = server.localhost_client()
    with client.trajectory_writer(2) as w:
        for i in range(2):
            w.append({"obs": np.zeros(3, np.float32), "act": np.int64(i)})
        w.create_item("q", 1.0, {"obs": w.history["obs"][:], "act": w.history["act"][:]})
        try:
            w.create_item("q", 1.0, {"obs": w.history["obs"][-1:], "act": w.history["act"][:]})
        except ValueError as e:
            assert "obs" in str(e) and "[2,3]" in str(e) and "[1,3]" in str(e)
        else:
            raise AssertionError("shape mismatch not detected")
    s = next(client.sample("q", emit_timesteps=False, unpack_as_table_signature=True))
    assert s.data["obs"].shape == (2, 3) and s.data["act"].tolist() == [0, 1]
