"""Checkpointers (Reverb's ``reverb.checkpointers``): save and restore a server's tables.

Example:
  >>> import ostinato as reverb
  >>> ckpt = reverb.checkpointers.DefaultCheckpointer("/tmp/replay_ckpt", keep=3)
  >>> server = reverb.Server(tables, checkpointer=ckpt)   # restores the newest checkpoint
  >>> path = server.localhost_client().checkpoint()      # writes a new one

The checkpointers live in :mod:`ostinato.checkpointing.checkpointers` (the restore rule is
described there), the on-disk format in :mod:`ostinato.checkpointing.format`; this module gathers
the public names under Reverb's.
"""

from ostinato.checkpointing.checkpointers import (
    CheckpointerBase,
    DefaultCheckpointer,
    TempDirCheckpointer,
    default_checkpointer,
    store_list,
)
from ostinato.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)

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
