"""What every writer shares: its stream's pending count, ``flush`` and ``close``."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from ostinato import errors
from ostinato.core.deadline import Deadline

_log = logging.getLogger("ostinato.writers")


class StreamWriter:
    """A writer's stream lifecycle (``TrajectoryWriter``, ``VectorTrajectoryWriter``).

    Subclasses set ``_stream`` (a :class:`~ostinato.transport.streams.WriterStream`) and
    ``_closed``, and may override :meth:`_release_spare_rows`.
    """

    _stream: Any
    _closed: bool

    @property
    def num_pending_items(self) -> int:
        """Items created but not yet confirmed in their tables."""
        return self._stream.pending()

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """Waits until at most ``block_until_num_items`` created items are not yet in their table.

        Args:
          block_until_num_items: how many items may still be pending on return.
          timeout_ms: ``None`` (or negative) waits forever; otherwise milliseconds, where 0
            means "check once" (Reverb waited forever on 0 here but not in ``end_episode``;
            Ostinato treats both the same).

        A closed writer has nothing pending (``close`` dropped what was), so ``flush`` returns
        at once; Reverb raised "Close has been called" here, which made Acme's ``ReverbAdder``
        (whose ``__del__`` flushes and closes, and whose test helper calls ``__del__`` by hand
        before the collector does) print "Exception ignored in" tracebacks.

        Raises:
          DeadlineExceededError: the deadline passed; pending items keep being delivered.
        """
        if block_until_num_items < 0:
            raise ValueError(f"block_until_num_items must be >= 0, got {block_until_num_items}")
        if self._closed:
            return
        try:
            self._stream.wait(block_until_num_items, Deadline.from_ms(timeout_ms))
        except errors.DeadlineExceededError as e:
            raise errors.DeadlineExceededError(
                "Flush call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)} "
                f"({self._stream.pending()} items not yet confirmed: {e})"
            ) from e

    def _check_usable(self) -> None:
        if self._closed:
            raise errors.FailedPreconditionError(f"{type(self).__name__}::Close has been called.")

    def close(self) -> None:
        """Stops the writer. Items not yet sent to the server are dropped (with a warning)."""
        if self._closed:
            return
        self._closed = True
        n = self._stream.close()
        self._release_spare_rows()
        if n:
            _log.warning(
                "%s closed with %d items not delivered; call flush() before close() to "
                "deliver them.",
                type(self).__name__,
                n,
            )

    def _release_spare_rows(self) -> None:
        """Shrinks partly filled chunks so items do not pin unused preallocated rows."""
