"""Runs an Ostinato server in a separate process for networked tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

_BOOT = """
import sys
{code}
import ostinato as _reverb
_server = _reverb.Server(TABLES, port={port}, **globals().get('SERVER_KWARGS', {{}}))
print("PORT", _server.port, flush=True)
try:
    _server.wait()
finally:
    _server.stop()
"""


class ServerProcess:
    """A child process serving ``TABLES`` (defined by ``code``) on localhost."""

    def __init__(self, code: str, port: int = 0, timeout: float = 30.0):
        src = _BOOT.format(code=textwrap.dedent(code), port=port)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", src],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("PORT "):
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server process failed: {self.proc.stderr.read()}")
        else:
            self.kill()
            raise RuntimeError("server process did not start in time")
        self.port = int(line.split()[1])
        self.address = f"localhost:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
