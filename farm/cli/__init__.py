"""The `farm` command. Imports stay light here: engines load only when a cell needs them.

`parser` builds the argument parser; `writing` holds the commands that write a warehouse (sweep,
ingest, check), `reading` those that only read it; `common` what they share.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from farm.cli.compare import cmd_compare
from farm.cli.parser import DEFAULT_RESULTS, build_parser
from farm.cli.reading import cmd_dashboard, cmd_graph, cmd_ls, cmd_query, cmd_report, cmd_show
from farm.cli.writing import cmd_check, cmd_compact, cmd_ingest, cmd_sweep
from farm.errors import UserError

COMMANDS = {"sweep": cmd_sweep, "query": cmd_query, "ingest": cmd_ingest, "graph": cmd_graph, "ls": cmd_ls,
            "show": cmd_show, "dashboard": cmd_dashboard, "report": cmd_report, "check": cmd_check,
            "compact": cmd_compact, "compare": cmd_compare}

__all__ = ["COMMANDS", "DEFAULT_RESULTS", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `farm` command; its exit status (2 for a user mistake, printed as one line)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"farm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("farm: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
