"""``ostinato-ingest`` (``python -m ostinato.rlds``): offline data into a running server's table.

Reads a local RLDS dataset (a TFDS directory, as RLDS datasets are published; needs
TensorFlow and tensorflow-datasets) or a local Minari dataset (by path or id; needs minari,
not TensorFlow) and writes it into an existing table of the server at ``--server`` as
TF-Agents trajectories in ``--sequence-length``-step windows: what
:func:`~ostinato.rlds.push_rlds_to_table` and :func:`~ostinato.rlds.push_minari_to_table`
write. Nothing is created on the server (start one with ``ostinato-server``) and nothing is
downloaded. Examples::

    ostinato-ingest ~/tensorflow_datasets/d4rl_mujoco_halfcheetah/v2-medium/1.2.0 \\
        --server localhost:8000 --table replay
    ostinato-ingest D4RL/pen/human-v2 --server replay-host:8000 --table replay \\
        --sequence-length 3 --token "$OSTINATO_TOKEN" --tls-ca ca.pem

Exit status: 0 when everything was written, 1 on an error (the message says what; for a
malformed episode, nothing of it is in the table and the episodes before it are), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from ostinato.argtypes import positive, read_pem

_log = logging.getLogger("ostinato.rlds.ingest_cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ostinato-ingest",
        description="Write a local RLDS (TFDS directory) or Minari dataset into an existing "
        "table of a running Ostinato server as TF-Agents trajectories.",
    )
    p.add_argument(
        "source",
        help="a TFDS/RLDS dataset directory, a Minari dataset directory, "
        "or a local Minari dataset id",
    )
    p.add_argument("--server", required=True, help="host:port of the server")
    p.add_argument(
        "--table",
        required=True,
        action="append",
        help="table to write to (repeat for several: the data is stored once)",
    )
    p.add_argument(
        "--format",
        choices=["auto", "rlds", "minari"],
        default="auto",
        help="what SOURCE is (auto: a directory with dataset_info.json is RLDS, "
        "anything else Minari)",
    )
    p.add_argument("--split", default="train", help="TFDS split to read (RLDS; default train)")
    p.add_argument(
        "--episodes", type=positive(int), default=None, help="write only the first N episodes"
    )
    p.add_argument(
        "--sequence-length",
        type=positive(int),
        default=2,
        help="steps per item (default 2: one transition)",
    )
    p.add_argument(
        "--stride-length",
        type=positive(int),
        default=1,
        help="steps between the starts of consecutive items (default 1)",
    )
    p.add_argument("--priority", type=float, default=1.0, help="priority of every item")
    p.add_argument(
        "--pad-end-of-episodes",
        action="store_true",
        help="pad episode ends as TF-Agents' observer does",
    )
    p.add_argument(
        "--tile-end-of-episodes",
        action="store_true",
        help="with padding, write every window that runs into the padding",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show steps, episodes and steps/s (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--timeout",
        type=positive(float),
        default=None,
        help="seconds any one wait on the server may take (rate limiter, flush)",
    )
    p.add_argument(
        "--max-pending-items",
        type=positive(int),
        default=512,
        help="items sent but not yet confirmed by the server at most (default 512: "
        "small insert requests, so samplers are answered between them)",
    )
    p.add_argument(
        "--max-rate",
        type=positive(float),
        default=None,
        metavar="STEPS_PER_S",
        help="write at most this many steps per second (leaves a busy server's "
        "time to its samplers; default: as fast as it goes)",
    )
    p.add_argument(
        "--connect-timeout",
        type=positive(float),
        default=30.0,
        help="seconds to keep retrying while the server cannot be reached",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("OSTINATO_TOKEN") or None,
        help="the server's shared secret (default $OSTINATO_TOKEN)",
    )
    p.add_argument("--tls-ca", help="PEM root certificates: connect over TLS")
    p.add_argument("--tls-server-name", help="name to check in the server's certificate")
    p.add_argument("--compression", choices=["zstd", "none"], default="zstd")
    p.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    )
    return p


def _version_key(path: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]", os.path.basename(path)))


def find_tfds_directory(path: str) -> str | None:
    """The TFDS version directory (with ``dataset_info.json``) at or below ``path`` (two
    levels: ``name/version`` or ``name/config/version``; the newest version when several).

    Raises:
      ValueError: several configs are below ``path`` (the message lists them).
    """
    if os.path.isfile(os.path.join(path, "dataset_info.json")):
        return path
    found: list[str] = []
    for root, dirs, files in os.walk(path):
        depth = os.path.relpath(root, path).count(os.sep) + (root != path)
        if "dataset_info.json" in files and root != path:
            found.append(root)
        if depth >= 2:
            dirs[:] = []
    if not found:
        return None
    parents = {os.path.dirname(f) for f in found}
    if len(parents) > 1:
        raise ValueError(
            f"{path!r} holds several TFDS datasets or configs ({sorted(parents)}); name one of them"
        )
    return max(found, key=_version_key)


def load_rlds(path: str, split: str) -> Any:
    """The ``tf.data.Dataset`` of episodes of the TFDS dataset at ``path`` (local only).

    Raises:
      ImportError: TensorFlow or tensorflow-datasets is not installed.
      FileNotFoundError: ``path`` is not a TFDS dataset directory.
    """
    directory = find_tfds_directory(path) if os.path.isdir(path) else None
    if directory is None:
        raise FileNotFoundError(
            f"{path!r} is not a TFDS (RLDS) dataset directory: no "
            "dataset_info.json in it or in its version directories"
        )
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise ImportError(
            "reading RLDS (TFDS) datasets needs TensorFlow and "
            f"tensorflow-datasets: pip install 'ostinato[rlds]' ({e})"
        ) from e
    builder = tfds.builder_from_directory(directory)
    if split not in builder.info.splits:
        raise ValueError(
            f"--split {split!r}: the dataset at {directory} has splits "
            f"{sorted(builder.info.splits)}"
        )
    return builder.as_dataset(split=split, shuffle_files=False)


def _is_rlds(source: str) -> bool:
    if not os.path.isdir(source):
        return False
    try:
        return find_tfds_directory(source) is not None
    except ValueError:
        return True  # several TFDS configs: load_rlds says which


def _client(args: argparse.Namespace) -> Any:
    import ostinato

    roots = None if not args.tls_ca else read_pem(args.tls_ca, "--tls-ca")
    return ostinato.Client(
        args.server,
        token=args.token,
        root_certificates=roots,
        tls_server_name=args.tls_server_name,
        compression=args.compression,
        unavailable_timeout=args.connect_timeout,
    )


class _FirstEpisodes:
    """The first ``n`` episodes of a Minari dataset (iterable more than once)."""

    def __init__(self, dataset: Any, n: int):
        self._dataset, self._n = dataset, n

    def iterate_episodes(self) -> Any:
        import itertools

        return itertools.islice(self._dataset.iterate_episodes(), self._n)


def _take(episodes: Any, n: int | None) -> Any:
    if n is None:
        return episodes
    if hasattr(episodes, "take"):  # a tf.data.Dataset
        return episodes.take(n)
    return _FirstEpisodes(episodes, n)


def run(args: argparse.Namespace) -> str:
    """Does the ingestion ``args`` describe; returns the summary line."""
    from ostinato import rlds

    kind = args.format
    if kind == "auto":
        kind = "rlds" if _is_rlds(args.source) else "minari"
    options = dict(
        sequence_length=args.sequence_length,
        stride_length=args.stride_length,
        priority=args.priority,
        pad_end_of_episodes=args.pad_end_of_episodes,
        tile_end_of_episodes=args.tile_end_of_episodes,
        progress=args.progress,
        timeout=args.timeout,
        max_pending_items=args.max_pending_items,
        max_steps_per_second=args.max_rate,
    )
    data = load_rlds(args.source, args.split) if kind == "rlds" else rlds.load_minari(args.source)
    data = _take(data, args.episodes)
    client = _client(args)
    tables = args.table if len(args.table) > 1 else args.table[0]
    start = time.perf_counter()
    try:
        if kind == "rlds":
            count = rlds.push_rlds_to_table(data, client, tables, **options)
        else:
            count = rlds.push_minari_to_table(data, client, tables, **options)
    finally:
        client.close()
    elapsed = time.perf_counter() - start
    return (
        f"ostinato-ingest: wrote {count:,} steps of {args.source} ({kind}) into "
        f"{', '.join(args.table)} at {args.server} in {elapsed:.2f} s "
        f"({count / max(elapsed, 1e-9):,.0f} steps/s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tile_end_of_episodes and not args.pad_end_of_episodes:
        parser.error("--tile-end-of-episodes needs --pad-end-of-episodes")
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        print(run(args))
    except KeyboardInterrupt:
        print("ostinato-ingest: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one clear line, not a traceback
        _log.debug("ingestion failed", exc_info=True)
        message = getattr(e, "message", None) or str(e)
        print(f"ostinato-ingest: error: {type(e).__name__}: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
