"""Draw a cell's engine graph with graphviz: one box per (fused) layer, annotated with its type,
precision, share of the time and memory, coloured by time share; edges follow the tensors.

Layers without tensor names (rows that only a profile named) are chained in execution order.
"""

from __future__ import annotations

import json
from typing import Any

from farm.layers.memory import format_bytes

FORMATS = ("svg", "png", "pdf", "dot")


LAYER_SQL = """SELECT layer_index, name, type, output_dtypes, time_share_percent, time_avg_ms, total_bytes,
                      input_tensors, output_tensors FROM layers WHERE cell_id = ? ORDER BY layer_index"""


def layer_rows(con, cell_id: str, warehouse=None) -> list[dict[str, Any]]:
    """The cell's rows of the `layers` view of `con`; through `warehouse` (farm.warehouse.Warehouse,
    whose views `con` has), a file found damaged only while reading is skipped with a warning."""
    if warehouse is not None:
        columns, rows = warehouse.fetch(con, LAYER_SQL, [cell_id])
    else:
        cursor = con.execute(LAYER_SQL, [cell_id])
        columns, rows = [d[0] for d in cursor.description], cursor.fetchall()
    return [dict(zip(columns, row)) for row in rows]


def engine_graph(rows: list[dict[str, Any]], title: str):
    """A graphviz.Digraph of the layers (rows of the `layers` table, in order)."""
    import graphviz

    graph = graphviz.Digraph(name="engine", graph_attr={"rankdir": "TB", "label": title, "labelloc": "t",
                                                          "fontname": "Helvetica"},
                             node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                        "fontsize": "10"})
    producer: dict[str, str] = {}
    for row in rows:
        for tensor in json.loads(row.get("output_tensors") or "[]"):
            producer[tensor] = f"L{row['layer_index']}"
    tensor_ids: dict[str, str] = {}

    def tensor_node(tensor: str) -> str:  # plain ids: graphviz reads ':' in an id as a port
        return tensor_ids.setdefault(tensor, f"T{len(tensor_ids)}")

    previous = None
    for row in rows:
        node = f"L{row['layer_index']}"
        share = row.get("time_share_percent")
        graph.node(node, _label(row), fillcolor=_heat(share), tooltip=row["name"])
        inputs = json.loads(row.get("input_tensors") or "[]")
        if not inputs and not row.get("output_tensors") and previous:
            graph.edge(previous, node, style="dashed")  # no tensor names: execution order
        for tensor in inputs:
            source = producer.get(tensor)
            if source is None:  # an engine input
                source = tensor_node(tensor)
                graph.node(source, tensor, shape="ellipse", style="filled", fillcolor="#e8eef7")
            graph.edge(source, node)
        previous = node
    consumed = {t for row in rows for t in json.loads(row.get("input_tensors") or "[]")}
    for tensor, source in producer.items():
        if tensor not in consumed:  # an engine output
            graph.node(tensor_node(tensor), tensor, shape="ellipse", style="filled", fillcolor="#e8eef7")
            graph.edge(source, tensor_node(tensor))
    return graph


def render(rows: list[dict[str, Any]], title: str, fmt: str) -> bytes:
    """The graph as SVG, PNG or PDF bytes, or graphviz source for 'dot'."""
    graph = engine_graph(rows, title)
    if fmt == "dot":
        return graph.source.encode()
    return graph.pipe(format=fmt)


def _label(row: dict[str, Any]) -> str:
    name = row["name"] if len(row["name"]) <= 60 else row["name"][:57] + "..."
    parts = [name, f"{row.get('type') or '?'} · {(row.get('output_dtypes') or '?').split(',')[0]}"]
    if row.get("time_share_percent") is not None:
        parts.append(f"{row['time_share_percent']:.2f} % · {row['time_avg_ms']:.4f} ms")
    if row.get("total_bytes") is not None:
        parts.append(format_bytes(row["total_bytes"]))
    return "\n".join(parts)


def _heat(share: float | None) -> str:
    """White for no time, to red for the layers that take the most."""
    if share is None:
        return "#f2f2f2"
    level = min(share / 20.0, 1.0)  # 20 % of the time or more: full red
    green_blue = int(255 - 175 * level)
    return f"#ff{green_blue:02x}{green_blue:02x}"
