"""The `farm` command. Imports stay light here: engines load only when a cell needs them.

Each command is one module of this package with `add(add)` (its arguments; `add` makes the
subparser, with --results) and `run(args)` (its exit status); COMMANDS lists them in the order
`farm --help` does. Help texts are what `farm --help` prints (README and tests/test_docs.py quote
them); `common` holds what the commands share.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from farm import __version__
from farm.cli import check, compact, compare, dashboard, graph, history, ingest, ls, query, report, show, sweep
from farm.errors import UserError

DEFAULT_RESULTS = "results"
COMMANDS = {"sweep": sweep, "query": query, "ingest": ingest, "graph": graph, "ls": ls, "show": show,
            "dashboard": dashboard, "report": report, "check": check, "compact": compact, "compare": compare,
            "history": history}

__all__ = ["COMMANDS", "DEFAULT_RESULTS", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, in the order `farm --help` lists them."""
    parser = argparse.ArgumentParser(
        prog="farm",
        description="Benchmark farm for inference engines: sweep models x precisions x batch sizes x "
                    "profiles x backends into a Parquet warehouse, then query it.",
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                       help=f"warehouse folder (default: {DEFAULT_RESULTS}/)")
        return p

    for command in COMMANDS.values():
        command.add(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `farm` command; its exit status (2 for a user mistake, printed as one line)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except UserError as exc:
        print(f"farm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        resumes = args.command == "sweep"  # what a rerun continues; the others just start again
        print("farm: interrupted" + ("; rerun the same command to resume" if resumes else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:  # `farm query ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error as Python exits
        return 0
