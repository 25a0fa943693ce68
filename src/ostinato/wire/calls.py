"""What the gRPC service keeps about calls: :class:`RequestStats` (calls by method and status,
bytes in and out, read by :mod:`ostinato.ops`) and :class:`Gone` (whether a call ended or its
client left, for work running in the service's thread pools).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class RequestStats:
    """Requests served, by method and status, and bytes received and sent, by method.

    An Insert stream counts each request message (``OK`` once its items are stored, else the
    status that ended the stream on it) and each acknowledgement's bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = {}
        self._received: dict[str, int] = {}
        self._sent: dict[str, int] = {}

    def record(self, method: str, status: str | None, received: int, sent: int) -> None:
        """One request of ``method`` ended with ``status`` (None: not counted as a request,
        bytes only)."""
        with self._lock:
            if status is not None:
                key = (method, status)
                self._calls[key] = self._calls.get(key, 0) + 1
            if received:
                self._received[method] = self._received.get(method, 0) + received
            if sent:
                self._sent[method] = self._sent.get(method, 0) + sent

    def snapshot(self) -> dict[str, Any]:
        """``{"requests": {method: {status: n}}, "received_bytes": {method: n},
        "sent_bytes": {method: n}}``."""
        with self._lock:
            calls = dict(self._calls)
            received, sent = dict(self._received), dict(self._sent)
        by_method: dict[str, dict[str, int]] = {}
        for (method, status), n in sorted(calls.items()):
            by_method.setdefault(method, {})[status] = n
        return {"requests": by_method, "received_bytes": received, "sent_bytes": sent}


#: Open Insert streams a server accepts before it answers RESOURCE_EXHAUSTED.
class Gone:
    """Set (on the event loop) when a call ends or its client leaves; read from the pools."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._hooks: list[Callable[[], Any]] = []
        self._lock = threading.Lock()

    def set(self, *_: Any) -> None:
        with self._lock:
            self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def is_set(self) -> bool:
        return self._event.is_set()

    def active(self) -> bool:
        return not self._event.is_set()

    def on_set(self, hook: Callable[[], Any]) -> None:
        """Calls ``hook`` when set (at once if it already is)."""
        with self._lock:
            if not self._event.is_set():
                self._hooks.append(hook)
                return
        hook()
