"""Versioned, checksummed, atomic checkpoints of replay tables (no pickle).

:mod:`.format` defines the files, :mod:`.encode` flattens items and chunks, :mod:`.store`
writes, prunes and reads checkpoint directories. Users go through
:mod:`ostinato.checkpointers` (the checkpointers are in :mod:`.checkpointers`).
"""

from ostinato.checkpointing.format import (
    FORMAT_VERSION,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)
from ostinato.checkpointing.store import latest, list_checkpoints, load, save

__all__ = [
    "FORMAT_VERSION",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "latest",
    "list_checkpoints",
    "load",
    "save",
]
