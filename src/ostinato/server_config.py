"""The ``ostinato-server`` config: its schema, and the tables and settings it describes.

The config is Reverb's ``reverb_server`` text-proto ``ReverbServerConfig`` (parsed with
protobuf's ``text_format`` against a schema built here at runtime, so no ``protoc`` is needed),
or the same structure as TOML / YAML (chosen by file extension; YAML needs ``pyyaml``, the
``ostinato[yaml]`` extra). Ostinato adds optional top-level fields ``checkpoint_dir``,
``checkpoint_every_seconds`` and ``checkpoint_keep``, and the service's limits
``max_streams``, ``idle_stream_seconds``, ``max_inflated_bytes`` and ``max_workers`` (the
``Server`` arguments of the same names). As in the text proto, a field the schema
does not know is an error in TOML and YAML too (a misspelt optional field is not ignored).

``examples/server_config.txtpb`` is an example; the command (:mod:`ostinato.server_cli`) shows
it in ``ostinato-server --help``.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ostinato import validate


class ConfigError(ValueError):
    """A bad server config; the message names the field."""


# Fields of ReverbServerConfig and its messages (the text-proto schema below has the same).
_SELECTOR_FIELDS = ("fifo", "uniform", "lifo", "prioritized", "heap", "is_deterministic")
_RATE_LIMITER_FIELDS = (
    "samples_per_insert",
    "min_diff",
    "max_diff",
    "min_size_to_sample",
    "sample_count",
    "insert_count",
    "delete_count",
)
_TABLE_FIELDS = (
    "table_name",
    "sampler",
    "remover",
    "max_size",
    "max_times_sampled",
    "rate_limiter",
    "num_deleted_episodes",
    "num_unique_samples",
)
#: The service's limits (``Server`` arguments of the same names), each optional.
SERVICE_FIELDS = ("max_streams", "idle_stream_seconds", "max_inflated_bytes", "max_workers")
_CONFIG_FIELDS = (
    "tables",
    "port",
    "checkpoint_dir",
    "checkpoint_every_seconds",
    "checkpoint_keep",
    *SERVICE_FIELDS,
)


def _check_fields(d: dict[Any, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in d if k not in known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {', '.join(map(repr, unknown))} "
            f"(known fields: {', '.join(known)})"
        )


# -- text-proto schema -----------------------------------------------------------------------------
def _message_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(
        name="ostinato_server_config.proto", package="ostinato.config", syntax="proto3"
    )

    def msg(name: str, fields: list[tuple[str, int, int, str | None, bool, int | None]]) -> Any:
        m = fd.message_type.add(name=name)
        for fname, num, ftype, tname, repeated, oneof in fields:
            f = m.field.add(
                name=fname,
                number=num,
                type=ftype,
                label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL,
            )
            if tname:
                f.type_name = f".ostinato.config.{tname}"
            if oneof is not None:
                f.oneof_index = oneof
        return m

    msg("Prioritized", [("priority_exponent", 1, F.TYPE_DOUBLE, None, False, None)])
    msg("Heap", [("min_heap", 1, F.TYPE_BOOL, None, False, None)])
    kd = msg(
        "KeyDistributionOptions",
        [
            ("fifo", 1, F.TYPE_BOOL, None, False, 0),
            ("uniform", 2, F.TYPE_BOOL, None, False, 0),
            ("prioritized", 3, F.TYPE_MESSAGE, "Prioritized", False, 0),
            ("heap", 4, F.TYPE_MESSAGE, "Heap", False, 0),
            ("lifo", 6, F.TYPE_BOOL, None, False, 0),
            ("is_deterministic", 7, F.TYPE_BOOL, None, False, None),
        ],
    )
    kd.oneof_decl.add(name="distribution")
    msg(
        "RateLimiterCheckpoint",
        [
            ("samples_per_insert", 2, F.TYPE_DOUBLE, None, False, None),
            ("min_diff", 3, F.TYPE_DOUBLE, None, False, None),
            ("max_diff", 4, F.TYPE_DOUBLE, None, False, None),
            ("min_size_to_sample", 5, F.TYPE_INT64, None, False, None),
            ("sample_count", 6, F.TYPE_INT64, None, False, None),
            ("insert_count", 7, F.TYPE_INT64, None, False, None),
            ("delete_count", 8, F.TYPE_INT64, None, False, None),
        ],
    )
    msg(
        "PriorityTableCheckpoint",
        [
            ("table_name", 1, F.TYPE_STRING, None, False, None),
            ("rate_limiter", 3, F.TYPE_MESSAGE, "RateLimiterCheckpoint", False, None),
            ("sampler", 4, F.TYPE_MESSAGE, "KeyDistributionOptions", False, None),
            ("remover", 5, F.TYPE_MESSAGE, "KeyDistributionOptions", False, None),
            ("max_size", 6, F.TYPE_INT64, None, False, None),
            ("max_times_sampled", 7, F.TYPE_INT32, None, False, None),
            ("num_deleted_episodes", 8, F.TYPE_INT64, None, False, None),
            ("num_unique_samples", 10, F.TYPE_INT64, None, False, None),
        ],
    )
    msg(
        "ReverbServerConfig",
        [
            ("tables", 1, F.TYPE_MESSAGE, "PriorityTableCheckpoint", True, None),
            ("port", 2, F.TYPE_INT32, None, False, None),
            ("checkpoint_dir", 100, F.TYPE_STRING, None, False, None),
            ("checkpoint_every_seconds", 101, F.TYPE_DOUBLE, None, False, None),
            ("checkpoint_keep", 102, F.TYPE_INT32, None, False, None),
            ("max_streams", 103, F.TYPE_INT32, None, False, None),
            ("idle_stream_seconds", 104, F.TYPE_DOUBLE, None, False, None),
            ("max_inflated_bytes", 105, F.TYPE_INT64, None, False, None),
            ("max_workers", 106, F.TYPE_INT32, None, False, None),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("ostinato.config.ReverbServerConfig")
    )


def parse_text_proto(text: str, source: str) -> dict[str, Any]:
    """Parses a text-format ``ReverbServerConfig`` into plain dicts."""
    try:
        from google.protobuf import json_format, text_format
    except ImportError:  # pragma: no cover
        raise ConfigError("reading a text-proto config needs the 'protobuf' package") from None
    cls = _message_class()
    try:
        m = text_format.Parse(text, cls())
    except text_format.ParseError as e:
        raise ConfigError(f"{source}: {e}") from None
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


def load_config(path: str) -> dict[str, Any]:
    """Reads a config file: ``.toml``, ``.yaml``/``.yml`` or (anything else) text proto."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from None
    ext = os.path.splitext(path)[1].lower()
    if ext == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10: the same parser as the 'tomli' package
            try:
                import tomli as tomllib
            except ImportError:
                raise ConfigError(
                    f"{path}: reading a TOML config on Python < 3.11 needs the "
                    "'tomli' package (pip install tomli)"
                ) from None
        try:
            return tomllib.loads(raw.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: {e}") from None
    if ext in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"{path}: reading a YAML config needs the 'pyyaml' package "
                "(pip install 'ostinato[yaml]' or pip install pyyaml)"
            ) from None
        try:
            doc = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: {e}") from None
        if doc is None:
            return {}
        if not isinstance(doc, dict):
            raise ConfigError(
                f"{path}: the document must be a mapping with a 'tables' field, "
                f"got a {type(doc).__name__}"
            )
        return doc
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    return parse_text_proto(text, path)


# -- building tables -------------------------------------------------------------------------------
def _selector(d: Any, where: str) -> Any:
    from ostinato import selectors

    if not isinstance(d, dict) or not d:
        raise ConfigError(f"{where}: must set one of fifo, uniform, lifo, prioritized, heap")
    _check_fields(d, _SELECTOR_FIELDS, where)
    kinds = [k for k in ("fifo", "uniform", "lifo", "prioritized", "heap") if k in d]
    if len(kinds) != 1:
        raise ConfigError(
            f"{where}: set exactly one of fifo, uniform, lifo, prioritized, heap (got {sorted(d)})"
        )
    k = kinds[0]
    if k in ("fifo", "uniform", "lifo"):
        if d[k] is not True:
            raise ConfigError(
                f"{where}.{k}: distribution={k} but the associated boolean value is false"
            )
        return {"fifo": selectors.Fifo, "uniform": selectors.Uniform, "lifo": selectors.Lifo}[k]()
    sub = d[k] if d[k] is not None else {}
    if not isinstance(sub, dict):
        raise ConfigError(f"{where}.{k} ({sub!r}) must be a message (a mapping)")
    if k == "prioritized":
        _check_fields(sub, ("priority_exponent",), f"{where}.prioritized")
        try:
            return selectors.Prioritized(
                _number(sub, "priority_exponent", f"{where}.prioritized", 0.0)
            )
        except ValueError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}.prioritized.priority_exponent: {e}") from None
    _check_fields(sub, ("min_heap",), f"{where}.heap")
    min_heap = sub.get("min_heap", False)
    if not isinstance(min_heap, bool):
        raise ConfigError(f"{where}.heap.min_heap ({min_heap!r}) must be true or false")
    return selectors.MinHeap() if min_heap else selectors.MaxHeap()


def _number(d: dict[str, Any], key: str, where: str, default: Any = None) -> float:
    v = d.get(key, default)
    if v is None:
        raise ConfigError(f"{where}.{key} is required")
    try:
        if isinstance(v, bool):
            raise TypeError
        return float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}.{key} ({v!r}) must be a number") from None


def _integer(d: dict[str, Any], key: str, where: str, default: Any = None) -> int:
    """An integer field; the text proto's int64 fields arrive as strings (proto JSON)."""
    v = d.get(key, default)
    if v is None:
        raise ConfigError(f"{where}.{key} is required")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ConfigError(f"{where}.{key} ({v!r}) must be an integer")


def tables_from_config(config: dict[str, Any]) -> list[Any]:
    from ostinato import rate_limiters
    from ostinato.core.table import Table

    _check_fields(config, _CONFIG_FIELDS, "config")
    tables = config.get("tables")
    if not isinstance(tables, list) or not tables:
        raise ConfigError("config field 'tables' must list at least one table")
    out = []
    seen: set[str] = set()
    for i, t in enumerate(tables):
        where = f"tables[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(f"{where} must be a table message")
        name = t.get("table_name")
        if not name or not isinstance(name, str):
            raise ConfigError(f"{where}.table_name is required (a non-empty string)")
        if name in seen:
            raise ConfigError(f"{where}.table_name ({name!r}) is used by an earlier table")
        seen.add(name)
        where = f"tables[{i}] ({name!r})"
        _check_fields(t, _TABLE_FIELDS, where)
        rl = t.get("rate_limiter")
        if not isinstance(rl, dict):
            raise ConfigError(f"{where}.rate_limiter is required")
        _check_fields(rl, _RATE_LIMITER_FIELDS, f"{where}.rate_limiter")
        try:
            limiter = rate_limiters.RateLimiter(
                _number(rl, "samples_per_insert", f"{where}.rate_limiter"),
                _integer(rl, "min_size_to_sample", f"{where}.rate_limiter"),
                _number(rl, "min_diff", f"{where}.rate_limiter", -math.inf),
                _number(rl, "max_diff", f"{where}.rate_limiter", math.inf),
            )
        except ValueError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}.rate_limiter: {e}") from None
        try:
            out.append(
                Table(
                    name=name,
                    sampler=_selector(t.get("sampler"), f"{where}.sampler"),
                    remover=_selector(t.get("remover"), f"{where}.remover"),
                    max_size=_integer(t, "max_size", where),
                    rate_limiter=limiter,
                    max_times_sampled=_integer(t, "max_times_sampled", where, 0),
                )
            )
        except (ValueError, TypeError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}: {e}") from None
    return out


def server_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The config's ``port``, checkpoint fields and service limits, validated (None where not
    set; ``"service"``: the limits that are set, as ``Server`` keyword arguments)."""
    port = _integer(config, "port", "config", 0)
    try:
        validate.port("config.port", port)
    except ValueError as e:
        raise ConfigError(f"{e} (0 picks a free port)") from None
    ckpt_dir = config.get("checkpoint_dir")
    if ckpt_dir is not None and not isinstance(ckpt_dir, str):
        raise ConfigError(f"config.checkpoint_dir ({ckpt_dir!r}) must be a path")
    every = keep = None
    if config.get("checkpoint_every_seconds") is not None:
        every = _number(config, "checkpoint_every_seconds", "config")
        if not every > 0:
            raise ConfigError(f"config.checkpoint_every_seconds ({every}) must be > 0")
    if config.get("checkpoint_keep") is not None:
        keep = _integer(config, "checkpoint_keep", "config")
        if keep < 1:
            raise ConfigError(f"config.checkpoint_keep ({keep}) must be >= 1")
    service: dict[str, Any] = {}
    for key in ("max_streams", "max_inflated_bytes", "max_workers"):
        if config.get(key) is not None:
            service[key] = _integer(config, key, "config")
            if service[key] < 1:
                raise ConfigError(f"config.{key} ({service[key]}) must be >= 1")
    if config.get("idle_stream_seconds") is not None:
        idle = _number(config, "idle_stream_seconds", "config")
        if not idle > 0:
            raise ConfigError(f"config.idle_stream_seconds ({idle}) must be > 0")
        service["idle_stream_seconds"] = idle
    return {
        "port": port or None,
        "checkpoint_dir": ckpt_dir or None,
        "checkpoint_every_seconds": every,
        "checkpoint_keep": keep,
        "service": service,
    }
