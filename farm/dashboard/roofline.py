"""Roofline figures of the dashboard: per cell (Cell and Compare pages) and per layer (Cell page).

FLOPs and bytes come from the cell's ONNX model (farm.layers.flops) at the cell's input shapes,
the peaks from the device's row in farm.layers.roofline's table. The model is found where the
sweep found it: a zoo model in the warehouse's cache, else built again in memory (no file
written: the dashboard never writes), a file beside the sweep's config; either must still hash to
the cell's `model_sha256`. A zoo cell whose hash is the one this farm's zoo records for the model
(farm.models.zoo.ZOO_SHA256) is counted on the zoo's graph without weights (`structure`): the
same nodes and shapes in milliseconds, not seconds of generating and hashing the weights. Costs
are computed once per (model hash, shapes) in this process.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from farm.errors import first_line
from farm.layers.roofline import PRECISION_ELEMENT_BYTES, device_peak, roofline

if TYPE_CHECKING:
    from farm.dashboard.data import Snapshot
    from farm.layers.flops import NodeCost

CELL_COLUMNS = ["cell_id", "flops", "bytes", "time_ms", "achieved_tflops", "pct_peak_compute", "achieved_gbps",
                "pct_peak_bandwidth", "intensity", "bound", "peak", "note"]


class NoModel(LookupError):
    """The cell's ONNX model cannot be found (or is not the file the cell measured): why, in a line."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=16)
def load_model(source: str, sha256: str, cache_dir: Path, config_dirs: tuple[Path, ...]):
    """The cell's model (its graph and shapes, without the weights' data: farm.layers.flops.light_model),
    checked against its hash; NoModel saying why not."""
    from farm.layers.flops import light_model

    return light_model(_full_model(source, sha256, cache_dir, config_dirs))


def _full_model(source: str, sha256: str, cache_dir: Path, config_dirs: tuple[Path, ...]):
    import onnx

    if source.startswith("ingest:"):
        raise NoModel("an ingested TensorRT engine: farm has no ONNX model for it")
    if source.startswith("zoo:"):
        from farm.models.zoo import ZOO, ZOO_SHA256, ZOO_VERSION, structure

        name = source.removeprefix("zoo:")
        if name in ZOO and ZOO_SHA256.get((name, ZOO_VERSION)) == sha256:  # this zoo's file: its graph suffices
            return structure(name)
        cached = cache_dir / "zoo" / f"{name}-v{ZOO_VERSION}.onnx"
        data = cached.read_bytes() if cached.is_file() else None
        if data is None and name in ZOO:
            data = ZOO[name].build().SerializeToString()
        if data is None or _sha256(data) != sha256:
            raise NoModel(f"{source} is not the model this cell measured (this farm's zoo builds another file)")
        return onnx.load_from_string(data)
    for where in (*(d / source for d in config_dirs), Path(source)):
        if where.is_file():
            data = where.read_bytes()
            if _sha256(data) == sha256:
                return onnx.load_from_string(data)
    raise NoModel(f"model file {source} not found with the hash the cell recorded (looked beside the sweep's config)")


_COSTS: dict[tuple, Any] = {}  # (source, hash, shapes, where to look): the node costs, or the NoModel why not


def model_costs(source: str, sha256: str, shapes: str, cache_dir: Path,
                config_dirs: tuple[Path, ...]) -> tuple[NodeCost, ...]:
    """Every node's cost at the cell's input shapes (JSON {input: shape}); computed once per process,
    a model that cannot be found or read included (NoModel, raised again from the cache)."""
    from farm.layers.flops import node_costs

    key = (source, sha256, shapes, cache_dir, config_dirs)
    if key not in _COSTS:
        try:
            model = load_model(source, sha256, cache_dir, config_dirs)
            _COSTS[key] = tuple(node_costs(model, {k: list(v) for k, v in json.loads(shapes or "{}").items()}))
        except NoModel as exc:
            _COSTS[key] = exc
        except Exception as exc:  # noqa: BLE001 - an ONNX file onnx cannot read or infer: said on the page, never a traceback
            _COSTS[key] = NoModel(f"cannot count the model's FLOPs: {type(exc).__name__}: "
                                  f"{first_line(exc)[:200]}")
    found = _COSTS[key]
    if isinstance(found, NoModel):
        raise found
    return found


@functools.lru_cache(maxsize=1024)
def model_totals(source: str, sha256: str, shapes: str, cache_dir: Path, config_dirs: tuple[Path, ...],
                 element_bytes: float) -> tuple[int, int, int]:
    """(FLOPs, bytes, nodes of unknown shape left out) per query; NoModel as model_costs."""
    costs = model_costs(source, sha256, shapes, cache_dir, config_dirs)
    known = [c for c in costs if c.flops is not None]
    return (sum(c.flops for c in known), sum(c.bytes_at(element_bytes) for c in known), len(costs) - len(known))


FACTS_SQL = """SELECT c.cell_id, c.model_source, c.model_sha256, c.shapes, s.config_path, d.name AS device_name,
                    d.kind AS device_kind FROM cells c LEFT JOIN (SELECT DISTINCT ON (run_id) * FROM sweeps) s
                    USING (run_id) LEFT JOIN devices d USING (device_id) WHERE c.cell_id IN (SELECT unnest(?))"""


def cell_facts(snap: Snapshot, cell_ids: list[str]) -> pd.DataFrame:
    """Per cell id (the index): where its model is, its input shapes, its device's name and kind."""
    return snap.query(FACTS_SQL, [list(cell_ids)]).drop_duplicates("cell_id").set_index("cell_id")


def model_key(snap: Snapshot, r: Any) -> tuple:
    """(source, hash, shapes, cache dir, config dirs) of the cell whose `cell_facts` row is `r`."""
    if not isinstance(r.model_source, str):
        raise NoModel("no model recorded for this cell")
    dirs: list[Path] = []
    if isinstance(r.config_path, str) and r.config_path:
        config = Path(r.config_path)
        dirs = [config.parent] if config.is_absolute() else [snap.root.parent / config.parent, config.parent.resolve()]
    return r.model_source, str(r.model_sha256), r.shapes or "{}", snap.warehouse.cache_dir, tuple(dirs)


def costs_for(snap: Snapshot, r: Any) -> tuple[NodeCost, ...]:
    """The node costs of the cell whose `cell_facts` row is `r`, or NoModel."""
    return model_costs(*model_key(snap, r))


def cell_roofline(snap: Snapshot, cell_ids: Any) -> pd.DataFrame:
    """Per cell id: FLOPs and bytes per query, the time, achieved TFLOP/s and GB/s, % of the device's
    compute and bandwidth peaks, arithmetic intensity (FLOPs/byte), the roof that bounds it, and a
    note where a figure is missing (no model, no peak known). Work is per distinct model, shapes and
    precision, and per distinct device, so ten thousand cells of one model cost one count."""
    cells = snap.cell_frame.drop_duplicates("cell_id").set_index("cell_id")
    wanted = [c for c in dict.fromkeys(cell_ids) if c in cells.index]
    frame = cell_facts(snap, wanted).join(cells[["precision", "compute_mean_ms", "latency_median_ms"]]).reset_index()
    if frame.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    model_columns = ["model_source", "model_sha256", "shapes", "config_path", "precision"]
    models = frame[model_columns].drop_duplicates()
    models[["flops", "bytes", "model_note"]] = [_model_figures(snap, r) for r in models.itertuples(index=False)]
    devices = frame[["device_name", "device_kind", "precision"]].drop_duplicates()
    devices[["peak", "peak_tflops", "peak_gbps", "peak_note"]] = [
        _peak_figures(_text(n), _text(k), p) for n, k, p in devices.itertuples(index=False)]
    frame = frame.merge(models, on=model_columns, how="left").merge(
        devices, on=["device_name", "device_kind", "precision"], how="left")
    time_ms = frame.compute_mean_ms.where(frame.compute_mean_ms > 0, frame.latency_median_ms)
    frame["time_ms"] = time_ms.where(time_ms > 0)
    seconds = frame.time_ms.astype(float) / 1e3
    flops, nbytes = frame.flops.astype(float), frame.bytes.astype(float)
    frame["achieved_tflops"] = flops / seconds / 1e12
    frame["achieved_gbps"] = nbytes / seconds / 1e9
    frame["intensity"] = flops / nbytes.where(nbytes > 0)
    frame["pct_peak_compute"] = 100 * frame.achieved_tflops / frame.peak_tflops.astype(float)
    frame["pct_peak_bandwidth"] = 100 * frame.achieved_gbps / frame.peak_gbps.astype(float)
    ridge = frame.peak_tflops.astype(float) * 1e12 / (frame.peak_gbps.astype(float) * 1e9)
    frame["bound"] = np.where(frame.intensity.isna() | ridge.isna(), None,
                              np.where(frame.intensity >= ridge, "compute", "memory"))
    frame["note"] = [("; ".join(n for n in notes if isinstance(n, str)) or None)
                     for notes in zip(frame.model_note, frame.peak_note)]
    return frame[CELL_COLUMNS]


def _model_figures(snap: Snapshot, r: Any) -> tuple[Any, Any, str | None]:
    """(FLOPs, bytes, note) per query of one model at one shape and precision."""
    try:
        flops, nbytes, unknown = model_totals(*model_key(snap, r), PRECISION_ELEMENT_BYTES.get(r.precision, 4))
    except NoModel as exc:
        return None, None, str(exc)
    return flops, nbytes, (f"{unknown} nodes of unknown shape left out" if unknown else None)


def _peak_figures(name: str | None, kind: str | None, precision: str) -> tuple[Any, Any, Any, str | None]:
    """(the table's name, peak TFLOP/s at `precision`, peak GB/s, note) of a device."""
    peak = device_peak(name, kind)
    if peak is None:
        return None, None, None, f"no peak known for {name or 'this device'}" + (" (a CPU)" if kind == "cpu" else "")
    if precision not in peak.tflops:
        return peak.name, None, peak.bandwidth_gbps, f"the {peak.name} has no {precision} peak in the datasheet"
    return peak.name, peak.tflops[precision], peak.bandwidth_gbps, None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def layer_roofline(snap: Snapshot, cell_id: str, layers: pd.DataFrame) -> pd.DataFrame:
    """Per layer row: the ONNX nodes it maps to (graph-op rows by node name, TensorRT engine layers
    through their fused names), their FLOPs and bytes, and the layer's achieved figures against
    the device's peaks; `mapped` says 'yes', 'partly' (some fused names found) or 'no'. Raises
    NoModel when the cell's model cannot be found."""
    from farm.layers.flops import map_layer

    cell = snap.cell(cell_id)
    facts = cell_facts(snap, [cell_id]).iloc[0]
    costs = {c.name: c for c in costs_for(snap, facts) if c.name}
    peak = device_peak(_text(facts.device_name), _text(facts.device_kind))
    size = PRECISION_ELEMENT_BYTES.get(cell.precision, 4)
    rows = []
    for layer in layers.sort_values("layer_index").itertuples():
        nodes, mapped = map_layer(str(layer.name), costs)
        flops = sum(costs[n].flops or 0 for n in nodes) if nodes else None
        nbytes = sum(costs[n].bytes_at(size) or 0 for n in nodes) if nodes else None
        time_ms = float(layer.time_avg_ms) if pd.notna(layer.time_avg_ms) else None
        figures = roofline(flops, nbytes, time_ms, peak, cell.precision)
        rows.append({"layer_index": layer.layer_index, "name": layer.name, "type": layer.type, "mapped": mapped,
                     "onnx_nodes": len(nodes), "flops": flops, "bytes": nbytes, "time_avg_ms": time_ms,
                     "achieved_tflops": figures.achieved_tflops, "pct_peak_compute": figures.pct_peak_compute,
                     "achieved_gbps": figures.achieved_gbps, "pct_peak_bandwidth": figures.pct_peak_bandwidth,
                     "intensity": figures.intensity, "bound": figures.bound})
    return pd.DataFrame(rows)
