"""`farm graph CELL`: draw a cell's engine graph."""

from __future__ import annotations

import argparse
from pathlib import Path

from farm.cli.common import AddCommand, connect
from farm.errors import UserError


def add(add: AddCommand) -> None:
    """The `graph` subparser (`add` gives it --results)."""
    p = add("graph", "Draw a cell's engine graph (layers with type, precision, time share and memory).")
    p.add_argument("cell", help="cell id, or a unique prefix of one (see `farm show`)")
    p.add_argument("-o", "--output", default="engine.svg", help="output file; .svg, .png, .pdf or .dot (default engine.svg)")


def run(args: argparse.Namespace) -> int:
    import shutil

    from farm.layers.graph import FORMATS, layer_rows, render
    from farm.warehouse import write_file

    fmt = Path(args.output).suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise UserError(f"--output {args.output}: the file name must end in one of .{', .'.join(FORMATS)}")
    if fmt != "dot" and shutil.which("dot") is None:
        raise UserError("graphviz's `dot` program is not installed (apt-get install graphviz, brew install graphviz); "
                        "or write graphviz source with -o engine.dot")
    warehouse, con = connect(args.results)
    _, matches = warehouse.fetch(
        con, "SELECT cell_id, model, precision, batch, backend FROM cells WHERE cell_id LIKE ? || '%'", [args.cell])
    if not matches:
        raise UserError(f"no cell id starts with {args.cell!r} in {args.results}/: `farm show SWEEP` lists the cells "
                        "and their ids")
    if len(matches) > 1:
        raise UserError(f"{len(matches)} cells match {args.cell!r}: give a longer prefix of the cell id (farm show)")
    cell_id, model, precision, batch, backend = matches[0]
    rows = layer_rows(con, cell_id, warehouse)
    if not rows:
        raise UserError(f"cell {cell_id[:8]} has no per-layer rows to draw")
    title = f"{model} · {precision} · batch {batch if batch is not None else '?'} · {backend} · cell {cell_id[:8]}"
    write_file(Path(args.output), render(rows, title, fmt))
    from farm.layers.graph import has_edges
    note = "" if has_edges(rows) else ": their rows name no tensors, listed in execution order"
    print(f"wrote {args.output} ({len(rows)} layers{note})")
    return 0
