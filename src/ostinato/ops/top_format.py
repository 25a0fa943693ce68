"""Number and bar formatting for the ``ostinato top`` and ``ostinato info`` views.

Used by :mod:`ostinato.ops.top` (and re-exported there): counts, rates, byte sizes and
durations as short strings, and the size bar drawn in eighths of a cell.
"""

from __future__ import annotations

import math

from rich.text import Text

BAR_WIDTH = 12


# -- formatting ----------------------------------------------------------------------------------
def fmt_count(n: float | None) -> str:
    """1234 -> '1,234'; 12_345_678 -> '12.3M'; None -> '-'."""
    if n is None:
        return "-"
    if not math.isfinite(n):
        return "∞" if n > 0 else "-∞"
    a = abs(n)
    if a >= 1e300:
        return "∞" if n > 0 else "-∞"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if a >= div:
            return f"{n / div:.1f}{suffix}"
    if a >= 1e5:
        return f"{n / 1e3:.0f}k"
    if float(n).is_integer():
        return f"{int(n):,}"
    return f"{n:,.1f}" if a >= 10 else f"{n:.2f}"


def fmt_short(n: float | None) -> str:
    """Compact: 950 -> '950', 4000 -> '4k', 12_500 -> '12.5k', 2e6 -> '2M'."""
    if n is None:
        return "-"
    a = abs(n)
    if not math.isfinite(n) or a >= 1e300:
        return "∞" if n > 0 else "-∞"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            v = n / div
            return f"{v:.0f}{suffix}" if v == int(v) or abs(v) >= 100 else f"{v:.1f}{suffix}"
    return f"{n:.0f}" if float(n).is_integer() or a >= 10 else f"{n:.2f}"


def fmt_rate(n: float | None) -> str:
    """Per-second rates: whole numbers from 100 up, one decimal below."""
    if n is None:
        return "-"
    if abs(n) >= 1e5:
        return fmt_count(n)
    return f"{n:,.0f}" if abs(n) >= 100 else f"{n:.1f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for div, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h {m:02d}m"
    return f"{h // 24}d {h % 24}h"


_EIGHTHS = " ▏▎▍▌▋▊▉"


def size_bar(size: int, max_size: int, width: int = BAR_WIDTH) -> Text:
    """``width`` cells filled in eighths: green, yellow from 90 %, cyan when full."""
    frac = min(1.0, size / max_size) if max_size else 0.0
    eighths = int(round(frac * width * 8))
    if size > 0 and eighths == 0:
        eighths = 1  # not empty: show it
    full, part = divmod(eighths, 8)
    color = "green" if frac < 0.9 else "yellow" if frac < 1.0 else "cyan"
    bar = "█" * full + (_EIGHTHS[part] if part else "")
    return Text.assemble((bar, color), ("░" * (width - len(bar)), "grey35"))
