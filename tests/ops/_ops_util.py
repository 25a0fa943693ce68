"""Helpers of the ops tests: a server without the Stats call (an older Ostinato) and a tmux
terminal to run ``ostinato top`` in."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from typing import Any

import grpc
import pytest

from ostinato.wire import protocol

STATS = protocol.method_path("Stats")


class WithoutStats(grpc.GenericRpcHandler):
    """The service of an older server: every method but Stats."""

    def __init__(self, inner):
        self._inner = inner

    def service(self, details):
        if details.method == STATS:
            return None  # gRPC answers UNIMPLEMENTED
        return self._inner.service(details)


def serve_without_stats(server) -> tuple[Any, str]:
    """Serves ``server``'s tables on a new port without the Stats call; (grpc server, address)."""
    from ostinato.wire.service import ReplayService, serve

    gs, port = serve([WithoutStats(ReplayService(server).generic_handler())], "localhost:0")
    return gs, f"localhost:{port}"


_count = itertools.count()


def need_tmux() -> str:
    """tmux's path; skips the test without it (fails instead when OSTINATO_REQUIRE_TMUX=1, as
    in CI, whose .ci/run installs it)."""
    path = shutil.which("tmux")
    if path is None:
        msg = "tmux is not installed (apt-get install tmux; .ci/run installs it)"
        if os.environ.get("OSTINATO_REQUIRE_TMUX") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


class Tmux:
    """A detached tmux session (on a server of its own) running an interactive bash."""

    def __init__(self, width: int = 120, height: int = 40, cwd: str | None = None):
        self.tmux = need_tmux()
        self.socket = f"ostinato-test-{os.getpid()}-{next(_count)}"
        self.target = "t"
        self._run(
            "new-session",
            "-d",
            "-s",
            self.target,
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            cwd or os.getcwd(),
            "bash --norc --noprofile",
        )

    def _run(self, *args: str) -> str:
        out = subprocess.run(
            [self.tmux, "-L", self.socket, *args], capture_output=True, text=True, timeout=20
        )
        if out.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {out.stderr.strip()}")
        return out.stdout

    def type(self, line: str) -> None:
        self._run("send-keys", "-t", self.target, "-l", line)
        self._run("send-keys", "-t", self.target, "Enter")

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", self.target, *keys)

    def screen(self, colours: bool = False) -> str:
        return self._run("capture-pane", "-p", *(["-e"] if colours else []), "-t", self.target)

    def wait_for(self, pred, timeout: float = 30.0, what: str = "the screen") -> str:
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = self.screen()
            if pred(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")

    def close(self) -> None:
        try:
            self._run("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass

    def __enter__(self) -> Tmux:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
