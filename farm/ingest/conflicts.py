"""Are these files one engine? What the files given as one engine say that cannot all be true of
one engine run (models, TensorRT versions, devices, shapes, kernels, builds, layers, profiles,
measurements), one phrase per fact, each naming the files on either side."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from farm.ingest.files import FileRead
from farm.trt_output import LogFacts, Profile, join_key, join_layers

Item = tuple[FileRead, Any]  # a file, and what it says of one fact
BUILD_FACTS = ("build_s", "layers_after_parsing", "layers_after_fusion", "layers_after_reformat",
               "host_persistent_bytes", "device_persistent_bytes", "scratch_bytes", "builder_peak_host_bytes",
               "builder_peak_device_bytes")


def conflicts(reads: list[FileRead]) -> list[str]:
    """What the files say that cannot all be true of one engine run, one phrase per fact: facts
    that differ first; where none does, whether the one of each kind fits the others."""
    if len(reads) < 2:
        return []
    return [found for found in _differences(reads) if found] or _misfits(reads)


def _differences(reads: list[FileRead]) -> list[str | None]:
    logs = [(r, r.log) for r in reads if r.log is not None]
    shapes = [(r, s) for r in reads if (s := _tensor_dims(r))]
    kernels = [(r, log.conv_weight_shapes) for r, log in logs if log.conv_weight_shapes]
    builds = [(r, b) for r, log in logs
              if (b := {k: getattr(log, k) for k in BUILD_FACTS if getattr(log, k) is not None})]
    return [
        _difference("different models", [(r, _basenames(log)) for r, log in logs if log.model_files],
                    lambda a, b: bool(a & b), lambda v: " / ".join(sorted(v))),
        _difference("different TensorRT versions",
                    [(r, log.tensorrt_version) for r, log in logs if log.tensorrt_version],
                    lambda a, b: a == b, lambda v: v),
        _difference("different devices", [(r, log.device) for r, log in logs if log.device],
                    lambda a, b: all(a[k] == b[k] for k in ("name", "compute_capability", "uuid") if k in a and k in b),
                    lambda v: str(v.get("name") or v.get("uuid"))),
        _difference("different tensor shapes", shapes, _agree, _table(shapes, _dims)),
        _difference("different convolution kernels", kernels, _agree, _table(kernels, _dims)),
        _difference("different builds", builds, _agree, _table(builds, lambda k, v: f"{k.replace('_', ' ')} {v}")),
        _difference("different layers", _layer_sources(reads),
                    lambda a, b: _is_part({join_key(x.name) for x in a}, {join_key(x.name) for x in b}),
                    lambda v: f"{len(v)} layers"),
        _difference("different per-layer profiles", _profiles(reads), _same_profile,
                    lambda v: f"{len(v.rows)} layers" + (f" over {v.count} iterations" if v.count is not None else "")),
        _difference("different performance summaries", _summaries(reads), lambda a, b: a == b,
                    lambda v: f"{v[0]} qps" if v[0] is not None else
                    f"latency median {v[1].get('latency', {}).get('median')} ms"),
        _difference("different per-query times", _times(reads), lambda a, b: a == b, lambda v: f"{len(v)} queries"),
    ]


def _misfits(reads: list[FileRead]) -> list[str]:
    """One of each kind, agreeing where they overlap: do they fit together as one run?"""
    found = []
    times, summaries = _times(reads), _summaries(reads)
    if times and summaries:
        measured = float(np.median([t["latencyMs"] for t in times[0][1]]))
        printed = summaries[0][1][1].get("latency", {}).get("median")
        if printed and not (1 / 1.5 <= measured / printed <= 1.5):
            found.append(f"not one run: the per-query times ({times[0][0].path.name}) have a median latency of "
                         f"{measured:.4g} ms, the performance summary ({summaries[0][0].path.name}) {printed} ms")
    layer_sources, profiles = _layer_sources(reads), _profiles(reads)
    if times and profiles:
        found += _profile_against_times(times[0], profiles[0])
    if layer_sources and profiles:
        layer_file, layers = max(layer_sources, key=lambda item: len(item[1]))  # what combine() uses
        profile_file, profile = profiles[0]
        matched, _, _ = join_layers(layers, [row.name for row in profile.rows])
        if layer_file is not profile_file and len(matched) * 2 < min(len(layers), len(profile.rows)):
            found.append(f"different layers: only {len(matched)} of the {len(profile.rows)} profile rows of "
                         f"{profile_file.path.name} name one of the {len(layers)} layers of {layer_file.path.name}")
    return found


# The layers of a profile add up to the engine's compute time per query (a separate profiling run
# is slower, by up to about 1.5x where the profiler's synchronization shows); this many times it
# and more, they are another engine's layers (a profile of one model beside the times of another
# reached 17x to 31x).
PROFILE_OVER_COMPUTE_LIMIT = 3.0


def _profile_against_times(times: Item, profiles: Item) -> list[str]:
    """Do the profile's layers take about the per-query times' compute time? (None can tell where
    either is empty or has no time.)"""
    (times_file, records), (profile_file, profile) = times, profiles
    computes = [r.get("computeMs", r["latencyMs"]) for r in records]
    compute = float(np.median(computes)) if computes else 0.0
    summed = sum(row.average_ms for row in profile.rows if row.average_ms is not None)
    if compute <= 0 or summed <= 0 or summed / compute <= PROFILE_OVER_COMPUTE_LIMIT:
        return []
    return [f"not one engine: the layers of {profile_file.path.name} add up to {summed:.4g} ms per query, "
            f"{summed / compute:.1f}x the median compute time of {times_file.path.name} ({compute:.4g} ms)"]


def _difference(what: str, items: list[Item], same: Callable[[Any, Any], bool],
                show: Callable[[Any], str]) -> str | None:
    """Files that agree go in one class; more than one class is a conflict, shown one file per
    class (for tables: the entries that differ)."""
    classes: list[list[Item]] = []
    for item in items:
        home = next((c for c in classes if all(same(item[1], other) for _, other in c)), None)
        if home is None:
            classes.append([item])
        else:
            home.append(item)
    if len(classes) < 2:
        return None
    return f"{what}: " + " vs ".join(f"{show(c[0][1])} ({_names(r for r, _ in c)})" for c in classes)


def _agree(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _table(items: list[Item], show: Callable[[str, Any], str]) -> Callable[[dict], str]:
    """Shows the entries that differ between the files (those of the first such pair)."""
    keys = next(([k for k in a if k in b and a[k] != b[k]] for (_, a), (_, b) in itertools.combinations(items, 2)
                 if not _agree(a, b)), [])
    return lambda v: ", ".join(show(k, v[k]) for k in keys[:2] if k in v)


def _dims(name: str, value: list[int]) -> str:
    return f"{name} {'x'.join(map(str, value))}"


def _basenames(log: LogFacts) -> frozenset[str]:
    return frozenset(Path(m).name for m in log.model_files)


def _layer_sources(reads: list[FileRead]) -> list[Item]:
    return [(r, r.layers) for r in reads if r.layers] + [(r, r.log.layers) for r in reads if r.log and r.log.layers]


def _profiles(reads: list[FileRead]) -> list[Item]:
    return [(r, r.profile) for r in reads if r.profile] + [(r, r.log.profile) for r in reads if r.log and r.log.profile]


def _summaries(reads: list[FileRead]) -> list[Item]:
    return [(r, (r.log.throughput_qps, r.log.summary)) for r in reads
            if r.log and (r.log.summary or r.log.throughput_qps)]


def _times(reads: list[FileRead]) -> list[Item]:
    return [(r, r.times) for r in reads if r.times]



def _tensor_dims(read: FileRead) -> dict[str, list[int]]:
    """Tensor name -> dimensions, where a file gives them concretely (inference shapes, layers)."""
    dims: dict[str, list[int]] = {}
    layers = read.layers or (read.log.layers if read.log else [])
    for layer in layers:
        for tensor in layer.inputs + layer.outputs:
            if tensor.dims and tensor.name:
                dims.setdefault(tensor.name, tensor.dims)
    for tensor in read.io_tensors:
        if tensor.dims:
            dims.setdefault(tensor.name, tensor.dims)
    if read.log:
        dims.update(read.log.input_shapes)
    return dims


def _is_part(a: set[str], b: set[str]) -> bool:
    """One list of layers is (a cut copy of) the other."""
    return a <= b or b <= a


def _same_profile(a: Profile, b: Profile) -> bool:
    """The same profile, as two files print it (a JSON's digits and a table's rounding)."""
    if [r.name for r in a.rows] != [r.name for r in b.rows]:
        return False
    return all(abs(x.average_ms - y.average_ms) <= max(1e-4, 1e-3 * abs(x.average_ms)) for x, y in zip(a.rows, b.rows))


def _names(reads: Iterable[FileRead]) -> str:
    return ", ".join(r.path.name for r in reads)
