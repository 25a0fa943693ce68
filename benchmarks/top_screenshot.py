"""Makes docs/ostinato-top.png: ``ostinato top`` in a real terminal (tmux) against a demo load,
its screen captured with colours (``tmux capture-pane -e``) and drawn to a PNG.

The load, each part in its own process: a server with three tables (a prioritized replay table
under a SampleToInsertRatio limiter, a queue, and a uniform table that only fills), periodic
checkpoints; two actors writing steps (one item per step into the replay table and into the
queue, every 4 steps into the episode table); a learner sampling batches of 64 from the replay
table and updating their priorities; a consumer draining the queue more slowly than the actors
fill it, so that it fills and holds the actors back at times.

  python benchmarks/top_screenshot.py [--out docs/ostinato-top.png] [--seconds 12]

Needs tmux and Pillow (drawing only; not an Ostinato dependency) and the DejaVu Sans Mono font
(fonts-dejavu-core on Debian).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SERVER = """
import sys, ostinato as reverb
tables = [
    reverb.Table("replay", reverb.selectors.Prioritized(0.6), reverb.selectors.Fifo(), 200_000,
                 reverb.rate_limiters.SampleToInsertRatio(8.0, 1_000, (4_000.0, 12_000.0))),
    reverb.Table.queue("actions", 2_000),
    reverb.Table("episodes", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 50_000,
                 reverb.rate_limiters.MinSize(100)),
]
ckpt = reverb.checkpointers.DefaultCheckpointer(sys.argv[1], every_seconds=4)
server = reverb.Server(tables, checkpointer=ckpt)
print("PORT", server.port, flush=True)
sys.stdin.read()
server.stop()
"""

ACTOR = """
import sys, time, numpy as np, ostinato as reverb
client = reverb.Client(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
with client.trajectory_writer(num_keep_alive_refs=4) as w:
    i = 0
    while True:
        w.append({"obs": rng.standard_normal(64).astype(np.float32), "reward": np.float32(1)})
        w.create_item("replay", 1.0, {"obs": w.history["obs"][-1]})
        w.create_item("actions", 1.0, {"obs": w.history["obs"][-1]})
        if i % 4 == 3:
            w.create_item("episodes", 1.0, {"obs": w.history["obs"][-4:],
                                            "reward": w.history["reward"][-4:]})
        i += 1
        if i % 20 == 0:
            w.flush(block_until_num_items=200)
            time.sleep(0.005)
"""

LEARNER = """
import sys, time, numpy as np, ostinato as reverb
client = reverb.Client(sys.argv[1])
while True:
    batch = client.sample_batch("replay", 64, timeout=60)
    client.update_priorities(
        "replay", batch.info.key, np.random.uniform(0.1, 2, len(batch.info.key))
    )
"""

CONSUMER = """
import sys, time, ostinato as reverb
client = reverb.Client(sys.argv[1])
while True:
    for _ in client.sample("actions", num_samples=16, timeout=60):
        pass
    time.sleep(0.02)
"""


def _py(code: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **kw)


def render_png(ansi: str, out: Path, font_size: int = 15) -> None:
    """Draws captured terminal text (with SGR colour codes) on a dark background."""
    from PIL import Image, ImageDraw, ImageFont
    from rich.color import Color
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    fonts = Path("/usr/share/fonts/truetype/dejavu")
    regular = ImageFont.truetype(str(fonts / "DejaVuSansMono.ttf"), font_size)
    bold = ImageFont.truetype(str(fonts / "DejaVuSansMono-Bold.ttf"), font_size)
    lines = ansi.rstrip("\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    texts = [Text.from_ansi(line) for line in lines]
    cols = max(len(t.plain) for t in texts)
    cw = int(round(regular.getlength("M")))
    ch = int(font_size * 1.35)
    pad = 16
    bg, fg = tuple(MONOKAI.background_color), tuple(MONOKAI.foreground_color)
    img = Image.new("RGB", (cols * cw + 2 * pad, len(texts) * ch + 2 * pad), bg)
    draw = ImageDraw.Draw(img)

    def rgb(color: Color | None, default: tuple[int, int, int]) -> tuple[int, int, int]:
        if color is None or color.is_default:
            return default
        t = color.get_truecolor(MONOKAI)  # the 16 standard colours as a terminal shows them
        return (t.red, t.green, t.blue)

    for row, text in enumerate(texts):
        y = pad + row * ch
        x = pad
        for seg in text.render(_console()):
            style = seg.style
            color = rgb(style.color if style else None, fg)
            if style is not None and style.dim:
                color = tuple((c + b) // 2 for c, b in zip(color, bg))
            if style is not None and style.bgcolor is not None and not style.bgcolor.is_default:
                draw.rectangle([x, y, x + cw * len(seg.text), y + ch], fill=rgb(style.bgcolor, bg))
            font = bold if style is not None and style.bold else regular
            for char in seg.text:
                draw.text((x, y), char, font=font, fill=color)
                x += cw
    img.save(out, optimize=True)


_CONSOLE = None


def _console():
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        _CONSOLE = Console(width=400, color_system="truecolor", force_terminal=True)
    return _CONSOLE


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "ostinato-top.png"))
    p.add_argument("--seconds", type=float, default=12.0, help="load before the capture")
    p.add_argument("--width", type=int, default=118)
    p.add_argument("--height", type=int, default=20)
    args = p.parse_args()
    tmux = shutil.which("tmux")
    if tmux is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    procs: list[subprocess.Popen] = []
    sock = f"ostinato-shot-{os.getpid()}"
    with tempfile.TemporaryDirectory() as ckpt:
        server = _py(SERVER, ckpt, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(server)
        try:
            port = int(server.stdout.readline().split()[1])
            address = f"localhost:{port}"
            procs += [_py(ACTOR, address, str(k)) for k in range(2)]
            procs += [_py(LEARNER, address), _py(CONSUMER, address)]
            time.sleep(args.seconds)
            env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
            cmd = f"{sys.executable} -m ostinato.ops top {address} --interval 1"
            subprocess.run(
                [
                    tmux,
                    "-L",
                    sock,
                    "new-session",
                    "-d",
                    "-s",
                    "shot",
                    "-x",
                    str(args.width),
                    "-y",
                    str(args.height),
                    cmd,
                ],
                check=True,
                env=env,
            )
            time.sleep(4.5)
            ansi = subprocess.run(
                [tmux, "-L", sock, "capture-pane", "-e", "-p", "-t", "shot"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            subprocess.run([tmux, "-L", sock, "send-keys", "-t", "shot", "q"], check=True)
            time.sleep(1)
        finally:
            subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True)
            for proc in procs[1:]:
                proc.kill()
            server.stdin.close()
            server.wait(30)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    (out.with_suffix(".ansi")).write_text(ansi)
    render_png(ansi, out)
    print(f"wrote {out} ({out.stat().st_size:,} bytes) and {out.with_suffix('.ansi')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
