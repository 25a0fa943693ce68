"""``ostinato-server``: run a replay server from a config file.

The config (text proto, TOML or YAML) is read by :mod:`ostinato.server_config`;
``examples/server_config.txtpb`` is an example, shown by ``ostinato-server --help``.

SIGTERM and SIGINT stop the server, after a final checkpoint when ``--checkpoint-on-exit``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from ostinato import validate
from ostinato.argtypes import positive, read_pem
from ostinato.gc_pauses import DEFAULT_UNFREEZE_EVERY, keep_gc_pauses_short
from ostinato.server_config import ConfigError, load_config, server_settings, tables_from_config

__all__ = [
    "ConfigError",
    "EXAMPLE_CONFIG",
    "build_parser",
    "load_config",
    "main",
    "server_settings",
    "tables_from_config",
]

_log = logging.getLogger("ostinato.server_cli")

#: ``examples/server_config.txtpb`` (a test keeps the two equal): shown by ``--help``.
EXAMPLE_CONFIG = """\
# ostinato-server --config examples/server_config.txtpb
# Reverb's ReverbServerConfig text proto, plus Ostinato's optional checkpoint and service
# fields.
port: 8000
tables: {
  table_name: "replay"
  sampler: { prioritized: { priority_exponent: 0.8 } }
  remover: { fifo: true }
  max_size: 1000000
  rate_limiter: {
    min_size_to_sample: 1000
    samples_per_insert: 4
    min_diff: -4000
    max_diff: 4000
  }
}
tables: {
  table_name: "recent"
  sampler: { uniform: true }
  remover: { fifo: true }
  max_size: 10000
  max_times_sampled: 8
  rate_limiter: {
    min_size_to_sample: 100
    samples_per_insert: 2
    min_diff: -1000
    max_diff: 1000
  }
}
checkpoint_every_seconds: 600
checkpoint_keep: 2
# The service's limits (optional; 4096 streams and 300 s are the defaults).
max_streams: 4096
idle_stream_seconds: 300
"""


# -- main ------------------------------------------------------------------------------------------
def _progress_bar() -> Any:
    """A progress callback drawing a rich bar for saves and loads (None if rich is missing)."""
    try:
        from rich.progress import Progress
    except ImportError:
        return None
    state: dict[str, Any] = {}

    def cb(phase: str, done: int, total: int) -> None:
        if "bar" not in state:
            state["bar"] = Progress(transient=True)
            state["bar"].start()
            state["task"] = state["bar"].add_task(f"checkpoint {phase}", total=total)
        state["bar"].update(state["task"], completed=done, total=total)
        if done >= total:
            state.pop("bar").stop()

    return cb


def _check_key_pair(tls: Any, cert_path: str, key_path: str) -> None:
    problem = tls.problem()
    if problem:
        raise ConfigError(f"--tls-cert {cert_path} / --tls-key {key_path}: {problem}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ostinato-server",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example config (text proto; .toml and .yaml files take the same fields):\n\n"
        + "\n".join("  " + line if line else "" for line in EXAMPLE_CONFIG.splitlines()),
    )
    p.add_argument(
        "--config", required=True, help="text-proto ReverbServerConfig, or a .toml / .yaml file"
    )
    p.add_argument("--host", default=None, help="interface to listen on (default localhost)")
    p.add_argument("--port", type=int, default=None, help="overrides the config's port")
    p.add_argument("--tls-cert", help="PEM certificate chain file")
    p.add_argument("--tls-key", help="PEM private key file")
    p.add_argument(
        "--token",
        default=os.environ.get("OSTINATO_TOKEN") or None,
        help="shared secret clients must send (default $OSTINATO_TOKEN)",
    )
    p.add_argument("--checkpoint-dir", help="checkpoint root (restored from on start)")
    p.add_argument("--checkpoint-every", type=positive(float), help="seconds between checkpoints")
    p.add_argument("--checkpoint-keep", type=positive(int), help="checkpoints to keep (default 1)")
    p.add_argument(
        "--checkpoint-on-exit",
        action="store_true",
        help="write a final checkpoint on SIGTERM/SIGINT",
    )
    p.add_argument(
        "--no-shared-memory",
        action="store_true",
        help="refuse writers' shared-memory rings (rows then always travel over gRPC)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (needs ostinato[metrics])",
    )
    p.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="keep the garbage collector's default behaviour (by default what survives each "
        "full collection is frozen, so that later ones stay short: see ostinato.gc_pauses)",
    )
    p.add_argument(
        "--gc-unfreeze-every",
        type=positive(float),
        default=DEFAULT_UNFREEZE_EVERY,
        metavar="SECONDS",
        help="seconds between unfreezes, each followed by one full collection of every object "
        f"(default {DEFAULT_UNFREEZE_EVERY:g})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token is not None and not args.token:
        parser.error("--token must not be empty")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.metrics_port is not None:
        try:
            validate.port("--metrics-port", args.metrics_port)
        except ValueError as e:
            parser.error(str(e))
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from ostinato import checkpointers
    from ostinato.server import Server, ServerTLS

    try:
        config = load_config(args.config)
        tables = tables_from_config(config)
        settings = server_settings(config)
    except ConfigError as e:
        print(f"ostinato-server: bad config: {e}", file=sys.stderr)
        return 2
    tls = None
    if args.tls_cert:
        try:
            tls = ServerTLS(
                read_pem(args.tls_cert, "--tls-cert", ConfigError),
                read_pem(args.tls_key, "--tls-key", ConfigError),
            )
            _check_key_pair(tls, args.tls_cert, args.tls_key)
        except ConfigError as e:
            print(f"ostinato-server: {e}", file=sys.stderr)
            return 2
    ckpt_dir = args.checkpoint_dir or settings["checkpoint_dir"]
    every = (
        args.checkpoint_every
        if args.checkpoint_every is not None
        else settings["checkpoint_every_seconds"]
    )
    keep = args.checkpoint_keep if args.checkpoint_keep is not None else settings["checkpoint_keep"]
    progress = None if args.no_progress else _progress_bar()
    checkpointer = None
    if ckpt_dir:
        checkpointer = checkpointers.DefaultCheckpointer(
            ckpt_dir, keep=keep or 1, every_seconds=every, progress=progress
        )
    port = args.port if args.port is not None else settings["port"]
    kwargs: dict[str, Any] = {
        **settings["service"],
        "token": args.token,
        "tls": tls,
        "shared_memory": not args.no_shared_memory,
    }
    if args.host:
        kwargs["host"] = args.host
    if args.metrics_port is not None:
        kwargs["metrics_port"] = args.metrics_port
    try:  # a bad port, a port in use, a checkpoint that does not fit the tables, bad TLS keys
        server = Server(tables, port=port, checkpointer=checkpointer, **kwargs)
    except (ValueError, OSError, RuntimeError, ImportError) as e:
        print(f"ostinato-server: cannot start: {e}", file=sys.stderr)
        return 1
    stopping = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stopping.is_set():
            return
        stopping.set()
        _log.info("received %s; stopping", signal.Signals(signum).name)
        threading.Thread(target=_shutdown, daemon=True).start()

    def _shutdown() -> None:
        try:
            if args.checkpoint_on_exit and checkpointer is not None:
                _log.info("final checkpoint written to %s", server.checkpoint())
        finally:
            server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Announced only once the handlers are in place: a signal sent on seeing this line (as
    # process managers and the tests do) stops the server gracefully, never kills it outright.
    if server.metrics_port is not None:
        _log.info("Prometheus metrics on port %d", server.metrics_port)
    if not args.no_gc_freeze:
        keep_gc_pauses_short(args.gc_unfreeze_every)
    print(f"ostinato-server listening on port {server.port}", flush=True)
    while not server.wait(0.5):
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
