"""Ostinato's exception tree.

Every exception raised on purpose by Ostinato derives from :class:`ReverbError`. Where a
built-in exception type is the natural one (a bad argument is a ``ValueError``, a missing table
a ``LookupError``, a deadline a ``TimeoutError``), the class also derives from it, so code
written against Reverb, which raised plain ``ValueError``/``RuntimeError``, keeps working.
"""

from __future__ import annotations


class ReverbError(Exception):
    """Base class of every error raised by Ostinato (named as in Reverb)."""


class InvalidArgumentError(ReverbError, ValueError):
    """An argument or a piece of data was rejected; nothing was changed."""


class TableNotFoundError(ReverbError, LookupError, RuntimeError, ValueError):
    """A call named a table that the server does not have.

    Reverb raised ``RuntimeError`` for this from some calls and ``ValueError`` from others, so
    this class derives from both (and from ``LookupError``).
    """

    def __init__(self, table: str, available: list[str] | tuple[str, ...] = ()):
        self.table = table
        self.available = sorted(available)
        super().__init__(
            f"Table {table!r} was not found. "
            f"Available tables: {', '.join(self.available) or '(none)'}."
        )


class DeadlineExceededError(ReverbError, TimeoutError):
    """A blocking call did not finish before its deadline; the message says what it waited for."""


class RateLimiterTimeout(DeadlineExceededError):
    """The rate limiter did not admit an insert or a sample before the deadline."""


class CancelledError(ReverbError, RuntimeError):
    """The operation was cancelled because the server, table or writer was closed."""


class UnavailableError(ReverbError, ConnectionError):
    """The server could not be reached (it is not running, or it stopped)."""

    def __init__(self, message: str, address: str | None = None):
        self.address = address
        super().__init__(message)


class FailedPreconditionError(ReverbError, RuntimeError):
    """The object is not in a state that allows the call (e.g. a closed writer)."""


class ResourceExhaustedError(ReverbError, IndexError):
    """A size limit was hit (Reverb mapped RESOURCE_EXHAUSTED to ``IndexError``)."""


class UnimplementedError(ReverbError, NotImplementedError):
    """The server does not offer the call (an older server, e.g. one without ``Stats``)."""


class DecodeError(InvalidArgumentError):
    """A wire message, or data read back from disk, was malformed; nothing was changed."""


class ShmError(ReverbError):
    """A shared-memory ring could not be created or mapped (the reason is the message).

    Writers then send their rows inline; it never reaches user code from a writer.
    """


class CheckpointError(ReverbError, ValueError):
    """A checkpoint cannot be written or loaded."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is missing, truncated or fails its checksum; the message names it."""


class CheckpointMismatchError(CheckpointError):
    """The server's tables differ from the checkpointed ones; the message lists the fields."""


class CheckpointNotFoundError(CheckpointError, LookupError):
    """No checkpoint to load."""


__all__ = [
    "CancelledError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "DeadlineExceededError",
    "DecodeError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "RateLimiterTimeout",
    "ResourceExhaustedError",
    "ReverbError",
    "ShmError",
    "TableNotFoundError",
    "UnavailableError",
    "UnimplementedError",
]
