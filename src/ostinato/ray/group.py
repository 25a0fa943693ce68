"""A group of replay shards on Ray: :func:`start_shards` and the :class:`ShardGroup` handle."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ostinato.ray.actor import (
    STRATEGIES,
    ShardInfo,
    actor_class,
    table_spec,
)
from ostinato.ray.ports import _port_list, _probe_ports
from ostinato.validate import is_int, is_real, positive_int

_log = logging.getLogger(__name__)


class ShardGroup:
    """Replay shards running as Ray actors (made by :func:`start_shards` or :meth:`lookup`).

    The handle can be passed to Ray tasks and actors (it holds Ray actor handles and the
    addresses); each can build its own client with :meth:`client`.
    """

    def __init__(
        self,
        actors: Sequence[Any],
        addresses: Sequence[str],
        placement_group: Any,
        token: str | None,
        name: str | None = None,
    ):
        self._actors = list(actors)
        self._addresses = list(addresses)
        self._pg = placement_group
        self._token = token
        self._name = name
        self._closed = False

    # -- addresses and clients ------------------------------------------------------------------
    @property
    def addresses(self) -> list[str]:
        """``host:port`` of each shard, in shard order (feed it to ``ostinato.Client``)."""
        return list(self._addresses)

    @property
    def num_shards(self) -> int:
        return len(self._actors)

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in shard order."""
        return list(self._actors)

    @property
    def name(self) -> str | None:
        return self._name

    def client(self, *, first_shard: int | None = None, **client_kwargs: Any) -> Any:
        """A sharded :class:`ostinato.Client` over :attr:`addresses`.

        Args:
          first_shard: the shard the client's round-robin starts at (its first writer stream,
            insert and sample go there). ``None`` (default) picks one at random, so that writers
            in many processes, each building its own client, spread over the shards rather than
            all starting on shard 0. Priority updates and deletes are routed by key either way.
          **client_kwargs: passed to ``ostinato.Client`` (``unavailable_timeout``,
            ``compression``, ...). The group's ``token`` is passed unless given.
        """
        from ostinato.client import Client

        n = len(self._addresses)
        if first_shard is None:
            first_shard = random.randrange(n)
        if not is_int(first_shard) or not 0 <= first_shard < n:
            raise ValueError(f"first_shard ({first_shard!r}) must be None or in 0..{n - 1}")
        client_kwargs.setdefault("token", self._token)
        rotated = self._addresses[first_shard:] + self._addresses[:first_shard]
        return Client(rotated, **client_kwargs)

    def refresh_addresses(self, timeout: float | None = 60.0) -> bool:
        """Asks every shard for its address (waiting for restarting shards, up to ``timeout``
        seconds); returns True if any changed. Clients built before keep the old addresses:
        build new ones with :meth:`client`."""
        infos = self.info(timeout=timeout)
        new = [i.address for i in infos]
        changed = new != self._addresses
        if changed:
            _log.warning("replay shard addresses changed: %s -> %s", self._addresses, new)
            self._addresses = new
        return changed

    # -- state -----------------------------------------------------------------------------------
    def info(self, timeout: float | None = 60.0) -> list[ShardInfo]:
        """One :class:`ShardInfo` per shard; waits for shards being restarted.

        Raises:
          TimeoutError: some shards did not answer within ``timeout`` seconds (named, with the
            last error seen).
        """
        return self._call_all("info", (), timeout)

    def wait_ready(self, timeout: float | None = 60.0) -> None:
        """Blocks until every shard serves (e.g. after a restart). Raises TimeoutError."""
        self._call_all("address", (), timeout)

    def checkpoint(self, timeout: float | None = None) -> list[str]:
        """Makes every shard write a checkpoint (in parallel); returns their paths."""
        return self._call_all("checkpoint", (), timeout, retry=False)

    def kill_shard(self, index: int, *, restart: bool = True) -> None:
        """Kills shard ``index``'s actor (as a crash would: no final checkpoint). With
        ``restart``, Ray restarts it, and it restores its newest checkpoint."""
        import ray

        if not is_int(index) or not 0 <= index < len(self._actors):
            raise ValueError(f"index ({index!r}) must be in 0..{len(self._actors) - 1}")
        ray.kill(self._actors[index], no_restart=not restart)

    def shutdown(self, *, checkpoint: bool = False, timeout: float | None = 60.0) -> list[str]:
        """Stops every shard's server (after a checkpoint when ``checkpoint``), ends the actors
        and removes the placement group. Idempotent.

        Returns:
          The checkpoint paths written (empty without ``checkpoint``).

        Raises:
          RuntimeError: a shard failed to checkpoint or stop in time (everything is ended
            all the same; the message names the shards).
        """
        from ray.util.placement_group import remove_placement_group

        import ray

        if self._closed:
            return []
        self._closed = True
        refs = [a.stop.remote(bool(checkpoint)) for a in self._actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        paths: list[str] = []
        problems: list[str] = []
        for i, ref in enumerate(refs):
            try:
                p = ray.get(ref, timeout=0)
            except Exception as e:  # noqa: BLE001 - reported below, after everything is ended
                problems.append(f"shard {i} ({self._addresses[i]}): {type(e).__name__}: {e}")
                continue
            if p is not None:
                paths.append(p)
        for a in self._actors:
            ray.kill(a, no_restart=True)
        if self._pg is not None:
            remove_placement_group(self._pg)
        if problems:
            raise RuntimeError("shutdown: " + "; ".join(problems))
        return paths

    def __enter__(self) -> ShardGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"ShardGroup({self._addresses}{', closed' if self._closed else ''})"

    # -- discovery ---------------------------------------------------------------------------------
    @classmethod
    def lookup(
        cls, name: str, *, namespace: str | None = None, timeout: float | None = 60.0
    ) -> ShardGroup:
        """The group started with ``start_shards(..., name=name)``, found from any Ray driver
        or task connected to the same cluster (and namespace).

        Raises:
          LookupError: no group of that name runs.
        """
        from ray.util import get_placement_group

        import ray

        try:
            first = ray.get_actor(f"{name}-0", namespace=namespace)
        except ValueError:
            raise LookupError(
                f"no ostinato shard group named {name!r} runs in this Ray "
                f"namespace ({namespace or 'the current one'})"
            ) from None
        group = ray.get(first.group.remote(), timeout=timeout)
        actors = [first] + [
            ray.get_actor(f"{name}-{i}", namespace=namespace) for i in range(1, group["num_shards"])
        ]
        try:
            pg = get_placement_group(f"{name}-shards")
        except ValueError:
            pg = None
        handle = cls(actors, [""] * len(actors), pg, group["token"], name)
        handle._addresses = [i.address for i in handle.info(timeout=timeout)]
        return handle

    # -- internals --------------------------------------------------------------------------------
    def _call_all(
        self, method: str, args: tuple[Any, ...], timeout: float | None, retry: bool = True
    ) -> list[Any]:
        """Calls ``method`` on every shard; retries shards that are being restarted."""
        from ray.exceptions import GetTimeoutError, RayActorError

        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        results: dict[int, Any] = {}
        last: dict[int, str] = {}
        pending = {i: getattr(a, method).remote(*args) for i, a in enumerate(self._actors)}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            for i, ref in list(pending.items()):
                try:
                    results[i] = ray.get(ref, timeout=left if left is None else min(left, 1.0))
                    del pending[i]
                except GetTimeoutError:
                    last[i] = "no answer yet"
                except RayActorError as e:
                    if not retry or getattr(e, "actor_init_failed", False):
                        raise RuntimeError(
                            f"shard {i} ({self._addresses[i] or 'starting'}): {method} failed: {e}"
                        ) from e
                    last[i] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    time.sleep(0.1)
                    pending[i] = getattr(self._actors[i], method).remote(*args)
            if pending and deadline is not None and time.monotonic() >= deadline:
                for ref in pending.values():
                    ray.cancel(ref)
                missing = ", ".join(
                    f"shard {i} ({self._addresses[i] or 'starting'}): {last.get(i)}"
                    for i in sorted(pending)
                )
                raise TimeoutError(f"{method}: no answer within {timeout:g} s from {missing}")
        return [results[i] for i in range(len(self._actors))]


# -- starting --------------------------------------------------------------------------------------
def start_shards(
    tables: Callable[[], Sequence[Any]] | Mapping[str, Any] | str | os.PathLike,
    num_shards: int,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every_seconds: float | None = None,
    checkpoint_keep: int | None = None,
    ports: int | Sequence[int] | None = None,
    host: str | None = None,
    token: str | None = None,
    num_cpus: float = 1.0,
    resources: Mapping[str, float] | None = None,
    strategy: str = "SPREAD",
    max_restarts: int = -1,
    name: str | None = None,
    namespace: str | None = None,
    detached: bool = False,
    server_options: Mapping[str, Any] | None = None,
    actor_options: Mapping[str, Any] | None = None,
    bind_timeout: float = 10.0,
    timeout: float | None = 120.0,
) -> ShardGroup:
    """Starts ``num_shards`` replay servers as Ray actors (Ray must be initialised).

    Args:
      tables: what each shard serves: a function returning a list of ``ostinato.Table`` (Ray
        ships it to the actors with cloudpickle; it is called once here first, to fail early),
        an ``ostinato-server`` config (a dict with ``tables``, as in a TOML file), or the path
        of a config file (text proto, TOML or YAML; read here). A config's
        ``checkpoint_*`` fields are used where the arguments below are not given; its
        ``port`` must not be set.
      num_shards: how many servers.
      checkpoint_dir: if set, shard ``i`` checkpoints under ``<checkpoint_dir>/shard-<i>`` and
        restores the newest checkpoint there whenever it starts (also after a restart). It must
        be writable on the shard's node; use shared storage if a shard may move to another node.
      checkpoint_every_seconds: periodic checkpoints (needs ``checkpoint_dir``).
      checkpoint_keep: checkpoints kept per shard (default 1).
      ports: the port of each shard (a list), or a first port (shard ``i`` gets
        ``ports + i``); by default each shard gets a port that was free on its node when it
        was placed. Ports are kept across restarts.
      host: interface the servers listen on; by default the node's IP address as Ray sees it,
        which is also the address handed to clients (for ``"0.0.0.0"``/``"::"`` too).
      token: shared secret of the servers (clients from :meth:`ShardGroup.client` send it).
        Without it (or TLS through ``server_options``) anyone who can reach the nodes can read
        and change the replay data; the servers log a warning.
      num_cpus: CPUs each shard reserves (its placement-group bundle and actor; may be
        fractional).
      resources: further Ray resources per shard (e.g. ``{"memory": 8e9}`` or a custom
        ``{"replay_node": 1}`` to pin shards to labelled nodes).
      strategy: placement-group strategy: ``"SPREAD"`` (default; over the nodes, several per
        node when needed), ``"STRICT_SPREAD"`` (one per node), ``"PACK"``, ``"STRICT_PACK"``.
      max_restarts: how often Ray restarts a dead shard actor (-1: always).
      name: names the actors ``<name>-<i>`` and the placement group ``<name>-shards``, so
        that :meth:`ShardGroup.lookup` finds the group from another driver.
      namespace: Ray namespace of the named actors.
      detached: let the group outlive this driver (needs ``name``; end it with
        ``ShardGroup.lookup(name).shutdown()``).
      server_options: further ``ostinato.Server`` arguments (``tls``, ``max_workers``,
        ``shared_memory``, ``max_message_bytes``).
      actor_options: further Ray ``.options()`` for the actors (e.g. ``runtime_env``).
      bind_timeout: after a restart, how long a shard waits for its old port before taking
        another one (then its address changes).
      timeout: seconds to wait for the placement group and for every shard to serve.

    Returns:
      A :class:`ShardGroup`.

    Raises:
      ValueError, TypeError: a bad argument (named, with its value) or a bad table config.
      TimeoutError: the cluster could not place the shards, or they did not start, in time
        (whatever was started is ended).
      RuntimeError: a shard failed to start (its error is included).
    """
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    import ray

    positive_int("num_shards", num_shards)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy ({strategy!r}) must be one of {', '.join(STRATEGIES)}")
    if not is_real(num_cpus) or num_cpus < 0:
        raise ValueError(f"num_cpus ({num_cpus!r}) must be a number >= 0")
    if not is_int(max_restarts) or max_restarts < -1:
        raise ValueError(f"max_restarts ({max_restarts!r}) must be -1 (always) or >= 0")
    if detached and not name:
        raise ValueError("detached=True needs a name (to find and end the group later)")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"name ({name!r}) must be a non-empty string")
    if not bind_timeout >= 0:
        raise ValueError(f"bind_timeout ({bind_timeout!r}) must be >= 0")
    spec, settings = table_spec(tables)
    checkpoint_dir = (
        checkpoint_dir if checkpoint_dir is not None else settings.get("checkpoint_dir")
    )
    every = (
        checkpoint_every_seconds
        if checkpoint_every_seconds is not None
        else settings.get("checkpoint_every_seconds")
    )
    keep = checkpoint_keep if checkpoint_keep is not None else settings.get("checkpoint_keep")
    if checkpoint_dir is None and (every is not None or keep is not None):
        raise ValueError("checkpoint_every_seconds and checkpoint_keep need a checkpoint_dir")
    if every is not None and not every > 0:
        raise ValueError(f"checkpoint_every_seconds ({every!r}) must be > 0")
    positive_int("checkpoint_keep", keep, none_ok=True)
    port_list = _port_list(ports, num_shards)
    bundle = {"CPU": float(num_cpus), **{k: float(v) for k, v in (resources or {}).items()}}
    bundle = {k: v for k, v in bundle.items() if v > 0}
    if not bundle:
        bundle = {"CPU": 0.001}  # a bundle must reserve something; this places without taking
    if not ray.is_initialized():
        raise RuntimeError(
            "start_shards needs Ray: call ray.init() first (or ray.init(address="
            "'auto') to join a running cluster)"
        )

    total = ray.cluster_resources()
    short = {
        k: f"{v * num_shards:g} needed, {total.get(k, 0):g} in the cluster"
        for k, v in bundle.items()
        if v * num_shards > total.get(k, 0)
    }
    if short:  # an autoscaling cluster may still grow to fit; others will time out
        _log.warning(
            "%d shards of %s do not fit the cluster as it is (%s): waiting up to %s s "
            "for it to grow; lower num_cpus/resources per shard otherwise",
            num_shards,
            bundle,
            "; ".join(f"{k}: {v}" for k, v in short.items()),
            timeout,
        )
    pg_kwargs: dict[str, Any] = {"strategy": strategy}
    if name:
        pg_kwargs["name"] = f"{name}-shards"
    if detached:
        pg_kwargs["lifetime"] = "detached"
    pg = placement_group([dict(bundle) for _ in range(num_shards)], **pg_kwargs)
    actors: list[Any] = []
    try:
        try:
            ray.get(pg.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"the cluster could not place {num_shards} shards of {bundle} with strategy "
                f"{strategy} within {timeout} s (available now: {ray.available_resources()}; "
                "lower num_cpus or resources per shard, or add nodes)"
            ) from None

        def in_bundle(i: int) -> Any:
            return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)

        if port_list is None:
            port_list = _probe_ports(num_shards, in_bundle, timeout)
        cls = actor_class()
        for i in range(num_shards):
            ckpt = None
            if checkpoint_dir is not None:
                ckpt = {
                    "path": os.path.join(os.fspath(checkpoint_dir), f"shard-{i:03d}"),
                    "every_seconds": every,
                    "keep": keep or 1,
                }
            opts: dict[str, Any] = {
                "num_cpus": bundle.get("CPU", 0),
                "max_restarts": max_restarts,
                "max_concurrency": 4,
                "scheduling_strategy": in_bundle(i),
                "resources": {k: v for k, v in bundle.items() if k != "CPU"} or None,
            }
            if name:
                opts["name"] = f"{name}-{i}"
                opts["namespace"] = namespace
            if detached:
                opts["lifetime"] = "detached"
            opts.update(actor_options or {})
            if opts.get("resources") is None:
                opts.pop("resources")
            actors.append(
                cls.options(**opts).remote(
                    i,
                    num_shards,
                    spec,
                    port_list[i],
                    host,
                    ckpt,
                    token,
                    dict(server_options or {}),
                    float(bind_timeout),
                )
            )
        group = ShardGroup(actors, [""] * num_shards, pg, token, name)
        try:
            group._addresses = [i.address for i in group.info(timeout=timeout)]
        except TimeoutError as e:
            raise TimeoutError(f"replay shards did not start: {e}") from None
        _log.info("%d replay shards serving at %s", num_shards, ", ".join(group._addresses))
        return group
    except BaseException as e:
        for a in actors:
            ray.kill(a, no_restart=True)
        remove_placement_group(pg)
        if isinstance(e, ray.exceptions.RayError):
            raise RuntimeError(f"replay shards failed to start: {e}") from e
        raise


__all__ = ["ShardGroup", "ShardInfo", "start_shards"]
