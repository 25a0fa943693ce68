"""``ostinato``: look at running servers.

* ``ostinato top ADDRESS[,ADDRESS...]`` -- a live view of every table (:mod:`ostinato.ops.top`);
  ``q`` quits.
* ``ostinato info ADDRESS[,ADDRESS...] [--json]`` -- the same values once: a table for people,
  JSON for scripts (:mod:`ostinato.ops.stats` describes the fields).

Several addresses (comma-separated) are read as the shards of one sharded set. Both talk to
the servers over gRPC with the client's options: ``--token`` (default ``$OSTINATO_TOKEN``),
``--tls-ca`` (PEM root certificates: connect over TLS), ``--tls-server-name``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from ostinato.argtypes import read_pem


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return v


#: ``--help``'s description: the module docstring's first line, without reST markup.
DESCRIPTION = (
    "Look at running servers: a live view of every table (top), or the same values "
    "once (info; --json for scripts). Several comma-separated addresses are read as "
    "the shards of one sharded set."
)


def _error(args: argparse.Namespace, message: str) -> str:
    """``message`` as the command reports it: one ``ostinato COMMAND:`` prefix."""
    return f"ostinato {args.command}: {message}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ostinato", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True, metavar="{top,info}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "address", help="host:port of a server; several (comma-separated) for a sharded set"
    )
    common.add_argument(
        "--token",
        default=os.environ.get("OSTINATO_TOKEN") or None,
        help="the servers' shared secret (default $OSTINATO_TOKEN)",
    )
    common.add_argument(
        "--tls-ca", metavar="PEM", help="root certificates (PEM file): connect over TLS"
    )
    common.add_argument(
        "--tls-server-name", help="name to check in the server's certificate, if not the host's"
    )
    common.add_argument(
        "--timeout",
        type=_positive_float,
        default=5.0,
        help="seconds to wait for each server (default 5)",
    )
    top = sub.add_parser("top", parents=[common], help="live view of the tables (q quits)")
    top.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        help="seconds between refreshes (default 1)",
    )
    info = sub.add_parser("info", parents=[common], help="the values once")
    info.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return p


def _client(args: argparse.Namespace) -> Any:
    from ostinato.client import Client

    root = None
    if args.tls_ca:
        root = read_pem(args.tls_ca, "--tls-ca", lambda message: SystemExit(_error(args, message)))
    # Always over the network (this is another process than the server), with short retries:
    # a refresh must not hang on a server that went away.
    return Client(
        args.address,
        token=args.token,
        root_certificates=root,
        tls_server_name=args.tls_server_name,
        in_process=False,
        unavailable_timeout=min(args.timeout, 2.0),
    )


def json_safe(v: Any) -> Any:
    """``v`` with non-finite floats as None (JSON has no infinities; scripts get null)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def _info(args: argparse.Namespace) -> int:
    from ostinato import errors
    from ostinato.ops.stats import collect

    client = _client(args)
    try:
        values = collect(client, args.timeout)
    except errors.ReverbError as e:
        text = f"{type(e).__name__}: {e}"
        if args.address not in str(e):  # most messages name the server already
            text = f"{args.address}: {text}"
        print(_error(args, text), file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.json:
        try:
            json.dump(json_safe(values), sys.stdout, indent=2, sort_keys=True, allow_nan=False)
            sys.stdout.write("\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `ostinato info --json | head`: the reader left early
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    from rich.console import Console

    from ostinato.ops.top import TopModel

    model = TopModel(args.address, 0)
    model.update(values)
    Console().print(model.render_static())
    return 0


def _top(args: argparse.Namespace) -> int:
    from ostinato.ops.top import run

    client = _client(args)
    try:
        return run(client, args.address, interval=args.interval, timeout=args.timeout)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from ostinato.transport.registry import parse_address, split_addresses

        for a in split_addresses(args.address):
            parse_address(a)
    except ValueError as e:
        print(_error(args, str(e)), file=sys.stderr)
        return 2
    return _top(args) if args.command == "top" else _info(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
