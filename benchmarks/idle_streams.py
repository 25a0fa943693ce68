"""Idle streams: do open Insert streams that send nothing cost the server threads or latency?

A server in its own process; a second process opens ``N`` raw Insert streams (gRPC calls
that never send a request: actors that connected and went quiet) and holds them. Before and
while they are open, a probe opens a fresh client every 0.1 s and times ``server_info()``
(as ``actor_scale.py`` does), and the server's thread count and RSS are read from /proc.

    python benchmarks/idle_streams.py --streams 1024
    python benchmarks/idle_streams.py --streams 256,1024,2048 --probes 50

Results: ``results_idle_streams.{json,md}`` beside this file. Ostinato only: dm-reverb's
Python API has no way to hold a stream open without writing.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from actor_scale import _pct, _proc_status  # noqa: E402
from servers import ServerProc, stop_child  # noqa: E402

TABLE = [{"name": "t", "kind": "uniform", "max_size": 1000, "min_size": 1}]


def hold_main(port: int, n: int) -> None:
    """``--hold``: opens ``n`` raw Insert streams, prints "open", holds them until stdin ends."""
    import grpc

    from ostinato.wire import protocol

    hold = threading.Event()

    def nothing():
        hold.wait()
        return
        yield  # a generator that sends no request

    channel = grpc.insecure_channel(f"localhost:{port}")
    method = channel.stream_stream(protocol.method_path(protocol.INSERT_METHOD))
    calls = [method(nothing()) for _ in range(n)]
    print("open", flush=True)
    sys.stdin.read()
    hold.set()
    for c in calls:
        c.cancel()
    channel.close()


def probe(port: int, count: int) -> list[float]:
    import ostinato as reverb

    out = []
    for _ in range(count):
        t0 = time.monotonic()
        reverb.Client(f"localhost:{port}", in_process=False).server_info(timeout=10)
        out.append(time.monotonic() - t0)
        time.sleep(0.1)
    return out


def active_streams(port: int) -> int:
    import ostinato as reverb

    m = reverb.Client(f"localhost:{port}", in_process=False).metrics(timeout=10)
    return int(m.get("server", {}).get("writer_streams", m.get("writer_streams", -1)))


def measure(server: ServerProc, probes: int) -> dict:
    lat = probe(server.port, probes)
    st = _proc_status(server.proc.pid)
    return {
        "p50": _pct(lat, 0.5),
        "p99": _pct(lat, 0.99),
        "max": max(lat),
        "threads": st.get("Threads"),
        "rss_mb": (st.get("VmRSS") or 0) // 1024,
        "streams": active_streams(server.port),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", default="1024", help="idle stream counts, comma-separated")
    p.add_argument("--probes", type=int, default=30, help="server_info calls per measurement")
    p.add_argument("--hold", nargs=2, type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.hold:
        hold_main(*args.hold)
        return
    import subprocess

    rows = []
    for n in [int(x) for x in args.streams.split(",")]:
        server = ServerProc("ostinato", TABLE)
        try:
            base = measure(server, args.probes)
            holder = subprocess.Popen(
                [sys.executable, __file__, "--hold", str(server.port), str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout.readline().strip() == "open"
            deadline = time.monotonic() + 60
            while active_streams(server.port) < n and time.monotonic() < deadline:
                time.sleep(0.2)
            loaded = measure(server, args.probes)
            holder.stdin.close()
            holder.wait(30)
        finally:
            stop_child(server.proc)
        rows.append({"streams": n, "without": base, "with": loaded})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    def ms(x: float) -> str:
        return f"{x * 1000:.1f} ms"

    md = [
        "| idle streams open | server_info p50 / p99 (none open) | p50 / p99 (open) "
        "| server threads (none / open) | RSS (none / open) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["without"], r["with"]
        md.append(
            f"| {b['streams']} of {r['streams']} | {ms(a['p50'])} / {ms(a['p99'])} | "
            f"{ms(b['p50'])} / {ms(b['p99'])} | {a['threads']} / {b['threads']} | "
            f"{a['rss_mb']} / {b['rss_mb']} MB |"
        )
    (HERE / "results_idle_streams.json").write_text(json.dumps(rows, indent=1))
    (HERE / "results_idle_streams.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
