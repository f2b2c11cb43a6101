"""The `farm` command line: its parser. Help texts here are what `farm --help` prints (README and
tests/test_docs.py quote them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from farm import __version__
from farm.cli.compare import add_compare

DEFAULT_RESULTS = "results"
AddCommand = Callable[[str, str], argparse.ArgumentParser]


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

    _add_sweep(add)
    _add_query_and_ingest(add)
    _add_readers(add)
    _add_check(add)
    add_compare(add)
    return parser


def _add_sweep(add: AddCommand) -> None:
    """farm sweep."""
    p = add("sweep", "Run a sweep file: build and measure every cell, resuming cells already in the warehouse.")
    p.add_argument("config", help="sweep file (TOML), e.g. configs/resnet.toml")
    p.add_argument("--force", action="store_true", help="rerun cells that are already in the warehouse")
    p.add_argument("--cells", nargs="+", default=None, metavar="ID",
                   help="run only the cells whose id starts with one of these (as `farm show` prints them); "
                        "with --force, measure them again")
    p.add_argument("--executor", default="ray", choices=["ray", "local"],
                   help="where cells run: 'ray' (default) on Ray actors, one per GPU and one per node for CPU "
                        "cells; 'local' one by one in this process, for debugging (host-bound GPU cells time "
                        "slower there: take figures with 'ray')")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="join an existing Ray cluster ('auto' or 'ray://host:port'); default: start a local Ray "
                        "bound to localhost")
    p.add_argument("--retries", type=int, default=None, metavar="N",
                   help="times a cell is retried on a fresh process when its process dies (default: 2; "
                        "--executor ray only)")
    p.add_argument("--worker-memory", default=None, metavar="SIZE",
                   help="memory a cell's processes may use before they are stopped and the cell fails as out of "
                        "memory: a share of the node's memory, divided between the workers running at once on it "
                        "(default: 80%%), a size such as 12GiB, or none (--executor ray only)")
    p.add_argument("--cell-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop a cell still running after this long and record it failed, timed out (default: "
                        "10800, three hours; 0: never; --executor ray only)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="use at most N GPUs (one actor each); default: every GPU Ray sees")


def _add_query_and_ingest(add: AddCommand) -> None:
    """farm query and farm ingest."""
    p = add("query", "Run SQL over the warehouse (tables: sweeps, cells, builds, measurements, samples, "
                     "layers, devices).")
    p.add_argument("sql", help='e.g. "SELECT model, batch, throughput_qps FROM cells JOIN measurements USING (cell_id)"')
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")

    p = add("ingest", "Import existing TensorRT output (trtexec --exportProfile/--exportTimes/--exportLayerInfo "
                      "JSON, trtexec and verbose build logs) as cells of a sweep; files are recognised by content, "
                      "others are skipped, and files that say they are of different engines are refused.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files of one engine (or of several, with --separate)")
    p.add_argument("--sweep", default="ingested", help="sweep to add the engines to (default: ingested)")
    p.add_argument("--engine", default=None, help="engine name (default: the first file's name up to its first '.')")
    p.add_argument("--separate", action="store_true", help="each file is a different engine")
    p.add_argument("--run", type=int, default=None, metavar="N",
                   help="of a log that holds several trtexec runs, ingest only run N (1 = the first); without it, "
                        "such a log given alone becomes one cell per run")


def _add_readers(add: AddCommand) -> None:
    """farm graph, ls, show, dashboard and report."""
    p = add("graph", "Draw a cell's engine graph (layers with type, precision, time share and memory).")
    p.add_argument("cell", help="cell id, or a unique prefix of one (see `farm show`)")
    p.add_argument("-o", "--output", default="engine.svg", help="output file; .svg, .png, .pdf or .dot (default engine.svg)")

    add("ls", "List the sweeps in the warehouse with their cell counts.")

    p = add("show", "Show the cells of one sweep with their figures.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    p.add_argument("--all", action="store_true",
                   help="also the cells of earlier plans of this sweep (before its sweep file changed)")

    p = add("dashboard", "Serve the comparison dashboard (Streamlit) on localhost: overview, compare, cell, diff "
                         "and a read-only SQL console over the warehouse.")
    p.add_argument("--port", type=int, default=8501, help="port on 127.0.0.1 (default: 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; 0.0.0.0 shares it with your network)")

    p = add("report", "Write a static, self-contained HTML report of one sweep (tables, charts, Pareto "
                      "frontier, speedups, top layers), for pull requests and mail.")
    p.add_argument("sweep", help="sweep name (see `farm ls`)")
    p.add_argument("-o", "--output", default="report.html", help="output file (default: report.html)")
    p.add_argument("--baseline", default=None, metavar="SERIES",
                   help="series to compute speedups against, e.g. 'fp32 · onnxruntime' "
                        "(default: fp32 on the first backend the sweep file lists, eager where it has modes)")
    p.add_argument("--against", default=None, metavar="BASE_SWEEP",
                   help="add a 'Changes against BASE_SWEEP' section: `farm compare BASE_SWEEP SWEEP`'s verdicts")
    p.add_argument("--base-results", default=None, metavar="DIR",
                   help="the warehouse holding BASE_SWEEP (default: --results)")


def _add_check(add: AddCommand) -> None:
    """farm check."""
    p = add("check", "Check every file of the warehouse: list damaged files (not whole Parquet, or not their "
                     "table's schema), orphaned files (a cell's file without its cells file, files of no table) "
                     "and temporary files interrupted runs left. Exit 1 if it found any, 0 if clean.")
    p.add_argument("--fix", action="store_true",
                   help="also resolve them (waits for no one: exits 2 while a sweep or ingest writes the warehouse): "
                        "move damaged files and files of no table to <sweep>/.damaged/ (a damaged cell file takes "
                        "its cells file along, so the next `farm sweep` measures the cell again), remove orphaned "
                        "cell files and temporary files, and bring the dashboard's consolidated copy up to date")
    p = add("compact", "Merge sweeps' per-cell files into a few large Parquet files per table (docs/warehouse.md: "
                       "Compaction), so that queries, the dashboard and resume read a few files instead of one a "
                       "cell per table. A sweep does it itself as it ends once it has 1,000 cells in per-cell files.")
    p.add_argument("sweep", nargs="?", default=None, help="the sweep to compact (default: every sweep)")
