"""Checkpointers (Reverb's ``reverb.checkpointers``): save and restore a server's tables.

Example:
  >>> import ostinato as reverb
  >>> ckpt = reverb.checkpointers.DefaultCheckpointer("/tmp/replay_ckpt", keep=3)
  >>> server = reverb.Server(tables, checkpointer=ckpt)   # restores the newest checkpoint
  >>> path = server.localhost_client().checkpoint()      # writes a new one

The on-disk format is described in :mod:`ostinato.checkpointing.format`.

Restore rule (differs from Reverb on purpose): every checkpointed table must exist on the new
server with the same sampler, remover, max_size, max_times_sampled and rate limiter settings,
otherwise :class:`CheckpointMismatchError` names the differing fields. Reverb silently replaced
the new server's settings with the checkpoint's. Signatures: a server table without one takes the
checkpoint's (logged); if both have one they must be equal (else the error names ``signature``);
a checkpoint that recorded none keeps the server's. Server tables missing from the checkpoint
start empty (a warning is logged).
"""

from __future__ import annotations

import abc
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ostinato.checkpointing import store
from ostinato.checkpointing.format import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)
from ostinato.validate import is_real, positive_int

_log = logging.getLogger(__name__)


class CheckpointerBase(abc.ABC):
    """Base class of checkpointers: what :class:`ostinato.Server` calls."""

    def internal_checkpointer(self) -> CheckpointerBase:
        """Reverb's accessor of the C++ object; here the checkpointer itself."""
        return self

    @abc.abstractmethod
    def save(self, tables: Sequence[Any]) -> str:
        """Writes a checkpoint of ``tables``; returns its path."""

    @abc.abstractmethod
    def restore(self, tables: Sequence[Any]) -> str | None:
        """Loads the newest checkpoint (or the fallback) into empty ``tables``; returns its
        path, or None if there is nothing to load."""

    def start_periodic(self, save: Callable[[], str]) -> None:
        """Starts periodic saves if configured (the server calls this once it serves)."""
        return None

    def stop_periodic(self) -> None:
        """Stops periodic saves (the server calls this when it stops)."""
        return None


class DefaultCheckpointer(CheckpointerBase):
    """Writes checkpoints under ``path`` and restores the newest one when a server starts.

    Restore rule: every checkpointed table must exist on the restoring server with the same
    sampler, remover, ``max_size``, ``max_times_sampled`` and rate limiter settings, else
    :class:`CheckpointMismatchError` names the table and the differing fields. The table's
    signature is recorded too: a server table without a signature adopts the checkpoint's
    (logged at INFO); if both have one and they differ, the error names ``signature``; a
    checkpoint without one (written by an Ostinato that did not record signatures) keeps the
    server's. Server tables missing from the checkpoint start empty (a warning is logged).

    Args:
      path: root directory; each checkpoint is a ``ckpt-<UTC time>-<seq>`` directory in it.
      group: Reverb's argument; a non-empty group is refused as in Reverb's open-source build.
      fallback_checkpoint_path: a checkpoint *directory* loaded when ``path`` holds none.
      keep: how many of our checkpoints to keep under ``path`` (older ones are deleted; files
        and directories not written by Ostinato are never touched). Reverb kept 1.
      every_seconds: if set, the server also saves a checkpoint this often.
      compression: ``None`` (raw rows, the default) or ``"zstd"`` for chunk data.
      save_cpu_share: the share of the Python interpreter a save may take while the server keeps
        serving, in (0, 1]. The default 0.5 keeps inserts and samples in the same process at about
        half speed or better during a save and makes the save about twice as long as
        unpaced; 1.0 saves as fast as possible.
      progress: optional ``progress(phase, done_bytes, total_bytes)`` callback (phase
        ``"save"`` or ``"load"``).
      progress_after_seconds: a restore calls ``progress`` only once it has run this long, so
        that quick restores draw no progress bar (0: from the start).
    """

    def __init__(
        self,
        path: str,
        group: str = "",
        fallback_checkpoint_path: str | None = None,
        *,
        keep: int = 1,
        every_seconds: float | None = None,
        compression: str | None = None,
        save_cpu_share: float = 0.5,
        progress: Callable[[str, int, int], None] | None = None,
        progress_after_seconds: float = store.PROGRESS_AFTER_S,
    ):
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ValueError(f"path ({path!r}) must be a non-empty directory path")
        if group:
            raise ValueError(f"group ({group!r}): setting non-empty group is not supported")
        positive_int("keep", keep)
        if every_seconds is not None and not every_seconds > 0:
            raise ValueError(f"every_seconds ({every_seconds!r}) must be None or > 0")
        if compression not in (None, "zstd"):
            raise ValueError(f"compression ({compression!r}) must be None or 'zstd'")
        if not is_real(save_cpu_share) or not 0.0 < save_cpu_share <= 1.0:
            raise ValueError(f"save_cpu_share ({save_cpu_share!r}) must be a number in (0, 1]")
        if not is_real(progress_after_seconds) or not progress_after_seconds >= 0:
            raise ValueError(
                f"progress_after_seconds ({progress_after_seconds!r}) must be a number >= 0"
            )
        self.path = os.fspath(path)
        self.group = group
        self.fallback_checkpoint_path = fallback_checkpoint_path
        self.keep = keep
        self.every_seconds = every_seconds
        self.compression = compression
        self.save_cpu_share = float(save_cpu_share)
        self.progress = progress
        self.progress_after_seconds = float(progress_after_seconds)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hook: Callable[[str], None] | None = None  # tests: called between save phases
        # Saves killed before they finished (a crashed or SIGKILLed server) left temporary
        # directories; remove those nobody is writing (store.sweep_temporary).
        store.sweep_temporary(self.path)

    def save(self, tables: Sequence[Any]) -> str:
        with self._lock:  # one save at a time
            return store.save(
                self.path,
                list(tables),
                keep=self.keep,
                compression=self.compression,
                progress=self.progress,
                hook=self._hook,
                share=self.save_cpu_share,
            )

    def restore(self, tables: Sequence[Any]) -> str | None:
        store.sweep_temporary(self.path)  # a server starts: no save of its own is running
        by_name = {t.name: t for t in tables}
        path = store.latest(self.path)
        if path is None and self.fallback_checkpoint_path is not None:
            path = os.path.abspath(self.fallback_checkpoint_path)
            if not os.path.isdir(path):
                raise CheckpointNotFoundError(
                    f"fallback_checkpoint_path {path} is not a checkpoint directory"
                )
        if path is None:
            _log.info("no checkpoint under %s; starting with empty tables", self.path)
            return None
        store.load(path, by_name, self.progress, progress_after=self.progress_after_seconds)
        missing = sorted(set(by_name) - {m for m in _table_names(path)})
        if missing:
            _log.warning(
                "tables %s are not in checkpoint %s and start empty", ", ".join(missing), path
            )
        return path

    def start_periodic(self, save: Callable[[], str]) -> None:
        if self.every_seconds is None or self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(self.every_seconds):
                try:
                    save()
                except Exception:  # noqa: BLE001 - keep serving; the next period tries again
                    _log.exception("periodic checkpoint under %s failed", self.path)

        self._thread = threading.Thread(target=loop, name="ostinato-checkpoint", daemon=True)
        self._thread.start()

    def stop_periodic(self) -> None:
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join()

    def __repr__(self) -> str:
        return f"DefaultCheckpointer(root_dir={self.path}, group={self.group})"


def _table_names(path: str) -> list[str]:
    from ostinato.checkpointing.format import read_manifest

    return [t["name"] for t in read_manifest(path)["tables"]]


def store_list(path: str) -> list[str]:
    """Names of the finished checkpoints under ``path``, oldest first."""
    return store.list_checkpoints(path)


class TempDirCheckpointer(DefaultCheckpointer):
    """A :class:`DefaultCheckpointer` writing to a new temporary directory."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp(prefix="ostinato-ckpt-"))


def default_checkpointer(group: str | None = None) -> CheckpointerBase:
    """Reverb's default: a :class:`TempDirCheckpointer` (``group`` is ignored, as in Reverb)."""
    return TempDirCheckpointer()


__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
    "store_list",
]
