"""The client: Reverb's ``reverb.Client`` API over a pluggable transport."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import optree

from ostinato import errors
from ostinato.client_sampling import replay_samples
from ostinato.core import items as items_lib
from ostinato.core.assemble import stack_batch
from ostinato.core.chunks import Chunk
from ostinato.core.deadline import Deadline
from ostinato.core.keys import new_key
from ostinato.core.signature import check_columns, signature_structure
from ostinato.core.table_info import TableInfo
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.transport.base import Transport
from ostinato.transport.connect import connect
from ostinato.transport.registry import split_addresses
from ostinato.validate import is_int, positive_int
from ostinato.writers.chunker import to_array
from ostinato.writers.legacy_writer import Writer
from ostinato.writers.structured_writer import StructuredWriter
from ostinato.writers.trajectory_writer import TrajectoryWriter
from ostinato.writers.vector_writer import VectorTrajectoryWriter

#: Largest number of items a ``Client.sample`` generator takes from the table per request.
SAMPLE_REQUEST_SIZE = 1024


class _Default:
    """The default of an argument whose ``None`` means something else."""

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text


#: ``trajectory_writer(get_signature_timeout_ms=...)`` not given.
_DEFAULT: Any = _Default("<the transport's own wait>")


def _signature_wait(validate_items: bool, get_signature_timeout_ms: Any) -> tuple[bool, int | None]:
    """A writer's ``(validate_items, signature_timeout_ms)`` from the client's arguments: Reverb
    0.7's ``get_signature_timeout_ms=None`` turns validation off; not given, the transport's
    own wait."""
    if get_signature_timeout_ms is None:
        return False, None
    if get_signature_timeout_ms is _DEFAULT:
        return validate_items, None
    return validate_items, get_signature_timeout_ms


class Client:
    """Client of a replay server.

    Args:
      server_address: ``host:port`` of the server. A server running in this process at that
        port is used directly (no sockets, no serialisation). Several addresses (a list, or
        ``"h1:p1,h2:p2"``) make a sharded client that spreads work over all of them (see
        :mod:`ostinato.transport.sharded`).
      token: shared secret for servers started with ``token=``.
      root_certificates: PEM root certificates, to connect over TLS.
      tls_server_name: override of the name checked in the server's certificate.
      compression: ``"zstd"`` (default; compress row data where it pays) or ``"none"``.
      unavailable_timeout: seconds to retry, with backoff, while a server cannot be reached
        before raising :class:`~ostinato.errors.UnavailableError` (which names the address).
      max_message_bytes: largest message sent or received.
      shared_memory: ``None`` (default) lets writers pass large rows to a server on this
        machine through a shared-memory ring (``localhost``/loopback addresses on Linux; see
        :mod:`ostinato.wire.shm`), ``True`` tries it for any address, ``False`` never. A server
        that cannot map the ring refuses it and the rows go inline, so it is always safe.
      writers_per_stream: most writers of this client that share one Insert stream per table
        (default 16). Items the writers create together then go out in one request, which
        cuts the client's and the server's work per item several-fold when a process runs
        many writers (vectorised environments, many actors per process). ``1`` gives every
        writer a stream of its own, as Reverb does: a writer's items then never wait behind
        another's, and a request the server refuses stops only its own writer.
      in_process: ``None`` uses an in-process server when there is one at the address,
        ``False`` always goes over gRPC, ``True`` requires an in-process server.
      transport: a :class:`~ostinato.transport.base.Transport` to use instead of connecting to
        ``server_address`` (tests, custom transports); the connection options above then do
        not apply. Not kept when the client is copied or pickled.

    No connection is made at construction. Clients can be pickled (they are rebuilt from the
    address).

    Example:
      >>> client = reverb.Client(f"localhost:{server.port}")
      >>> client.insert([np.zeros(3)], priorities={"replay": 1.0})
      >>> sample = next(client.sample("replay"))
    """

    def __init__(
        self,
        server_address: str,
        *,
        token: str | None = None,
        root_certificates: bytes | None = None,
        tls_server_name: str | None = None,
        compression: str = "zstd",
        unavailable_timeout: float = 30.0,
        max_message_bytes: int = 256 * 1024 * 1024,
        in_process: bool | None = None,
        transport: Transport | None = None,
        shared_memory: bool | None = None,
        writers_per_stream: int = 16,
    ):
        addresses = split_addresses(server_address)
        if compression not in ("zstd", "none"):
            raise ValueError(f"compression ({compression!r}) must be 'zstd' or 'none'")
        if shared_memory not in (None, True, False):
            raise ValueError(f"shared_memory ({shared_memory!r}) must be None, True or False")
        self._server_address = (
            ",".join(server_address)
            if isinstance(server_address, (list, tuple))
            else server_address
        )
        self._addresses = addresses
        self._transport = transport
        self._options: dict[str, Any] = dict(
            token=token,
            root_certificates=root_certificates,
            tls_server_name=tls_server_name,
            compression=compression,
            unavailable_timeout=unavailable_timeout,
            max_message_bytes=max_message_bytes,
            shared_memory=shared_memory,
            writers_per_stream=positive_int("writers_per_stream", writers_per_stream),
        )
        self._in_process = in_process

    # -- plumbing ----------------------------------------------------------------------------------
    @property
    def server_address(self) -> str:
        return self._server_address

    def copy(self, *, in_process: bool | None = None) -> Client:
        """A new client for the same address(es) with the same options; ``in_process`` as for
        the constructor (``False``: always over gRPC, as a process forked from this one must)."""
        return Client(self._server_address, in_process=in_process, **self._options)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_client, (self._server_address, self._options, self._in_process))

    def __repr__(self) -> str:
        return f"Client, server_address={self._server_address}"

    @property
    def transport(self) -> Transport:
        """The :class:`~ostinato.transport.base.Transport` this client uses (connecting on first
        use): what the dataset adapters sample through. Advanced use only."""
        t = self._transport
        if t is not None and t.healthy():
            return t
        if t is not None and self._in_process is None:
            # The in-process server we used has stopped: use its successor if one runs in this
            # process, and otherwise say so at once instead of dialling the network.
            t = connect(self._addresses, self._options, in_process=True)
        else:
            t = connect(self._addresses, self._options, self._in_process)
        self._transport = t
        return t

    def close(self) -> None:
        """Closes network connections (in-process clients hold none)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------------
    def insert(
        self, data: Any, priorities: dict[str, float], *, timeout: float | None = None
    ) -> None:
        """Inserts one step of ``data`` as an item (of length 1) into each table of ``priorities``.

        The data is stored once, however many tables get an item. Blocks until every table's
        rate limiter admitted its item.

        Args:
          data: a nest of arrays/scalars.
          priorities: table name -> priority.
          timeout: (Ostinato only) seconds to wait for the rate limiters; ``None`` = forever.
        """
        if not priorities:
            raise ValueError("priorities must contain at least one item")
        transport = self.transport
        leaves = optree.tree_leaves(data, none_is_leaf=True)
        if not leaves:
            raise ValueError("data must contain at least one value")
        episode = new_key()
        packed: list[Any] = []
        for i, leaf in enumerate(leaves):
            if leaf is None:
                raise ValueError("data must not contain None values")
            arr = to_array(leaf, i)
            buf = np.empty((1, *arr.shape), dtype=arr.dtype)
            buf[0, ...] = arr
            buf.flags.writeable = False
            packed.extend((Chunk(new_key(), buf, episode, spec=(arr.dtype, arr.shape)), 0, 1))
        trajectory = tuple(packed)
        squeeze = items_lib.intern_squeeze([False] * len(leaves))
        deadline = Deadline.after(timeout)
        for table, priority in priorities.items():
            priority = float(priority)
            if priority != priority:
                raise ValueError("`priority` must not be nan.")
            meta = transport.table_meta(table)
            if meta.reject_negative and priority < 0:
                raise errors.InvalidArgumentError(
                    f"Priority must not be negative (got {priority} for table {table!r})."
                )
            # Whole steps: a signature may describe the one-step column or the step itself.
            check_columns(
                table,
                meta.flat_signature,
                [(c.data.dtype, c.data.shape, c.data.shape[1:]) for c in trajectory[0::3]],
            )
        for table, priority in priorities.items():
            transport.insert(table, [(new_key(), float(priority), trajectory, squeeze)], deadline)

    def writer(
        self,
        max_sequence_length: int,
        delta_encoded: bool = False,
        chunk_length: int | None = None,
        max_in_flight_items: int | None = 25,
    ) -> Writer:
        """Reverb's legacy writer (items are the last ``num_timesteps`` whole steps)."""
        return Writer(
            self.transport,
            max_sequence_length,
            delta_encoded=delta_encoded,
            chunk_length=chunk_length,
            max_in_flight_items=max_in_flight_items,
        )

    def trajectory_writer(
        self,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        max_chunk_length: int | None = None,
        max_pending_items: int | None = None,
        get_signature_timeout_ms: int | None = _DEFAULT,
    ) -> TrajectoryWriter:
        """A :class:`~ostinato.writers.trajectory_writer.TrajectoryWriter`.

        Args:
          num_keep_alive_refs: how many of the newest steps items may refer to.
          validate_items: check table names, priorities and signatures at ``create_item``.
          get_signature_timeout_ms: (Reverb 0.7, still accepted: Acme passes it) milliseconds to
            wait for a table's signature from the server when an item is first validated
            (a ``DeadlineExceededError`` when it passes); ``None`` means, as in Reverb 0.7, that
            no signature is fetched, so items are not validated. Not given: the transport's own
            wait.
          max_chunk_length: (Ostinato only) rows per chunk; default sizes chunks by bytes.
          max_pending_items: (Ostinato only) items created but not yet in their tables (held
            back by a rate limiter, or in flight to a server) before ``create_item`` blocks;
            ``None``: 10,000 for a server in this process, 4,096 over the network (the gRPC
            transport's ``ClientOptions.max_in_flight_items``).
        """
        validate_items, timeout_ms = _signature_wait(validate_items, get_signature_timeout_ms)
        return TrajectoryWriter(
            self.transport,
            num_keep_alive_refs,
            validate_items=validate_items,
            max_chunk_length=max_chunk_length,
            max_pending_items=max_pending_items,
            signature_timeout_ms=timeout_ms,
        )

    def vector_writer(
        self,
        num_envs: int,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        max_chunk_length: int | None = None,
        max_pending_items: int | None = None,
        get_signature_timeout_ms: int | None = _DEFAULT,
    ) -> VectorTrajectoryWriter:
        """(Ostinato only) A :class:`~ostinato.writers.vector_writer.VectorTrajectoryWriter`:
        appends one step per environment of a vectorised environment at once and creates
        their items in one call.

        Args:
          num_envs: the number of environments; every leaf of a step has this leading
            dimension.
          num_keep_alive_refs: how many of each environment's newest steps items may refer to.
          validate_items, max_chunk_length, max_pending_items, get_signature_timeout_ms: as
            for :meth:`trajectory_writer` (``max_chunk_length`` is per environment).
        """
        validate_items, timeout_ms = _signature_wait(validate_items, get_signature_timeout_ms)
        return VectorTrajectoryWriter(
            self.transport,
            num_envs,
            num_keep_alive_refs,
            validate_items=validate_items,
            max_chunk_length=max_chunk_length,
            max_pending_items=max_pending_items,
            signature_timeout_ms=timeout_ms,
        )

    def structured_writer(self, configs: Sequence[Any]) -> StructuredWriter:
        """A :class:`~ostinato.writers.structured_writer.StructuredWriter` that creates items
        as ``configs`` describe (build them with :mod:`ostinato.structured_writer`).

        Raises:
          ValueError: ``configs`` is empty or holds an invalid config (the message names its
            position and field); ``TableNotFoundError`` for an unknown table.
        """
        return StructuredWriter(self.transport, configs)

    # -- sampling ----------------------------------------------------------------------------------
    def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = True,
        unpack_as_table_signature: bool = False,
        timeout: float | None = None,
    ) -> Iterator[Any]:
        """Yields ``num_samples`` sampled items.

        Args:
          table: table name.
          num_samples: how many items to sample (>= 1).
          emit_timesteps: yield each item as a list of ``ReplaySample``, one per step (an item
            whose columns are all squeezed is one step); otherwise one ``ReplaySample`` whose
            ``data`` holds whole columns.
          unpack_as_table_signature: shape ``data`` like the table's signature.
          timeout: (Ostinato only) seconds to wait for the rate limiter per request; on expiry
            ``RateLimiterTimeout`` is raised.

        Tables that delete items when sampled (``max_times_sampled``) are sampled one item per
        request, so abandoning the generator never loses an item. Other tables are sampled in
        requests of up to ``num_samples`` items.
        """
        if num_samples == -1:
            return
        if not is_int(num_samples) or num_samples < 1:
            raise ValueError(f"max_samples ({num_samples}) must be -1 or >= 1")
        transport = self.transport
        meta = transport.table_meta(table)
        structure = None
        if unpack_as_table_signature and meta.signature is not None:
            structure = signature_structure(meta.signature)
        remaining = int(num_samples)
        per_request = 1 if meta.max_times_sampled else SAMPLE_REQUEST_SIZE
        while remaining > 0:
            batch = transport.sample(table, min(remaining, per_request), Deadline.after(timeout))
            remaining -= len(batch)
            yield from replay_samples(batch, emit_timesteps, structure)

    def sample_batch(
        self,
        table: str,
        batch_size: int,
        *,
        timeout: float | None = None,
        unpack_as_table_signature: bool = True,
    ) -> ReplaySample:
        """Samples up to ``batch_size`` items at once and stacks them (Ostinato only).

        Returns:
          ``ReplaySample(info, data)``: ``info`` is a :class:`SampleInfo` of numpy arrays;
          ``data`` holds one array per column with a leading batch dimension, shaped like the
          table's signature when it has one (else a flat list). Fewer than ``batch_size`` items
          come back only when the rate limiter stops the batch early.

        Raises:
          ValueError: the sampled items cannot be stacked (different shapes).
          RateLimiterTimeout: nothing could be sampled within ``timeout`` seconds.
        """
        positive_int("batch_size", batch_size)
        transport = self.transport
        batch = transport.sample(table, int(batch_size), Deadline.after(timeout))
        cols = stack_batch(batch)
        data: Any = cols
        if unpack_as_table_signature:
            meta = transport.table_meta(table)
            if meta.signature is not None:
                data = optree.tree_unflatten(signature_structure(meta.signature), cols)
        info = SampleInfo(
            batch.keys,
            batch.probabilities,
            batch.table_sizes,
            batch.priorities,
            batch.times_sampled,
        )
        return ReplaySample(info, data)

    # -- priorities, deletes, reset ----------------------------------------------------------------
    def mutate_priorities(
        self,
        table: str,
        updates: dict[int, float] | None = None,
        deletes: Sequence[int] | None = None,
    ) -> None:
        """Updates priorities and deletes items (deletes first); unknown keys are ignored.

        All new priorities are validated before anything changes (Reverb could apply part).
        """
        self.transport.mutate_priorities(table, updates, deletes, Deadline.never())

    def update_priorities(
        self, table: str, keys: Sequence[int] | np.ndarray, priorities: Sequence[float] | np.ndarray
    ) -> int:
        """Sets new priorities for many items at once (Ostinato only). Unknown keys are ignored.

        Returns:
          How many items were updated.
        """
        return self.transport.update_priorities(
            table, keys, np.asarray(priorities, dtype=np.float64), Deadline.never()
        )

    def delete(self, table: str, keys: Sequence[int] | np.ndarray) -> int:
        """Deletes items by key (Ostinato only). Returns how many existed."""
        return self.transport.delete(table, keys, Deadline.never())

    def reset(self, table: str) -> None:
        """Removes all items of ``table`` and resets its rate limiter and statistics."""
        self.transport.reset(table, Deadline.never())

    def server_info(self, timeout: int | None = None) -> dict[str, TableInfo]:
        """Table name -> :class:`~ostinato.types.TableInfo`.

        Args:
          timeout: seconds to wait for the server; ``None`` or ``<= 0`` fails at once when no
            server can be reached rather than waiting forever.
        """
        wait = timeout is not None and timeout > 0
        transport = self.transport
        try:
            info = transport.server_info(Deadline.after(timeout) if wait else Deadline.never())
        except (errors.UnavailableError, errors.DeadlineExceededError) as e:
            if wait:
                raise errors.DeadlineExceededError(
                    f"ServerInfo call did not complete within provided timeout of {timeout}s "
                    f"(server at {self._server_address}: {e})"
                ) from e
            raise
        return info

    def checkpoint(self) -> str:
        """Asks the server to write a checkpoint; returns its path."""
        return self.transport.checkpoint(Deadline.never())

    def metrics(self, timeout: float | None = None) -> dict[str, Any]:
        """The server's monitoring values (Ostinato only): tables' sizes, counters and
        rate-limiter waits, the server's requests, bytes and checkpoints. A sharded client gets
        them added up, with each server's own under ``"shards"``. See
        :mod:`ostinato.ops.stats` for the fields.

        Args:
          timeout: seconds to wait for each server.
        """
        from ostinato.ops.stats import collect

        return collect(self, timeout)


def _rebuild_client(address: str, options: dict[str, Any], in_process: bool | None) -> Client:
    return Client(address, in_process=in_process, **options)
