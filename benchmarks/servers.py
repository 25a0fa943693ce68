"""Where the benchmarks run: implementations, interpreters, servers and child processes.

A workload's server is either in this process (embedded: ``reverb.Server(tables)`` and
``server.localhost_client()``) or in a child process on localhost (networked: started as
``servers.py --impl IMPL --serve TABLES_JSON``, clients ``reverb.Client("localhost:PORT")``);
:class:`Deployment` hides which. Run directly, this file is also the memory child
(``servers.py --impl IMPL --mem-child MEM|MEM3 --mem-items N``: one run in a fresh process).
Shared by ``harness.py`` and the benchmark scripts; imports only the standard library and
``workloads`` (numpy), so it runs in either interpreter.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import workloads as wl  # noqa: E402

DEFAULT_REVERB_PYTHON = "/opt/reverb-venv/bin/python"
SERVER_START_TIMEOUT = 180
_prefix = ["bench"]


def log(msg: str) -> None:
    print(f"[{_prefix[0]}] {msg}", file=sys.stderr, flush=True)


def set_log_prefix(name: str) -> None:
    _prefix[0] = name


# ---------------------------------------------------------------------------------------------
# Implementations and interpreters
# ---------------------------------------------------------------------------------------------


def import_impl(name: str):
    """Returns (the module used as ``reverb``, its version): dm-reverb for ``reverb``,
    Ostinato (installed, or from this checkout's ``src/``) for ``ostinato``."""
    from importlib.metadata import PackageNotFoundError, version

    if name == "reverb":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import reverb

        try:
            return reverb, version("dm-reverb")
        except PackageNotFoundError:  # pragma: no cover
            return reverb, getattr(reverb, "__version__", "unknown")
    if name != "ostinato":
        raise ValueError(f"unknown impl {name!r}")
    try:
        import ostinato as reverb
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT / "src"))
        import ostinato as reverb
    ver = getattr(reverb, "__version__", None)
    if ver is None:
        try:
            ver = version("ostinato")
        except PackageNotFoundError:
            ver = "unknown"
    return reverb, ver


def reverb_python() -> str:
    """The dm-reverb interpreter: ``$OSTINATO_REVERB_PYTHON`` or /opt/reverb-venv/bin/python."""
    py = os.environ.get("OSTINATO_REVERB_PYTHON", DEFAULT_REVERB_PYTHON)
    if not os.path.exists(py):
        raise SystemExit(
            f"reverb python {py!r} not found; set OSTINATO_REVERB_PYTHON "
            "(see benchmarks/README.md, 'Comparing with dm-reverb')"
        )
    return py


def git_commit() -> str | None:
    """``git rev-parse --short HEAD`` of this checkout, ``+dirty src`` if src/ has changes."""

    def run(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(HERE), *a], capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        head, dirty = run("rev-parse", "--short", "HEAD"), run("status", "--porcelain", "../src")
        return (head + ("+dirty src" if dirty else "")) or None
    except Exception:  # noqa: BLE001 - no git checkout: no revision
        return None


# ---------------------------------------------------------------------------------------------
# Child processes
# ---------------------------------------------------------------------------------------------


def is_native_noise(line: str) -> bool:
    """Reverb/TF native logging (very chatty, e.g. 'pending items is alarmingly high')."""
    return (
        line.startswith("[reverb/cc/")
        or "tensorflow/core" in line
        or line.startswith("To enable the following instructions")
        or "external/local_xla" in line
        or "cuda_" in line
    )


def pump(stream, prefix: str, counter: list[int] | None = None) -> None:
    """Forwards a child's stderr to ours, dropping (and counting) native Reverb/TF lines."""
    for line in stream:
        if is_native_noise(line):
            if counter is not None:
                counter[0] += 1
            continue
        sys.stderr.write(prefix + line)
        sys.stderr.flush()


def readline(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """Next stdout line of a child, or RuntimeError after ``timeout`` s / on EOF."""
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: q.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = q.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"{what}: no answer within {timeout:.0f} s") from None
    if not line:
        raise RuntimeError(f"{what}: child exited (rc={proc.poll()})")
    return line.strip()


def stop_child(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Closes a child's stdin (its signal to stop) and waits, killing it after ``timeout``."""
    try:
        proc.stdin.close()
    except Exception:  # noqa: BLE001 - best-effort shutdown
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  child {proc.pid} did not stop within {timeout:.0f} s; killing it")
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------
# Servers: embedded (this process) or networked (a child process on localhost)
# ---------------------------------------------------------------------------------------------


def serve_main(impl: str, spec_json: str) -> int:
    """``--serve``: builds the tables, prints ``PORT n``, serves until stdin closes."""
    reverb, _ = import_impl(impl)
    tables = [wl.build_table(reverb, s) for s in json.loads(spec_json)]
    # ostinato: port 0 = a free port (on localhost); reverb: None = portpicker.
    server = reverb.Server(tables=tables, port=0 if impl == "ostinato" else None)
    if impl == "ostinato":
        try:  # what ostinato-server does by default (trees before session 34 lack it)
            from ostinato.gc_pauses import keep_gc_pauses_short
        except ImportError:
            pass
        else:
            keep_gc_pauses_short()
    print(f"PORT {server.port}", flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    try:
        server.stop()
    finally:
        os._exit(0)  # skip slow interpreter/TF teardown


class ServerProc:
    """A server in a child process (same interpreter as this one)."""

    def __init__(self, impl: str, specs: list[dict]):
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--impl", impl, "--serve", json.dumps(specs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=pump, args=(self.proc.stderr, "  (server) "), daemon=True).start()
        try:
            line = readline(self.proc, SERVER_START_TIMEOUT, "server start")
            if not line.startswith("PORT "):
                raise RuntimeError(f"server: unexpected output {line!r}")
        except BaseException:
            self.proc.kill()
            raise
        self.port = int(line.split()[1])
        log(
            f"  server pid {self.proc.pid} on localhost:{self.port} "
            f"(started in {time.perf_counter() - t0:.1f} s)"
        )

    def stop(self) -> None:
        stop_child(self.proc)


def connect(reverb, impl: str, port: int, check: bool = True):
    """A network client (Ostinato: ``in_process=False``, i.e. gRPC); with ``check``, one
    ``server_info()`` call has made the connection."""
    if impl == "ostinato":
        client = reverb.Client(f"localhost:{port}", in_process=False)
    else:
        client = reverb.Client(f"localhost:{port}")
    if check:
        client.server_info()
    return client


def close_client(client) -> None:
    close = getattr(client, "close", None)  # dm-reverb's Client has no close()
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - best-effort shutdown
            pass


class Deployment:
    """A server with the given tables; ``client()`` hands out a new client each call:
    ``server.localhost_client()`` (embedded) or ``reverb.Client("localhost:PORT")``."""

    def __init__(self, reverb, impl: str, mode: str, specs: list[dict]):
        self.reverb, self.impl, self.clients = reverb, impl, []
        self.server = self.proc = None
        if mode == "embedded":
            self.server = reverb.Server(tables=[wl.build_table(reverb, s) for s in specs])
        else:
            self.proc = ServerProc(impl, specs)

    def client(self):
        c = (
            self.server.localhost_client()
            if self.server is not None
            else connect(self.reverb, self.impl, self.proc.port)
        )
        self.clients.append(c)
        return c

    def stop(self) -> None:
        for c in self.clients:
            close_client(c)
        if self.server is not None:
            t0 = time.perf_counter()
            self.server.stop()
            if time.perf_counter() - t0 > 1.0:
                log(f"  (server.stop() took {time.perf_counter() - t0:.1f} s)")
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------
# Memory runs: the child side (harness.run_mem starts them)
# ---------------------------------------------------------------------------------------------


def settled_rss() -> int:
    """RSS of this process plus its descendants, after garbage collection and a pause."""
    gc.collect()
    time.sleep(0.5)
    gc.collect()
    try:
        import psutil
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    p = psutil.Process()
    total = p.memory_info().rss
    for c in p.children(recursive=True):
        try:
            total += c.memory_info().rss
        except psutil.Error:
            pass
    return total


def _child_main(argv=None) -> int:
    p = argparse.ArgumentParser(description="child processes of the benchmarks")
    p.add_argument("--impl", choices=["ostinato", "reverb"], required=True)
    p.add_argument("--serve", default=None)
    p.add_argument("--mem-child", choices=["MEM", "MEM3"], default=None)
    p.add_argument("--mem-items", type=int, default=wl.FULL.mem_items)
    p.add_argument("--checkpoints", type=int, default=wl.FULL.mem_checkpoints)
    args = p.parse_args(argv)
    if args.serve is not None:
        return serve_main(args.impl, args.serve)
    if args.mem_child is None:
        p.error("give --serve or --mem-child")
    reverb, _ = import_impl(args.impl)
    res = wl.mem_child(reverb, args.mem_child, args.mem_items, args.checkpoints, settled_rss)
    print(json.dumps(res), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter/TF teardown


if __name__ == "__main__":
    sys.exit(_child_main())
