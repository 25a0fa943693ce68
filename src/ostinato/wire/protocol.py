"""The messages of service ``ostinato.Replay``: every schema, both directions, in one module.

Every payload is one msgpack map (:func:`~ostinato.wire.codec.pack`); row data travels as
segments (:mod:`ostinato.wire.codec`). Clients build requests and read replies with the
functions here, the service reads requests and builds replies with them, so a field name is
written in this module only (but for the table info of ``ServerInfo`` replies, in
:mod:`ostinato.wire.table_info_codec`, whose functions are re-exported here). Readers validate
every field and raise :class:`~ostinato.errors.DecodeError` on anything malformed.

=============  ==========================================  =====================================
method         request                                     reply
=============  ==========================================  =====================================
``Insert``     stream of framed maps: ``seg`` segments,    stream of ``{n}``: items of the
               ``t`` table names, ``i`` items ``[table     requests (in order) now in their
               index, key, priority, columns, squeeze]``,  tables
               ``keep`` chunk keys the writer still uses,
               ``r`` positions of resent items, ``shm``
               the writer's ring (first request)
``Sample``     ``{t, n, to}``: table, most items,          ``keys p sz pr ts`` (uint64/float64/
               timeout in ms (None: none)                  int64/float64/int32 bytes) and either
                                                           ``cols``+``sq1`` (stacked columns) or
                                                           ``items``+``sq``+``segs``
``Mutate``     ``{t, d?, k?, p?}``: deletes, keys and      ``{deleted, updated}``
               their new priorities (packed arrays)
``Reset``      ``{t}``                                     ``{}``
``ServerInfo`` ``{}``                                      ``{tables: [table info]}``
``Checkpoint`` ``{}``                                      ``{path}``
``Stats``      ``{}``                                      the server's ``metrics()`` map
                                                           (:mod:`ostinato.ops.stats`)
=============  ==========================================  =====================================

The Stats reply is a plain map whose fields :mod:`ostinato.ops.stats` defines (so that new
fields need no change here); its reader checks the shape -- ``server`` and ``tables`` maps of
numbers, strings, booleans, None and nested maps -- and bounds its size.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ostinato.core.table_info import (
    TableInfo,
)
from ostinato.errors import DecodeError
from ostinato.wire import codec
from ostinato.wire.sample_replies import (  # noqa: F401 - the Sample reply, re-exported
    parse_sample_reply,
    sample_reply,
    sample_reply_data_bytes,
)
from ostinato.wire.table_info_codec import (  # noqa: F401 - re-exported
    decode_options,
    decode_table_info,
    encode_options,
    encode_table_info,
)

SERVICE = "ostinato.Replay"
UNARY_METHODS = ("Sample", "Mutate", "Reset", "ServerInfo", "Checkpoint", "Stats")
INSERT_METHOD = "Insert"
#: Largest message either side sends or accepts unless configured otherwise.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: Most items one Sample request may ask for.
MAX_SAMPLES_PER_REQUEST = 1_000_000


def method_path(name: str) -> str:
    """The gRPC path of a method (``/ostinato.Replay/Sample``)."""
    return f"/{SERVICE}/{name}"


def _u64_array(b: Any, what: str) -> np.ndarray:
    if not isinstance(b, bytes) or len(b) % 8:
        raise DecodeError(f"field {what!r} must be packed uint64 keys")
    return np.frombuffer(b, dtype="<u8")


def _f64_array(b: Any, what: str) -> np.ndarray:
    if not isinstance(b, bytes) or len(b) % 8:
        raise DecodeError(f"field {what!r} must be packed float64 values")
    return np.frombuffer(b, dtype="<f8").astype(np.float64)


# -- Sample ----------------------------------------------------------------------------------------
def sample_request(table: str, num_samples: int, timeout_ms: int | None) -> dict:
    return {"t": table, "n": int(num_samples), "to": timeout_ms}


@dataclasses.dataclass(frozen=True)
class SampleRequest:
    table: str
    num_samples: int
    timeout_ms: int | float | None


def parse_sample_request(msg: Any) -> SampleRequest:
    table = codec.req(msg, "t", str)
    n = codec.req(msg, "n", int)
    if not 1 <= n <= MAX_SAMPLES_PER_REQUEST:
        raise DecodeError(f"num_samples ({n}) must be in [1, {MAX_SAMPLES_PER_REQUEST}]")
    to = msg.get("to")
    if to is not None and (not isinstance(to, (int, float)) or isinstance(to, bool) or to < 0):
        raise DecodeError(f"timeout_ms must be None or >= 0, got {to!r}")
    return SampleRequest(table, n, to)


# -- Mutate ----------------------------------------------------------------------------------------
def mutate_request(
    table: str,
    *,
    delete_keys: np.ndarray | None = None,
    update_keys: np.ndarray | None = None,
    priorities: np.ndarray | None = None,
) -> dict:
    msg: dict[str, Any] = {"t": table}
    if delete_keys is not None:
        msg["d"] = np.asarray(delete_keys, dtype="<u8").tobytes()
    if update_keys is not None:
        msg["k"] = np.asarray(update_keys, dtype="<u8").tobytes()
        msg["p"] = np.asarray(priorities, dtype="<f8").tobytes()
    return msg


@dataclasses.dataclass(frozen=True)
class MutateRequest:
    table: str
    delete_keys: np.ndarray | None
    update_keys: np.ndarray | None
    priorities: np.ndarray | None


def parse_mutate_request(msg: Any) -> MutateRequest:
    table = codec.req(msg, "t", str)
    deletes = msg.get("d")
    keys = msg.get("k")
    d = _u64_array(deletes, "d") if deletes else None
    k = p = None
    if keys is not None:
        k = _u64_array(keys, "k")
        p = _f64_array(msg.get("p"), "p")
        if len(k) != len(p):
            raise DecodeError("keys and priorities differ in length")
    return MutateRequest(table, d, k, p)


def mutate_reply(deleted: int, updated: int) -> dict:
    return {"deleted": deleted, "updated": updated}


def parse_mutate_reply(msg: Any) -> tuple[int, int]:
    """``(deleted, updated)``."""
    return int(msg.get("deleted", 0)), int(msg.get("updated", 0))


# -- Reset, Checkpoint -----------------------------------------------------------------------------
def reset_request(table: str) -> dict:
    return {"t": table}


def parse_reset_request(msg: Any) -> str:
    return codec.req(msg, "t", str)


def checkpoint_reply(path: str) -> dict:
    return {"path": path}


def parse_checkpoint_reply(msg: Any) -> str:
    return str(codec.req(msg, "path", str))


# -- Stats -----------------------------------------------------------------------------------------
#: Most values (map entries, all levels) a Stats reply may hold: ample for thousands of tables.
MAX_STATS_VALUES = 1_000_000
_STATS_DEPTH = 6


def stats_request() -> dict:
    return {}


def parse_stats_request(msg: Any) -> None:
    """A Stats request is a map (its fields, none so far, are ignored)."""
    if not isinstance(msg, dict):
        raise DecodeError(f"a Stats request must be a map, got {type(msg).__name__}")


def stats_reply(metrics: dict) -> dict:
    return metrics


def parse_stats_reply(msg: Any) -> dict:
    """The server's metrics map, checked: ``server`` and ``tables`` are maps; every value is a
    number, string, boolean, None, a list of numbers, or a map of those (string keys)."""
    if not isinstance(msg, dict):
        raise DecodeError("a Stats reply must be a map")
    for field in ("server", "tables"):
        if not isinstance(msg.get(field), dict):
            raise DecodeError(f"a Stats reply needs a map {field!r}")
    budget = [MAX_STATS_VALUES]

    def check(v: Any, depth: int, where: str) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise DecodeError(f"a Stats reply may hold at most {MAX_STATS_VALUES} values")
        if v is None or isinstance(v, (bool, int, float, str)):
            return
        if isinstance(v, list):
            budget[0] -= len(v)
            if budget[0] < 0 or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
            ):
                raise DecodeError(f"Stats field {where!r} must be a list of numbers")
            return
        if isinstance(v, dict) and depth < _STATS_DEPTH:
            for k, x in v.items():
                if not isinstance(k, str):
                    raise DecodeError(f"Stats field {where!r} has a key that is not a string")
                check(x, depth + 1, f"{where}.{k}")
            return
        raise DecodeError(f"Stats field {where!r} has a value of type {type(v).__name__}")

    check(msg, 0, "")
    return msg


# -- ServerInfo ------------------------------------------------------------------------------------
def server_info_reply(infos: list[TableInfo]) -> dict:
    return {"tables": [encode_table_info(i) for i in infos]}


def parse_server_info_reply(msg: Any) -> list[TableInfo]:
    tables = msg.get("tables", []) if isinstance(msg, dict) else None
    if not isinstance(tables, list):
        raise DecodeError("server info must hold a list of tables")
    return [decode_table_info(m) for m in tables]


# -- Insert ----------------------------------------------------------------------------------------
def insert_request(
    segments: list[dict],
    tables: list[str],
    items: list[list[Any]],
    keep: list[int],
    retried: list[int],
    ring: dict | None,
) -> bytes:
    """A framed Insert request (segment payloads outside the msgpack header, see
    :func:`~ostinato.wire.codec.pack_framed`).

    Args:
      segments: row segments the request carries (:func:`~ostinato.wire.codec.make_segment`).
      tables: table names; items name them by index.
      items: ``[table index, key, priority, columns, squeeze flags]``; a column is a flat list
        of ``chunk key, offset, length`` triples. An entry may also be an item group
        (:func:`ostinato.wire.item_groups.item_group`), which stands for that many items.
      keep: chunk keys the writer may still refer to (the server forgets the others).
      retried: positions of items resent after a broken connection (the server skips those
        it already stored).
      ring: the writer's shared-memory ring descriptor, in the first request that uses it.
    """
    body: dict[str, Any] = {"seg": segments, "t": tables, "i": items, "keep": keep}
    if retried:
        body["r"] = retried
    if ring is not None:
        body["shm"] = ring
    return codec.pack_framed(body)


@dataclasses.dataclass
class InsertRequest:
    """An Insert request with its fields checked for type (the items' contents are checked
    against the stream's chunks by the service)."""

    segments: list[Any]
    tables: list[str]
    items: list[list[Any]]
    keep: set[int]
    retried: set[int]
    ring: Any


def parse_insert_request(raw: bytes) -> InsertRequest:
    msg = codec.unpack_framed(raw)
    if not isinstance(msg, dict):
        raise DecodeError("insert request must be a map")
    keep = msg.get("keep", [])
    if not isinstance(keep, list) or not all(type(k) is int for k in keep):
        raise DecodeError("field 'keep' must be a list of chunk keys")
    retried = msg.get("r", [])
    if not isinstance(retried, list):
        raise DecodeError("field 'r' must be a list of item positions")
    segs = msg.get("seg", [])
    if not isinstance(segs, list):
        raise DecodeError("field 'seg' must be a list of segments")
    tables = msg.get("t", [])
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise DecodeError("field 't' must be a list of table names")
    items = msg.get("i", [])
    if not isinstance(items, list):
        raise DecodeError("field 'i' must be a list of items")
    for it in items:
        if (not isinstance(it, list) or len(it) != 5) and not isinstance(it, dict):
            raise DecodeError(
                "an item must be [table, key, priority, columns, squeeze] or an item group"
            )
    return InsertRequest(segs, tables, items, set(keep), set(retried), msg.get("shm"))


def insert_ack(n: int) -> bytes:
    """The reply confirming ``n`` more items of the stream's requests, in order."""
    return codec.pack({"n": n})


def parse_insert_ack(raw: bytes) -> int:
    msg = codec.unpack(raw)
    n = msg.get("n", 0) if isinstance(msg, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DecodeError(f"bad insert acknowledgement {msg!r:.80}")
    return n


def approx_reply_items(max_message_bytes: int, item_bytes: float) -> int:
    """Most items whose data fits half a message of ``max_message_bytes``."""
    return max(1, int(max_message_bytes * 0.5 // max(item_bytes, 1.0)))
