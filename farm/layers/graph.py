"""Draw a cell's engine graph with graphviz: one box per (fused) layer, annotated with its type,
precision, share of the time and memory, coloured by time share; edges follow the tensors, ranked
top to bottom, so a graph of hundreds of layers is a tall column rather than a wide row.

Layers whose rows name no tensors (a profile-only row, a torch.compile kernel, the part of a
verbose log cut off before them) have no edges: they are listed in one table, in execution order,
beside the ranked graph (or alone, when no row names its tensors), never drawn as a row of
unconnected boxes.
"""

from __future__ import annotations

import html
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


def tensors(row: dict[str, Any], key: str) -> list[str]:
    """A row's `input_tensors` or `output_tensors` (a JSON list; empty when unknown)."""
    value = row.get(key)
    if not isinstance(value, str) or not value:
        return []
    try:
        names = json.loads(value)
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def has_edges(rows: list[dict[str, Any]]) -> bool:
    """Whether any layer reads a tensor another layer writes (so a ranked graph means something)."""
    produced = {t for row in rows for t in tensors(row, "output_tensors")}
    return any(t in produced for row in rows for t in tensors(row, "input_tensors"))


def engine_graph(rows: list[dict[str, Any]], title: str):
    """A graphviz.Digraph of the layers (rows of the `layers` table, in order): the layers whose
    rows name tensors ranked top to bottom along them, the others in one table in execution order."""
    import graphviz

    connected = has_edges(rows)
    ranked = [row for row in rows if connected and (tensors(row, "input_tensors") or tensors(row, "output_tensors"))]
    listed = [row for row in rows if not any(row is r for r in ranked)]
    if not ranked:
        title += f"\n{len(rows)} layers in execution order: their rows name no tensors, so no edges are known"
    graph = graphviz.Digraph(name="engine", graph_attr={"rankdir": "TB", "label": _text(title), "labelloc": "t",
                                                          "fontname": "Helvetica", "ranksep": "0.3",
                                                          "nodesep": "0.25"},
                             node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                        "fontsize": "10"})
    _ranked_layers(graph, ranked)
    if listed:
        heading = (f"{len(listed)} layers without tensor names (no edges), in execution order" if ranked
                   else "layers in execution order")
        graph.node("unconnected", _table(listed, heading), shape="plaintext", style="")
    return graph


def _ranked_layers(graph, rows: list[dict[str, Any]]) -> None:
    producer: dict[str, str] = {}
    for row in rows:
        for tensor in tensors(row, "output_tensors"):
            producer[tensor] = f"L{row['layer_index']}"
    tensor_ids: dict[str, str] = {}

    def tensor_node(tensor: str) -> str:  # plain ids: graphviz reads ':' in an id as a port
        return tensor_ids.setdefault(tensor, f"T{len(tensor_ids)}")

    for row in rows:
        node = f"L{row['layer_index']}"
        graph.node(node, _text(_label(row)), fillcolor=_heat(row.get("time_share_percent")), tooltip=_text(row["name"]))
        for tensor in tensors(row, "input_tensors"):
            source = producer.get(tensor)
            if source is None:  # an engine input
                source = tensor_node(tensor)
                graph.node(source, _text(tensor), shape="ellipse", style="filled", fillcolor="#e8eef7")
            graph.edge(source, node)
    consumed = {t for row in rows for t in tensors(row, "input_tensors")}
    for tensor, source in producer.items():
        if tensor not in consumed:  # an engine output
            graph.node(tensor_node(tensor), _text(tensor), shape="ellipse", style="filled", fillcolor="#e8eef7")
            graph.edge(source, tensor_node(tensor))


def render(rows: list[dict[str, Any]], title: str, fmt: str) -> bytes:
    """The graph as SVG, PNG or PDF bytes, or graphviz source for 'dot'."""
    graph = engine_graph(rows, title)
    if fmt == "dot":
        return graph.source.encode()
    return graph.pipe(format=fmt)


def _text(value: Any) -> str:
    """A text from the data (a layer's or tensor's name, a model's name in the title) as a DOT string
    that is only ever that text: backslashes and quotes escaped here, because the graphviz package
    leaves a quote after a backslash as it is (a name ending in a backslash would end the string
    and the rest of it become attributes: a URL, a stylesheet); never read as an HTML label."""
    import graphviz

    return graphviz.nohtml(str(value).replace("\\", "\\\\").replace('"', '\\"'))


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _label(row: dict[str, Any]) -> str:
    parts = [_short(row["name"]), f"{row.get('type') or '?'} · {(row.get('output_dtypes') or '?').split(',')[0]}"]
    if row.get("time_share_percent") is not None:
        parts.append(f"{row['time_share_percent']:.2f} % · {row['time_avg_ms']:.4f} ms")
    if row.get("total_bytes") is not None:
        parts.append(format_bytes(row["total_bytes"]))
    return "\n".join(parts)


def _table(rows: list[dict[str, Any]], heading: str) -> str:
    """An HTML-like graphviz label: one line per layer (#, name, type, precision, time, memory),
    shaded by time share; as wide as its longest (shortened) name, whatever the number of layers."""
    cell = '<TD ALIGN="LEFT" BGCOLOR="{}">{}</TD>'
    header = "".join(f"<TD><B>{h}</B></TD>" for h in ("#", "layer", "type", "precision", "time %", "ms", "memory"))
    lines = [f'<TR><TD COLSPAN="7"><B>{html.escape(heading)}</B></TD></TR>', f"<TR>{header}</TR>"]
    for row in rows:
        share, ms, size = row.get("time_share_percent"), row.get("time_avg_ms"), row.get("total_bytes")
        values = [row["layer_index"], _short(row["name"]), row.get("type") or "?",
                  (row.get("output_dtypes") or "?").split(",")[0],
                  "–" if share is None else f"{share:.2f}", "–" if ms is None else f"{ms:.4f}",
                  "–" if size is None else format_bytes(size)]
        colour = _heat(share)
        lines.append("<TR>" + "".join(cell.format(colour, html.escape(str(v))) for v in values) + "</TR>")
    return '<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(lines) + "</TABLE>>"


def _heat(share: float | None) -> str:
    """White for no time, to red for the layers that take the most."""
    if share is None:
        return "#f2f2f2"
    level = min(share / 20.0, 1.0)  # 20 % of the time or more: full red
    green_blue = int(255 - 175 * level)
    return f"#ff{green_blue:02x}{green_blue:02x}"
