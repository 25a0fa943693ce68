"""``ostinato top``: a live terminal view of a server's (or a sharded set's) tables.

Each refresh asks the server(s) for :func:`~ostinato.ops.stats.collect`'s values and shows,
per table: a size bar against ``max_size``, insert and sample rates (from the counters' change
since the last refresh), the sample-to-insert ratio against the rate limiter's target, the
limiter's diff against its bounds, and who is blocked (calls waiting to insert or to sample
now, and on average over the last interval); above the tables, the server's stored bytes,
writer streams, request and byte rates and the checkpoint age. A sharded set gets a line per
shard under each table. ``q`` quits (the terminal is read in cbreak mode and restored on exit,
Ctrl-C included).
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ostinato.ops.top_format import BAR_WIDTH as BAR_WIDTH
from ostinato.ops.top_format import (
    fmt_bytes,
    fmt_count,
    fmt_rate,
    fmt_seconds,
    fmt_short,
    size_bar,
)

#: Terminal columns the full view needs; narrower terminals get no size bars.
FULL_WIDTH = 118


# -- rates ----------------------------------------------------------------------------------------
def _rate(new: float | None, old: float | None, dt: float) -> float | None:
    if new is None or old is None or dt <= 0:
        return None
    d = new - old
    return d / dt if d >= 0 else None  # a reset table: no rate this time


def _requests_total(server: dict[str, Any]) -> int:
    return sum(sum(v.values()) for v in (server.get("requests") or {}).values())


class TopModel:
    """The values of the last two refreshes and what they give (rates), rendered by
    :meth:`render`."""

    def __init__(self, address: str, interval: float):
        self.address = address
        self.interval = interval
        self.current: dict[str, Any] | None = None
        self.previous: dict[str, Any] | None = None
        self.dt = 0.0
        self.error: str | None = None
        self._t: float | None = None
        self._bars = True

    def update(self, values: dict[str, Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.current is not None and self._t is not None:
            self.previous, self.dt = self.current, now - self._t
        self.current, self._t, self.error = values, now, None

    def failed(self, error: str) -> None:
        self.error = error

    # -- rendering --------------------------------------------------------------------------
    def render_static(self) -> RenderableType:
        """One snapshot, for ``ostinato info``: per table a few labelled lines (totals, not
        rates), which wrap rather than cut on a narrow terminal."""
        parts: list[RenderableType] = [self._title("ostinato info")]
        cur = self.current or {}
        parts.extend(self._server_lines(cur, totals=True))
        shards = [s for s in cur.get("shards") or [] if "error" not in s]
        for name, t in cur.get("tables", {}).items():
            parts.append(Text(""))
            parts.append(
                Text.assemble(
                    (name, "bold"),
                    (
                        f"  {t.get('sampler')} sampler, {t.get('remover')} remover"
                        + (f", {len(shards)} shards" if len(shards) > 1 else ""),
                        "grey62",
                    ),
                )
            )
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="grey70", no_wrap=True)
            grid.add_column()
            ratio = t["samples"] / t["inserts"] if t.get("inserts") else 0.0
            grid.add_row("  items", f"{fmt_count(t.get('size'))} / {fmt_count(t.get('max_size'))}")
            grid.add_row(
                "  inserted, sampled",
                f"{fmt_count(t.get('inserts'))}, {fmt_count(t.get('samples'))} "
                f"({ratio:.2f} per insert; target {t.get('samples_per_insert'):g})",
            )
            if t.get("diff") is not None:
                grid.add_row(
                    "  limiter diff",
                    f"{fmt_count(t['diff'])} in "
                    f"[{fmt_count(t.get('min_diff'))}, {fmt_count(t.get('max_diff'))}]",
                )
            if t.get("blocked_inserters") is not None:
                grid.add_row(
                    "  blocked now",
                    f"{t['blocked_inserters']} inserting, {t['blocked_samplers']} "
                    f"sampling (waited {fmt_seconds(t['insert_blocked_seconds'])}, "
                    f"{fmt_seconds(t['sample_blocked_seconds'])} in all)",
                )
            parts.append(grid)
        if self.error:
            parts.append(Text(f"cannot read {self.address}: {self.error}", style="bold red"))
        return Group(*parts)

    def render(self, footer: bool = True, width: int | None = None) -> RenderableType:
        """The view; narrower than :data:`FULL_WIDTH` columns, without the size bars."""
        parts: list[RenderableType] = [self._title()]
        cur = self.current
        if cur is not None:
            parts.extend(self._server_lines(cur))
            parts.append(self._tables(cur, bars=width is None or width >= FULL_WIDTH))
        if self.error:
            parts.append(Text(f"cannot read {self.address}: {self.error}", style="bold red"))
        elif cur is None:
            parts.append(Text(f"connecting to {self.address} ...", style="yellow"))
        if footer:
            parts.append(Text(f"q quit · refresh every {self.interval:g} s", style="grey50"))
        return Group(*parts)

    def _title(self, label: str = "ostinato top") -> Text:
        cur = self.current or {}
        shards = cur.get("shards") or []
        t = Text.assemble((label, "bold cyan"), "  ", (self.address, "bold"))
        if cur.get("version"):
            t.append(f"  ·  v{cur['version']}")
        if len(shards) > 1:
            ok = sum("error" not in s for s in shards)
            t.append(
                f"  ·  {ok}/{len(shards)} shards answering",
                style="green" if ok == len(shards) else "bold red",
            )
        up = (cur.get("server") or {}).get("uptime_seconds")
        if up is not None:
            t.append(f"  ·  up {fmt_seconds(up)}")
        t.append("  ·  " + time.strftime("%H:%M:%S"), style="grey50")
        return t

    def _server_lines(self, cur: dict[str, Any], totals: bool = False) -> Iterator[Text]:
        server = cur.get("server") or {}
        for s in cur.get("shards") or []:
            if "error" in s:
                yield Text(f"shard {s['address']}: {s['error']}", style="bold red")
        if cur.get("source") in ("server_info", "mixed"):
            yield Text(
                "server(s) without the Stats call (an older Ostinato): blocked calls, "
                "bytes, requests and checkpoints are not shown",
                style="yellow",
            )
        if not server:
            return
        prev = (self.previous or {}).get("server") or {}
        dt = self.dt
        req_n = _requests_total(server)
        rx_n = sum((server.get("received_bytes") or {}).values())
        tx_n = sum((server.get("sent_bytes") or {}).values())
        yield Text.assemble(
            ("stored ", "grey70"),
            (fmt_bytes(server.get("chunk_bytes")), "bold"),
            (f" in {fmt_count(server.get('chunks'))} chunks", "grey70"),
            ("  ·  writer streams ", "grey70"),
            (fmt_count(server.get("writer_streams")), "bold"),
            ("  ·  shm rings ", "grey70"),
            (fmt_count(server.get("rings_mapped")), "bold"),
        )
        if totals:
            yield Text.assemble(
                ("requests ", "grey70"),
                (fmt_count(req_n), "bold"),
                ("  ·  received ", "grey70"),
                (fmt_bytes(rx_n), "bold"),
                ("  ·  sent ", "grey70"),
                (fmt_bytes(tx_n), "bold"),
            )
        else:
            req = _rate(req_n, _requests_total(prev) if prev else None, dt)
            rx = _rate(rx_n, sum((prev.get("received_bytes") or {}).values()) if prev else None, dt)
            tx = _rate(tx_n, sum((prev.get("sent_bytes") or {}).values()) if prev else None, dt)
            yield Text.assemble(
                ("requests/s ", "grey70"),
                (fmt_rate(req), "bold"),
                ("  ·  received ", "grey70"),
                (fmt_bytes(rx) + "/s" if rx is not None else "-", "bold"),
                ("  ·  sent ", "grey70"),
                (fmt_bytes(tx) + "/s" if tx is not None else "-", "bold"),
            )
        ck = server.get("checkpoint") or {}
        if ck.get("last_time") is None:
            yield Text.assemble(
                ("checkpoint ", "grey70"),
                ("none written yet", "yellow"),
                (f"  ·  failed {ck.get('failures') or 0}", "grey70"),
            )
        else:
            age = ck.get("age_seconds")
            yield Text.assemble(
                ("checkpoint ", "grey70"),
                (f"{fmt_seconds(age)} ago", "bold"),
                (
                    f" (took {fmt_seconds(ck.get('last_seconds'))}, "
                    f"{fmt_bytes(ck.get('last_bytes'))})  ·  saved {ck.get('saves')}",
                    "grey70",
                ),
                ("  ·  failed ", "grey70"),
                (str(ck.get("failures") or 0), "bold red" if ck.get("failures") else "grey70"),
            )

    def _tables(self, cur: dict[str, Any], bars: bool = True) -> Table:
        grid = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False, header_style="bold")
        shards = cur.get("shards") or []
        names = list(cur.get("tables", {})) + (
            [f" └ {s.get('address')}" for s in shards] if len(shards) > 1 else []
        )
        # Names are never cut; on a narrow terminal the numbers wrap instead.
        grid.add_column("table", no_wrap=True, min_width=max(map(len, names), default=5))
        if bars:
            grid.add_column("size", no_wrap=True)
        grid.add_column("items\n/ max_size", justify="right")
        grid.add_column("inserts\n/s", justify="right")
        grid.add_column("samples\n/s", justify="right")
        grid.add_column("samples/insert\n(target)", justify="right")
        grid.add_column(Text("limiter diff\n[min, max]"), justify="right")
        grid.add_column("writers\nblocked", justify="right")
        grid.add_column("samplers\nblocked", justify="right")
        self._bars = bars
        prev_tables = (self.previous or {}).get("tables") or {}
        shards = [s for s in cur.get("shards") or [] if "error" not in s]
        prev_shards = {s.get("address"): s for s in (self.previous or {}).get("shards") or []}
        for name, t in cur.get("tables", {}).items():
            grid.add_row(*self._row(name, t, prev_tables.get(name)))
            if len(shards) > 1:
                for s in shards:
                    st = s["tables"].get(name)
                    if st is None:
                        continue
                    ps = (prev_shards.get(s.get("address")) or {}).get("tables", {}).get(name)
                    grid.add_row(*self._row(f" └ {s.get('address')}", st, ps, dim=True))
        return grid

    def _row(
        self, name: str, t: dict[str, Any], prev: dict[str, Any] | None, dim: bool = False
    ) -> list[RenderableType]:
        dt = self.dt
        p = prev or {}
        ins = _rate(t.get("inserts"), p.get("inserts"), dt)
        smp = _rate(t.get("samples"), p.get("samples"), dt)
        target = t.get("samples_per_insert")
        lo, hi = t.get("min_diff"), t.get("max_diff")
        if lo is not None and hi is not None and min(-lo, hi) >= 1e300:
            target = None  # no ratio is kept (MinSize): nothing to compare with
        ratio: Text
        if ins and smp is not None:
            r = smp / ins
            ok = target is not None and abs(r - target) <= 0.2 * target
            ratio = Text.assemble(
                (f"{r:.2f}", "green" if ok else "default" if target is None else "yellow"),
                (f" ({target:g})" if target is not None else "", "grey62"),
            )
        else:
            ratio = Text(f"- ({target:g})" if target is not None else "-", style="grey62")
        diff = t.get("diff")
        if diff is None:
            limiter = Text("-", style="grey62")
        else:
            spi = t.get("samples_per_insert") or 1.0
            at_edge = (hi is not None and diff >= hi - max(1.0, spi)) or (
                lo is not None and diff <= lo + 1.0
            )
            limiter = Text.assemble(
                (fmt_short(diff), "yellow" if at_edge else "default"),
                (f" [{fmt_short(lo)}, {fmt_short(hi)}]", "grey62"),
            )
        cells: list[RenderableType] = [
            Text(name, style="grey62" if dim else "bold"),
            size_bar(int(t.get("size") or 0), int(t.get("max_size") or 0)),
            Text(f"{fmt_count(t.get('size'))} / {fmt_short(t.get('max_size'))}"),
            Text(fmt_rate(ins)),
            Text(fmt_rate(smp)),
            ratio,
            limiter,
            self._blocked(
                t.get("blocked_inserters"),
                t.get("insert_blocked_seconds"),
                p.get("insert_blocked_seconds"),
                "red",
            ),
            self._blocked(
                t.get("blocked_samplers"),
                t.get("sample_blocked_seconds"),
                p.get("sample_blocked_seconds"),
                "yellow",
            ),
        ]
        if dim:
            for c in cells[2:]:
                if isinstance(c, Text):
                    c.stylize("dim")
        if not self._bars:
            del cells[1]
        return cells

    def _blocked(
        self, now: int | None, secs: float | None, prev_secs: float | None, color: str
    ) -> Text:
        if now is None:
            return Text("n/a", style="grey50")
        avg = _rate(secs, prev_secs, self.dt)
        t = Text(str(now), style=f"bold {color}" if now else "green")
        if avg is not None:  # blocked seconds per second: calls blocked on average
            t.append(f" ~{avg:.1f}", style=color if avg >= 0.05 else "grey62")
        return t


# -- the live loop -------------------------------------------------------------------------------
class _Fetcher(threading.Thread):
    """Asks the server(s) every ``interval`` seconds, in the background, so that the view
    stays responsive (``q``) while a server is slow or unreachable."""

    def __init__(self, fetch: Any, interval: float):
        super().__init__(name="ostinato-top-fetch", daemon=True)
        self._fetch = fetch
        self._interval = interval
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[float, Any, str | None]] = []
        self.ready = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                values, err = self._fetch(), None
            except Exception as e:  # noqa: BLE001 - shown in the view; we keep trying
                values, err = None, f"{type(e).__name__}: {e}"
            with self.lock:
                self.results.append((t0, values, err))
            self.ready.set()
            self.stop.wait(max(0.0, self._interval - (time.monotonic() - t0)))


@contextlib.contextmanager
def _cbreak(stream: Any) -> Iterator[int | None]:
    """The terminal in cbreak mode (keys arrive at once, unechoed; Ctrl-C still interrupts),
    restored on exit; yields the file descriptor, or None if ``stream`` is no terminal."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        yield None
        return
    if not os.isatty(fd):
        yield None
        return
    import termios
    import tty

    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _quit_pressed(fd: int | None, timeout: float) -> bool:
    if fd is None:
        time.sleep(timeout)
        return False
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return False
    data = os.read(fd, 64)
    return b"q" in data or b"Q" in data or not data


def run(
    client: Any,
    address: str,
    interval: float = 1.0,
    timeout: float = 5.0,
    console: Console | None = None,
    stdin: Any = None,
    max_frames: int | None = None,
) -> int:
    """Shows the live view until ``q`` (or Ctrl-C, or ``max_frames`` refreshes); returns the
    exit status (0)."""
    from rich.live import Live

    from ostinato.ops.stats import collect

    console = console or Console()
    model = TopModel(address, interval)
    fetcher = _Fetcher(lambda: collect(client, timeout), interval)
    frames = 0
    with _cbreak(stdin if stdin is not None else sys.stdin) as fd:
        try:
            with Live(
                model.render(width=console.width),
                console=console,
                screen=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            ) as live:
                fetcher.start()
                while True:
                    if fetcher.ready.is_set():
                        with fetcher.lock:
                            results, fetcher.results = fetcher.results, []
                            fetcher.ready.clear()
                        for t0, values, err in results:
                            if values is None:
                                model.failed(err or "no answer")
                            else:
                                model.update(values, t0)
                            frames += 1
                        live.update(model.render(width=console.width), refresh=True)
                        if max_frames is not None and frames >= max_frames:
                            return 0
                    if _quit_pressed(fd, 0.1):
                        return 0
        except KeyboardInterrupt:
            return 0
        finally:
            fetcher.stop.set()
