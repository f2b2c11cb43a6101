"""`farm dashboard`: serve the Streamlit dashboard over the warehouse on localhost."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from farm.cli.common import AddCommand
from farm.errors import UserError


def add(add: AddCommand) -> None:
    """The `dashboard` subparser (`add` gives it --results)."""
    p = add("dashboard", "Serve the comparison dashboard (Streamlit) on localhost: pages Overview, Compare, Cell, "
                         "Diff, Regressions, History and SQL (a read-only console over the warehouse).")
    p.add_argument("--port", type=int, default=8501, help="port on 127.0.0.1 (default: 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; 0.0.0.0 shares it with your network)")


def run(args: argparse.Namespace) -> int:
    import socket

    from farm.dashboard import require_dashboard_extra, serve

    require_dashboard_extra("farm dashboard", "streamlit")
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: give a port from 1 to 65535")
    try:  # a port in use or an address not of this machine: one line now, not Streamlit's traceback
        family = socket.AF_INET6 if ":" in args.address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.address, args.port))
    except OSError as exc:
        raise UserError(f"cannot serve on {args.address}:{args.port}: {exc.strerror or exc} "
                        "(pick another --port, or an --address of this machine such as 127.0.0.1)") from None
    results = Path(args.results).resolve()
    if not results.is_dir():
        print(f"farm: note: no warehouse at {args.results}/ yet; the dashboard will say what to run", file=sys.stderr)
    print(f"farm dashboard: loading the warehouse {results}", file=sys.stderr)
    return serve(results, args.address, args.port,  # in this process: the server ends when farm does
                 lambda: print(f"farm dashboard: http://{args.address}:{args.port}/  (Ctrl-C stops it)",
                               file=sys.stderr, flush=True))
