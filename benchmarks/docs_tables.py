"""Every table of measured figures in README.md and docs/*.md that a command makes from committed
results files: each sits between `<!-- NAME: begin -->` and `<!-- NAME: end -->`, its first line
the command that made it (`<!-- made by `python3 benchmarks/...`: edit there -->`).

    python3 benchmarks/docs_tables.py            # make every table again from its files
    python3 benchmarks/docs_tables.py --check    # exit 1, naming each table that differs

The test suite runs the check, so a figure in the docs cannot drift from its results file."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- ([a-z0-9-]+): begin -->\n)(<!-- made by `([^`]+)`: edit there -->\n.*?)(<!-- \2: end -->)",
                   re.DOTALL)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def made(command: str) -> str:
    """What `command` (python3 benchmarks/SCRIPT ...) prints, run from the checkout's root."""
    argv = shlex.split(command)
    if argv[:1] != ["python3"] or not argv[1:2] or not argv[1].startswith("benchmarks/"):
        raise ValueError(f"not a benchmarks/ script: {command}")
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{command}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def tables(docs: list[Path] | None = None) -> list[tuple[Path, str, str, str]]:
    """(document, table name, its command, the text it holds now) of every generated table of `docs`
    (default: README.md and docs/*.md)."""
    return [(doc, m[2], m[4], m[3]) for doc in docs or documents() for m in BLOCK.finditer(doc.read_text())]


def stale(docs: list[Path] | None = None) -> list[str]:
    """'document: name' of each table whose command prints something else now."""
    return [f"{doc.name}: {name}" for doc, name, command, held in tables(docs) if made(command) != held]


def refresh() -> list[str]:
    """Make every table again; the names of those that changed."""
    changed = []
    for doc in documents():
        text = doc.read_text()
        new_text = BLOCK.sub(lambda m, doc=doc: _again(m, doc, changed), text)
        if new_text != text:
            doc.write_text(new_text)
    return changed


def _again(m: re.Match, doc: Path, changed: list[str]) -> str:
    new = made(m[4])
    if new != m[3]:
        changed.append(f"{doc.name}: {m[2]}")
    return m[1] + new + m[5]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    args = parser.parse_args()
    names = stale() if args.check else refresh()
    for name in names:
        print(f"{'differs' if args.check else 'made again'}: {name}")
    print(f"{len(tables())} generated tables")
    return 1 if args.check and names else 0


if __name__ == "__main__":
    raise SystemExit(main())
