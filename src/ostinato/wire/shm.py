"""Same-host fast path for insert data: a shared-memory ring between a writer and the server.

When a client and its server run on one machine, pushing large tensors through gRPC costs both
processes a copy into and out of HTTP/2 frames. Instead a writer stream may create a *ring*, a
file in ``/dev/shm`` that both processes map: the writer copies a segment's rows into the ring
and the insert request carries only ``(offset, length)``; the server copies the bytes out of its
own mapping while it handles the request, then acknowledges it, after which the writer reuses
that space. Everything else (items, small segments, acks) still travels over gRPC.

Safety:

* The ring is only an optimisation. If the server cannot map it (another host, another user,
  no ``/dev/shm``, a server started with ``shared_memory=False``) it refuses once, and the
  writer resends the same items with their rows inline; nothing is lost or duplicated.
* The server opens only files named ``ostinato-<32 hex digits>`` directly in ``/dev/shm``,
  without following symlinks and without blocking (``O_NOFOLLOW | O_NONBLOCK``: a FIFO given
  that name cannot pin a server thread in ``open``), refuses anything but a regular file of the
  described size, and compares a 16-byte random nonce written at the start of the file with the
  one in the request, so a client can make the server read only a ring whose contents it
  already knows. Every offset is bounds-checked.
* The server never maps a client's ring: it keeps the file descriptor and copies rows out with
  ``pread``/``preadv``. A mapping would let the client kill the server: truncating the file
  (``ftruncate``) under a mapping makes the server's next copy touch an unbacked page, and the
  whole process dies of SIGBUS. Read through a descriptor, a truncated ring yields a short
  read, which fails that client's request (``INVALID_ARGUMENT``) and nothing else. A client
  that scribbles over its ring while the server copies damages only its own rows.
* Space is reserved with ``posix_fallocate`` (a full ``/dev/shm`` fails cleanly instead of
  killing the writer with SIGBUS later). The server unlinks the file as soon as it has opened
  and checked it, and the writer unlinks it when its stream ends, so even a killed client
  leaves nothing behind once the server has seen the ring. The server holds one file
  descriptor per ring stream; when it cannot open one (descriptors exhausted) it refuses the
  ring and the writer sends its rows inline.

Linux only (``/dev/shm``); elsewhere :func:`available` is False and writers send rows inline.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
import sys
import threading
import weakref
from typing import Any

from ostinato.errors import ShmError
from ostinato.wire import prefaulted_copy

SHM_DIR = "/dev/shm"
#: A ring's file starts with this magic and the 16-byte nonce; data starts at ``HEADER_BYTES``.
MAGIC = b"OSTSHM01"
HEADER_BYTES = 64
NONCE_BYTES = 16
#: Default size of one writer stream's ring.
DEFAULT_RING_BYTES = 16 * 1024 * 1024
#: Segments smaller than this travel inline (for small rows the gRPC copy costs less than the
#: bookkeeping).
MIN_SEGMENT_BYTES = 16 * 1024
#: Largest ring a server maps.
MAX_RING_BYTES = 1 << 34
_NAME = re.compile(r"ostinato-[0-9a-f]{32}")


def available() -> bool:
    """True where rings can be created (Linux with a writable ``/dev/shm``)."""
    return (
        sys.platform.startswith("linux")
        and os.path.isdir(SHM_DIR)
        and os.access(SHM_DIR, os.W_OK | os.X_OK)
    )


class Ring:
    """The writer's side: a mapped file and a FIFO allocator over it.

    Space is handed out in request order and given back in the same order (when the server
    acknowledges each request), so the free space is always the part of the ring between the
    newest allocation and the oldest unacknowledged one.
    """

    def __init__(self, size: int = DEFAULT_RING_BYTES):
        if size <= HEADER_BYTES:
            raise ValueError(f"ring size ({size}) must exceed {HEADER_BYTES} bytes")
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.path = os.path.join(SHM_DIR, f"ostinato-{secrets.token_hex(16)}")
        self.size = size
        self._cap = size - HEADER_BYTES
        self._head = 0
        self._used = 0
        self._lock = threading.Lock()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ShmError(f"cannot create {self.path}: {e}") from None
        # Unlinks the name even if the ring is never closed (a writer thread stopped by
        # interpreter exit before any server mapped the ring).
        self._unlinker = weakref.finalize(self, _unlink_quietly, self.path)
        try:
            os.posix_fallocate(fd, 0, size)
            # Populated up front: one bulk fault instead of one per page on first use.
            self._mm = mmap.mmap(
                fd,
                size,
                flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except OSError as e:
            os.close(fd)
            self.unlink()
            raise ShmError(f"cannot reserve {size} bytes in {SHM_DIR}: {e}") from None
        os.close(fd)
        self._mm[: len(MAGIC)] = MAGIC
        self._mm[len(MAGIC) : len(MAGIC) + NONCE_BYTES] = self.nonce
        self._view = memoryview(self._mm)

    def descriptor(self) -> dict:
        """What the server needs to map this ring (sent in the stream's first request)."""
        return {"p": self.path, "x": self.nonce, "z": self.size}

    def put(self, data: Any) -> tuple[int, int] | None:
        """Copies ``data`` (bytes-like) into the ring. Returns ``(offset, cost)``: where it is,
        and the bytes it holds (including any space skipped at the end of the ring), to give
        back with :meth:`release`; None if there is no room (send the data inline instead)."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        with self._lock:
            cap, used, head = self._cap, self._used, self._head
            if n == 0 or n > cap or used + n > cap:
                return None
            if used == 0:
                head = 0
            tail = (head - used) % cap
            if used and head == tail:  # pragma: no cover - full (caught by used + n > cap)
                return None
            if head >= tail:
                if n <= cap - head:
                    off, cost = head, n
                elif n <= tail:
                    off, cost = 0, (cap - head) + n
                else:
                    return None
            elif n <= tail - head:
                off, cost = head, n
            else:
                return None
            self._head = off + n
            self._used = used + cost
        start = HEADER_BYTES + off
        self._view[start : start + n] = mv
        return start, cost

    def release(self, cost: int) -> None:
        """Gives back the space of the oldest ``cost`` bytes still held."""
        with self._lock:
            self._used = max(0, self._used - cost)

    @property
    def used(self) -> int:
        return self._used

    def unlink(self) -> None:
        self._unlinker()

    def close(self) -> None:
        self.unlink()
        view = getattr(self, "_view", None)
        if view is not None:
            view.release()
            self._view = None  # type: ignore[assignment]
            self._mm.close()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class Mapping:
    """The server's side: a client's ring, validated, read through a kept file descriptor.

    The ring is never mapped into the server (see the module docstring: a client could
    truncate the file under the mapping and kill the server with SIGBUS); :meth:`read` copies
    with ``pread``, so a truncated ring is a short read and a clear error to that client.
    """

    def __init__(self, desc: Any):
        if not isinstance(desc, dict):
            raise ShmError("ring descriptor must be a map")
        path, nonce, size = desc.get("p"), desc.get("x"), desc.get("z")
        if not isinstance(path, str) or not isinstance(nonce, bytes) or type(size) is not int:
            raise ShmError("ring descriptor needs p (str), x (bytes) and z (int)")
        if os.path.dirname(path) != SHM_DIR or not _NAME.fullmatch(os.path.basename(path)):
            raise ShmError(f"ring path {path!r} is not an Ostinato ring in {SHM_DIR}")
        if len(nonce) != NONCE_BYTES:
            raise ShmError(f"ring nonce must have {NONCE_BYTES} bytes")
        if not HEADER_BYTES < size <= MAX_RING_BYTES:
            raise ShmError(f"ring size {size} out of range")
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        flags = (
            os.O_RDONLY
            | os.O_NOFOLLOW
            | os.O_NONBLOCK
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_NOCTTY", 0)
        )
        try:
            fd = os.open(path, flags)
        except OSError as e:
            raise ShmError(f"cannot open {path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                raise ShmError(f"{path} is not a regular file of {size} bytes")
            os.set_blocking(fd, True)
            head = prefaulted_copy.pread_out(fd, 0, len(MAGIC) + NONCE_BYTES)
        except (OSError, EOFError) as e:
            os.close(fd)
            raise ShmError(f"cannot read {path}: {e}") from None
        except BaseException:
            os.close(fd)
            raise
        if head[: len(MAGIC)] != MAGIC or not secrets.compare_digest(head[len(MAGIC) :], nonce):
            os.close(fd)
            raise ShmError(f"{path} does not hold the ring the client described")
        try:  # the client's copy of the name is no longer needed: nothing can leak now
            os.unlink(path)
        except OSError:
            pass
        self.path = path
        self.size = size
        self._fd: int | None = fd
        self._lock = threading.Lock()  # close() waits for a copy in progress

    def read(self, offset: Any, n: Any) -> bytes:
        """A copy of ``n`` bytes at ``offset`` (both checked against the ring's data area).

        Raises:
          ShmError: the reference lies outside the ring, the ring is closed, or the file
            holds fewer bytes than the reference needs (the client truncated it).
        """
        if (
            type(offset) is not int
            or type(n) is not int
            or not HEADER_BYTES <= offset <= self.size
            or not 0 <= n <= self.size - offset
        ):
            raise ShmError(f"ring reference ({offset!r}, {n!r}) lies outside the ring")
        with self._lock:
            fd = self._fd
            if fd is None:
                raise ShmError(f"ring {self.path} is closed")
            try:
                return prefaulted_copy.pread_out(fd, offset, n)
            except EOFError as e:
                raise ShmError(f"ring {self.path} was truncated by its writer: {e}") from None
            except OSError as e:
                raise ShmError(f"cannot read ring {self.path}: {e.strerror}") from None

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)
