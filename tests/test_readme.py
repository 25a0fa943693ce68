"""The front page stays a front page: short, with an Architecture section that names every
package under src/ostinato/, and relative links that point to files that exist.

The rest of the documentation is the MkDocs site in docs/ (built by scripts/test_docs.sh).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PACKAGE = ROOT / "src" / "ostinato"
MAX_LINES = 450
ARCHITECTURE_BEFORE = 150


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _outside_code(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, line) for the lines outside fenced code blocks."""
    out, fence = [], False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append((number, line))
    return out


def _architecture() -> tuple[int, str]:
    """The Architecture section's first line number and its text (up to the next ## heading)."""
    lines = _lines()
    start = next(
        (n for n, line in _outside_code(lines) if re.match(r"##\s+Architecture\b", line)), None
    )
    assert start is not None, "README.md has no '## Architecture' section"
    end = next(
        (n for n, line in _outside_code(lines) if n > start and re.match(r"##\s", line)),
        len(lines) + 1,
    )
    return start, "\n".join(lines[start - 1 : end - 1])


def _packages() -> list[str]:
    """Every package directory directly under src/ostinato/ (with or without __init__.py)."""
    return sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and any(p.glob("*.py"))
    )


def test_readme_is_short():
    n = len(_lines())
    assert n <= MAX_LINES, (
        f"README.md has {n} lines (at most {MAX_LINES}): move details into "
        "the documentation site (docs/, mkdocs.yml)"
    )


def test_architecture_section_is_near_the_top():
    start, _ = _architecture()
    assert start < ARCHITECTURE_BEFORE, (
        f"README.md's Architecture section starts on line {start}; it must start before line "
        f"{ARCHITECTURE_BEFORE}"
    )


def test_architecture_names_every_package():
    packages = _packages()
    assert "core" in packages and "writers" in packages  # the filesystem walk works
    _, text = _architecture()
    missing = [
        name
        for name in packages
        if not re.search(rf"(?<![\w.]){re.escape(name)}/|ostinato\.{re.escape(name)}\b", text)
    ]
    assert not missing, (
        "README.md's Architecture section does not name these packages of "
        f"src/ostinato/ (as `name/`): {missing}"
    )


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _relative_links() -> list[tuple[int, str]]:
    links = []
    for number, line in _outside_code(_lines()):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for target in _LINK.findall(line):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
                continue  # http:, https:, mailto:, in-page anchors
            links.append((number, target))
    return links


def test_relative_links_point_to_files():
    links = _relative_links()
    assert links, "README.md should link into docs/ and benchmarks/"
    broken = [
        f"line {n}: {target}"
        for n, target in links
        if not (ROOT / unquote(target.split("#", 1)[0])).exists()
    ]
    assert not broken, "README.md links to files that do not exist:\n" + "\n".join(broken)


def test_link_pattern_sees_links():
    assert _LINK.findall('see [x](docs/a.md) and ![img](b.png "t")') == ["docs/a.md", "b.png"]
