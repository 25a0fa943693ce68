"""Helpers shared by the wire tests: child client processes, a TCP proxy that can cut or
black-hole connections, and bounded waits (nothing here blocks without a deadline)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ostinato as reverb
from _helpers import wait_until  # noqa: F401 - re-exported for the wire tests

SERVICE = "/ostinato.Replay/"

QUEUE_CODE = """
import signal, ostinato as reverb
def _stop(*_):
    raise KeyboardInterrupt  # Server.wait() turns this into a graceful Server.stop()
signal.signal(signal.SIGTERM, _stop)
TABLES = [reverb.Table.queue("q", {size}), reverb.Table.queue("e", 10)]
"""
"""Server code for ServerProcess: a queue "q" of ``size`` and an empty queue "e"; SIGTERM makes
a graceful Server.stop()."""


def grpc_client(address: str, **kw: Any) -> Any:
    """A client that talks gRPC even to a server in this process."""
    kw.setdefault("unavailable_timeout", 5)
    return reverb.Client(address, in_process=False, **kw)


class Blocked:
    """Runs ``fn`` on a daemon thread and records how (and when) it ended."""

    def __init__(self, name, fn):
        self.name = name
        self.error = None
        self.ended_at = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name=name)
        self.thread.start()

    def _run(self, fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            self.error = e
        self.ended_at = time.monotonic()

    def join(self, timeout):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name} still blocked after {timeout}s"


@contextlib.contextmanager
def writing(client: Any, num_keep_alive_refs: int, **kw: Any) -> Any:
    """A TrajectoryWriter that is flushed on success and always closed: its ``__exit__`` only
    flushes (as Reverb's), and an unclosed writer keeps its stream open."""
    w = client.trajectory_writer(num_keep_alive_refs, **kw)
    try:
        yield w
        w.flush(timeout_ms=15_000)
    finally:
        try:
            w.close()
        except Exception:  # noqa: BLE001 - the error that matters is already propagating
            pass


class Child:
    """A Python child process running ``code`` (stdout read line by line on a thread)."""

    def __init__(self, code: str, *args: Any):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()

    def wait_line(self, pred: Callable[[str], bool], timeout: float, what: str) -> str:
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"child did not print {what} within {timeout}s (rc={self.proc.poll()}); "
                        f"stdout={self.lines[-5:]!r} stderr={self.stderr_tail()!r}"
                    )
                self._cv.wait(min(left, 0.1))

    def stderr_tail(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        try:
            return self.proc.stderr.read()[-2000:]
        except ValueError:
            return ""

    def finish(self, timeout: float) -> int:
        """Waits for exit (kills and fails on timeout); returns the exit code."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"child still running after {timeout}s; stdout={self.lines[-5:]!r}"
            ) from None
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)


# A child that writes items ``{"id": int64, "pad": float32[pad]}`` with a TrajectoryWriter and
# prints "FLUSHED <n>" once the first n items are confirmed by the server. n_items <= 0 writes
# forever. argv: address table writer_id n_items flush_every pad
WRITER = """
import sys, numpy as np, ostinato as reverb
addr, table, wid, n, every, pad = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
client = reverb.Client(addr, in_process=False, unavailable_timeout=5)
with client.trajectory_writer(1) as w:
    i = 0
    while n <= 0 or i < n:
        w.append({"id": np.int64(wid * 1_000_000 + i), "pad": np.full(pad, i, np.float32)})
        w.create_item(table, 1.0, {"id": w.history["id"][-1], "pad": w.history["pad"][-1]},
                      timeout_ms=30_000)
        i += 1
        if i % every == 0:
            w.flush(timeout_ms=30_000)
            print("FLUSHED", i, flush=True)
    w.flush(timeout_ms=30_000)
print("FLUSHED", i, flush=True)
print("DONE", flush=True)
"""

# A child that drains a queue in batches until a flag file exists and the queue is empty.
# Prints "IDS a,b,..." per batch and "DONE". argv: address table flag_path
SAMPLER = """
import os, sys, ostinato as reverb
addr, table, flag = sys.argv[1:4]
client = reverb.Client(addr, in_process=False, unavailable_timeout=5)
while True:
    try:
        s = client.sample_batch(table, 16, timeout=0.3)
    except reverb.errors.RateLimiterTimeout:
        if os.path.exists(flag):
            break
        continue
    col = s.data["id"] if isinstance(s.data, dict) else s.data[0]
    print("IDS", ",".join(str(int(x)) for x in col.reshape(-1)), flush=True)
print("DONE", flush=True)
"""


def ids_from_lines(lines: list[str]) -> list[int]:
    out: list[int] = []
    for line in lines:
        if line.startswith("IDS "):
            out += [int(x) for x in line[4:].split(",") if x]
    return out


def drain_ids(client: Any, table: str, timeout: float = 0.3, batch: int = 64) -> list[int]:
    """Samples a queue-like table (max_times_sampled=1) until empty; returns the ``id`` column."""
    out: list[int] = []
    while True:
        try:
            s = client.sample_batch(table, batch, timeout=timeout)
        except Exception as e:
            if type(e).__name__ == "RateLimiterTimeout":
                return out
            raise
        col = s.data["id"] if isinstance(s.data, dict) else s.data[0]
        out += [int(x) for x in np.asarray(col).reshape(-1)]


class Proxy:
    """A TCP proxy 127.0.0.1:port -> 127.0.0.1:target. ``drop_replies`` silently discards what
    the server sends; ``cut()`` closes every open connection (new ones are still accepted)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self._lsock.settimeout(0.1)  # so that close() ends the accept loop promptly
        self._closed = False
        self.port = self._lsock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.drop_replies = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            c.settimeout(None)
            try:
                s = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._socks += [c, s]
            for a, b, reply in ((c, s, False), (s, c, True)):
                t = threading.Thread(target=self._pump, args=(a, b, reply), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, reply: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if reply and self.drop_replies.is_set():
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def close(self) -> None:
        self._closed = True
        self._lsock.close()
        self.cut()
        for t in self._threads:
            t.join(2)
