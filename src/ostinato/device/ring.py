"""Host-side ring arithmetic shared by the torch buffers.

The cursor lives on the host as plain Python integers. Every quantity it tracks follows from
the *shapes* of the inserts (how many rows each one carried), never from tensor values, so
keeping it on the host costs no device synchronisation, and ``size()`` is a free host read.

Every inserted row gets an id from a monotonic counter; row ``id`` lives in slot
``id % capacity`` and is still stored while ``total - size <= id < total``. Sampled indices are
these ids, which is what lets a priority update recognise a slot that has been overwritten
since it was sampled (MindSpore's newer GPU kernel does the same; its CPU kernel and its
``head`` bookkeeping get it wrong, see QUIRK notes in the design reference).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ostinato.validate import is_int, positive_int


@dataclasses.dataclass(frozen=True)
class Segment:
    """One contiguous write: rows ``[src, src + length)`` of a batch go to slots
    ``[slot, slot + length)``."""

    slot: int
    src: int
    length: int


class RingCursor:
    """FIFO ring bookkeeping: which slots an insert writes, and where logical rows live.

    Args:
        capacity: Number of slots.

    Example:
        >>> ring = RingCursor(4)
        >>> ring.advance(6)  # a batch that wraps: only its last 4 rows are kept
        (Segment(slot=2, src=2, length=2), Segment(slot=0, src=4, length=2))
        >>> ring.size, ring.slot_of(0)  # oldest row is row 2 of the batch, in slot 2
        (4, 2)
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = positive_int("capacity", capacity)
        self.total = 0
        self.size = 0

    @property
    def oldest_id(self) -> int:
        """Id of the oldest stored row (equal to ``total`` when empty)."""
        return self.total - self.size

    def advance(self, n: int) -> tuple[Segment, ...]:
        """Accounts for an insert of ``n`` rows and returns the slot ranges to write.

        When ``n > capacity`` only the last ``capacity`` rows are kept (the others would be
        overwritten by the same insert); their ids are issued and immediately stale.

        Args:
            n: Rows in the insert, ``>= 0``.

        Returns:
            Zero, one or two segments, in batch order.
        """
        if n <= 0:
            return ()
        cap = self.capacity
        kept = min(n, cap)
        src = n - kept
        slot = (self.total + src) % cap
        first = min(kept, cap - slot)
        self.total += n
        self.size = min(self.size + n, cap)
        if first == kept:
            return (Segment(slot, src, kept),)
        return (Segment(slot, src, first), Segment(0, src + first, kept - first))

    def id_of(self, index: Any) -> int:
        """Maps a logical index (0 oldest, negative from the newest) to a row id.

        Raises:
            IndexError: If the index is out of range.
            TypeError: If ``index`` is not an integer.
        """
        if not is_int(index):
            if hasattr(index, "__index__"):
                index = index.__index__()
            else:
                raise TypeError(f"index ({index!r}) must be an integer")
        i = int(index)
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(f"index ({int(index)}) out of range for a buffer of size {self.size}")
        return self.oldest_id + i

    def slot_of(self, index: Any) -> int:
        """Maps a logical index to its physical slot; see :meth:`id_of`."""
        return self.id_of(index) % self.capacity

    def reset(self) -> None:
        """Empties the ring. Ids keep counting, so ids issued before stay stale."""
        self.size = 0

    def state_dict(self) -> dict[str, int]:
        """Returns the cursor state."""
        return {"capacity": self.capacity, "total": self.total, "size": self.size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restores :meth:`state_dict` output.

        Raises:
            ValueError: If the capacity differs or the counters are inconsistent.
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"state capacity ({state['capacity']}) differs from capacity ({self.capacity})"
            )
        total, size = int(state["total"]), int(state["size"])
        if not 0 <= size <= min(total, self.capacity):
            raise ValueError(f"inconsistent ring state: total={total}, size={size}")
        self.total, self.size = total, size
