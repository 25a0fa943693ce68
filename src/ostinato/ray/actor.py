"""The replay server inside a Ray actor: building its tables from what was shipped, choosing
and keeping its port, restoring and checkpointing (``ostinato.ray`` starts these actors)."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

_log = logging.getLogger(__name__)

WILDCARD_HOSTS = (None, "", "0.0.0.0", "::", "[::]")
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """What a shard actor reports about itself (:meth:`ShardGroup.info`).

    Attributes:
      index: the shard's position in :attr:`ShardGroup.addresses`.
      address: ``host:port`` clients use.
      pid: the actor's process id (it changes when Ray restarts the actor).
      node_id: the Ray node the actor runs on.
      started_at: ``time.time()`` when this incarnation's server started serving.
      restored_from: the checkpoint directory this incarnation restored, or None.
      port_changed: True if the shard could not get its port back after a restart (a moved
        or busy node) and took another one; its address then changed.
    """

    index: int
    address: str
    pid: int
    node_id: str
    started_at: float
    restored_from: str | None
    port_changed: bool


# -- what the actors are given ---------------------------------------------------------------------
def table_spec(tables: Any) -> tuple[tuple[str, Any], dict[str, Any]]:
    """Validates ``tables`` and turns it into something cheap to ship to the actors.

    Returns ``(spec, settings)``: ``spec`` is ``("factory", callable)`` or ``("config", dict)``;
    ``settings`` holds the checkpoint fields of a config (``{}`` for a factory).
    """
    from ostinato import server_config

    if isinstance(tables, (str, os.PathLike)):
        config = server_config.load_config(
            os.fspath(tables)
        )  # read here: nodes need not see the file
        return table_spec(config)
    if isinstance(tables, Mapping):
        config = dict(tables)
        server_config.tables_from_config(
            config
        )  # fails here, with the field named, not in an actor
        settings = server_config.server_settings(config)
        if settings["port"] is not None:
            raise ValueError(
                f"tables: the config sets port ({settings['port']}), which several "
                "shards cannot share; remove it and pass ports=[...] (one per shard) "
                "or let each shard pick one"
            )
        return ("config", config), settings
    if callable(tables):
        build_tables(("factory", tables))  # a factory that fails, fails here first
        return ("factory", tables), {}
    if isinstance(tables, Sequence):
        raise TypeError(
            "tables: pass a function returning the tables (e.g. `lambda: [Table(...)]`)"
            " or an ostinato-server config (a dict or a file path), not Table objects: "
            "each shard builds its own tables in its own process"
        )
    raise TypeError(
        f"tables ({tables!r}) must be a function returning a list of ostinato.Table, "
        "an ostinato-server config dict, or the path of a config file"
    )


def build_tables(spec: tuple[str, Any]) -> list[Any]:
    from ostinato import server_config
    from ostinato.core.table import Table

    kind, value = spec
    if kind == "config":
        return server_config.tables_from_config(value)
    made = value()
    if (
        not isinstance(made, (list, tuple))
        or not made
        or not all(isinstance(t, Table) for t in made)
    ):
        raise TypeError(
            f"tables: the factory {value!r} must return a non-empty list of "
            f"ostinato.Table, got {made!r}"
        )
    return list(made)


def format_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def free_port(avoid: Sequence[int]) -> tuple[str, int]:
    """(node id, a port nothing listens on) on the node this runs on (a Ray task)."""
    import ray

    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return ray.get_runtime_context().get_node_id(), port
    raise RuntimeError("no free port found")  # pragma: no cover


def port_in_use(host: str, port: int) -> bool:
    """True if something listens on ``port`` of ``host`` (connections of a dead server left
    in TIME_WAIT do not count, as for the server itself)."""
    from ostinato.transport.registry import port_is_free

    return not port_is_free(host, port)


# -- the actor -------------------------------------------------------------------------------------
class ShardServer:
    """One replay server in a Ray actor. Ray re-runs ``__init__`` with the same arguments when
    it restarts the actor, so the port and checkpoint directory are the same each time."""

    def __init__(
        self,
        index: int,
        num_shards: int,
        spec: tuple[str, Any],
        port: int,
        host: str | None,
        checkpoint: dict[str, Any] | None,
        token: str | None,
        server_options: dict[str, Any],
        bind_timeout: float,
    ) -> None:
        import ray
        from ostinato import checkpointers
        from ostinato.server import Server

        self._index = index
        self._num_shards = num_shards
        self._token = token
        self._node_id = ray.get_runtime_context().get_node_id()
        node_ip = ray.util.get_node_ip_address()
        bind_host = node_ip if host is None else host
        advertised = node_ip if host in WILDCARD_HOSTS else host
        self._restored: str | None = None
        ckpt_dir = checkpoint["path"] if checkpoint else None

        def make_server(want_port: int) -> Server:
            checkpointer = None
            if checkpoint:
                os.makedirs(ckpt_dir, exist_ok=True)
                names = checkpointers.store_list(ckpt_dir)
                self._restored = (
                    os.path.join(os.path.abspath(ckpt_dir), names[-1]) if names else None
                )
                checkpointer = checkpointers.DefaultCheckpointer(
                    ckpt_dir, keep=checkpoint["keep"], every_seconds=checkpoint["every_seconds"]
                )
            # Tables are built anew for each try: a try that failed may have restored into them.
            return Server(
                build_tables(spec),
                port=want_port,
                checkpointer=checkpointer,
                host=bind_host,
                token=token,
                **server_options,
            )

        self._port_changed = False
        deadline = time.monotonic() + bind_timeout
        while True:
            try:
                server = make_server(port)
                break
            except checkpointers.CheckpointError:
                raise
            except ValueError:
                if not port_in_use(bind_host, port):
                    raise  # a bad table or server option, not a busy port
                # The port is taken: by a process that got it while the shard was down, or on a
                # node the shard moved to. It may come free; if not, take another.
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                _log.warning(
                    "shard %d: port %d on %s stayed busy for %.0f s; taking another "
                    "(the shard's address changes: ShardGroup.refresh_addresses())",
                    index,
                    port,
                    bind_host,
                    bind_timeout,
                )
                server = make_server(0)
                self._port_changed = True
                break
        self._server = server
        self._address = format_address(advertised, server.port)
        self._started = time.time()
        # The actor's process exists to serve: keep full garbage collections short.
        from ostinato.gc_pauses import keep_gc_pauses_short

        keep_gc_pauses_short()
        _log.info(
            "replay shard %d/%d serving at %s%s",
            index,
            num_shards,
            self._address,
            f" (restored {self._restored})" if self._restored else "",
        )

    def address(self) -> str:
        return self._address

    def info(self) -> ShardInfo:
        return ShardInfo(
            self._index,
            self._address,
            os.getpid(),
            self._node_id,
            self._started,
            self._restored,
            self._port_changed,
        )

    def group(self) -> dict[str, Any]:
        return {"num_shards": self._num_shards, "token": self._token}

    def checkpoint(self) -> str:
        return self._server.checkpoint()

    def stop(self, checkpoint: bool) -> str | None:
        path = None
        try:
            if checkpoint and not self._server.stopped:
                path = self._server.checkpoint()
        finally:
            self._server.stop()
        return path


_ACTOR_CLASS: Any = None


def actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        _ACTOR_CLASS = ray.remote(ShardServer)
    return _ACTOR_CLASS


# -- the handle ------------------------------------------------------------------------------------
