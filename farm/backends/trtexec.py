"""The `trtexec` binary: builds and times the engine itself; farm reads what it exports.

One trtexec run per cell with `--exportTimes`, `--exportProfile` and `--exportLayerInfo`
(`--profilingVerbosity=detailed`), the cell's shapes and profile, a timing cache per GPU and
TensorRT version, and every timing-relevant flag explicit so that 10.x and 11.x measure the same
thing whatever their defaults (copies, CUDA graph, spin wait, streams, separate profiling run: as
the options say; `timing_flags`, from `farm.ingest.trt_files.TIMING_FLAGS`). The measurement
records its timing definition (`runtime_stats`): what trtexec's log says it did, else what the
command line asked of that version. Its files are read by farm.ingest's readers; the per-query
times give the samples, with statistics computed as for farm's own runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import Field

from farm.backends.base import Backend, BackendOptions, BuildStats, LayerRecord, QueryFn
from farm.backends.tensorrt import INSTALL_HINT
from farm.ingest.trt_files import TIMING_FLAGS, flag_table

if TYPE_CHECKING:
    from farm.plan import Cell


class TrtexecOptions(BackendOptions):
    """`[backends.trtexec]`: each may be a list, which makes it another sweep axis."""

    binary: str = "trtexec"
    builder_optimization_level: Annotated[int, Field(ge=0, le=5)] = 3
    workspace_mib: Annotated[int, Field(ge=1)] | None = None
    precision_flags: bool = False
    cuda_graph: bool = False
    transfers: bool = True
    spin_wait: bool = False
    streams: Annotated[int, Field(ge=1)] = 1
    timing_cache: bool = True
    extra_args: str = ""


def timing_flags(major: int, options: TrtexecOptions) -> list[str]:
    """The flags that pin trtexec's timing definition to `options` on this major version."""
    table = TIMING_FLAGS[flag_table(major)]
    flags = [table[key][getattr(options, key)] for key in ("transfers", "cuda_graph", "spin_wait")]
    return [f for f in flags if f] + [f"--infStreams={options.streams}", "--separateProfileRun"]


class TrtexecBackend(Backend):
    name = "trtexec"
    Options = TrtexecOptions
    precisions = frozenset({"fp32", "tf32", "fp16", "bf16", "int8", "fp8"})
    supports_profiles = True
    self_timed = True
    returns_outputs = False  # trtexec's outputs are not read back: no accuracy rows for its cells

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.cell: Cell | None = None
        self.cache_dir: Path | None = None
        self.facts = None
        self.profile = None
        self.layer_info = []
        self.command_line: list[str] = []  # the last trtexec run's (its timing definition: runtime_stats)

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        return "cuda"

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        from farm.backends.tensorrt import TensorRTBackend

        return TensorRTBackend.unsupported_reason(precision, options)

    def unavailable_reason(self) -> str | None:
        if shutil.which(self.options.binary) is None:
            return f"no `{self.options.binary}` on PATH: {INSTALL_HINT} (trtexec ships with it), or set backends.trtexec.binary"
        return None

    def prepare(self, cell: Cell, cache_dir: Path) -> None:
        self.cell, self.cache_dir = cell, cache_dir

    def version(self) -> str:
        out = subprocess.run([self.options.binary, "--help"], capture_output=True, text=True, timeout=60)
        match = re.search(r"TensorRT v(\d+)", out.stdout + out.stderr)
        if not match:
            raise RuntimeError(f"cannot tell the TensorRT version of {self.options.binary} from its --help")
        from farm.ingest.trt_files import _version_from_int

        return _version_from_int(match.group(1))

    def command(self, model_path: Path, precision: str, work_dir: Path, settings: Any, version: str) -> list[str]:
        """The trtexec command line for this cell (10.x and 11.x defaults aligned)."""
        cell, options = self.cell, self.options
        major = int(version.split(".")[0])
        shapes = ",".join(f"{name}:{'x'.join(map(str, shape))}" for name, shape in cell.input_shapes.items())
        cmd = [options.binary, f"--onnx={model_path}", f"--saveEngine={work_dir / 'engine.plan'}",
               f"--exportTimes={work_dir / 'times.json'}", f"--exportProfile={work_dir / 'profile.json'}",
               f"--exportLayerInfo={work_dir / 'layers.json'}", "--profilingVerbosity=detailed",
               f"--builderOptimizationLevel={options.builder_optimization_level}",
               f"--warmUp={int(settings.warmup_ms)}", f"--duration={max(settings.min_duration_ms / 1e3, 0):g}",
               f"--iterations={settings.min_iterations}", "--verbose"]
        if cell.profile is not None:
            ranges = {"min": [], "opt": [], "max": []}
            for spec in cell.model.inputs:
                sizes = {k: [] for k in ranges}
                for axis, dim in enumerate(spec.shape):
                    key = spec.profile_key(axis)  # 'batch' on the model's batch axis, wherever it is
                    size = cell.input_shapes[spec.name][axis]
                    lo, op, hi = cell.profile.ranges.get(key, (size, size, size)) if key is not None else (
                        size, size, size)
                    for k, v in zip(ranges, (lo, op, hi)):
                        sizes[k].append(str(v))
                for k in ranges:
                    ranges[k].append(f"{spec.name}:{'x'.join(sizes[k])}")
            cmd += [f"--minShapes={','.join(ranges['min'])}", f"--optShapes={','.join(ranges['opt'])}",
                    f"--maxShapes={','.join(ranges['max'])}"]
        cmd.append(f"--shapes={shapes}")
        if options.workspace_mib:
            cmd.append(f"--memPoolSize=workspace:{options.workspace_mib}M")
        if options.timing_cache and self.cache_dir is not None:
            cache = self.cache_dir / "tensorrt" / f"timing-trtexec-trt{version}.cache"
            cache.parent.mkdir(parents=True, exist_ok=True)
            cmd.append(f"--timingCacheFile={cache}")
        if precision == "fp32":
            cmd.append("--noTF32")
        cmd += timing_flags(major, options)  # the same definition on 10.x and 11.x (TIMING_FLAGS)
        if major >= 11:  # 11.x: strongly typed
            if options.precision_flags and precision in ("fp16", "bf16"):
                raise RuntimeError("trtexec 11 has no --fp16/--bf16: the precision must come from the ONNX file")
        else:  # 10.x: weakly typed unless asked
            if options.precision_flags and precision in ("fp16", "bf16"):
                cmd.append(f"--{precision}")
            else:
                cmd.append("--stronglyTyped")
        cmd += options.extra_args.split()
        return [c for c in cmd if c]

    def build(self, model_path: Path, feeds: dict[str, np.ndarray], precision: str, work_dir: Path) -> BuildStats:
        from farm.ingest.trt_files import read_layer_info_json, read_log, read_profile_json

        version = self.version()
        settings = self.cell.measurement
        cmd = self.command(model_path, precision, work_dir, settings, version)
        self.command_line = cmd
        run = subprocess.run(cmd, capture_output=True, text=True)
        (work_dir / "trtexec.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            tail = [line for line in (run.stdout + run.stderr).splitlines() if "[E]" in line][-3:]
            raise RuntimeError(f"trtexec exited with {run.returncode}: " + (" | ".join(tail) or "see its log"))
        self.facts = read_log(run.stdout + run.stderr)
        self.facts.tensorrt_version = self.facts.tensorrt_version or version
        self.work_dir = work_dir
        if (work_dir / "profile.json").is_file():
            self.profile = read_profile_json((work_dir / "profile.json").read_text())
        if (work_dir / "layers.json").is_file():
            self.layer_info = read_layer_info_json((work_dir / "layers.json").read_text())
        engine = work_dir / "engine.plan"
        facts = self.facts
        return BuildStats(build_s=facts.build_s, artifact_bytes=engine.stat().st_size if engine.is_file() else None,
                          builder_peak_memory_bytes=facts.builder_peak_device_bytes,
                          builder_peak_host_memory_bytes=facts.builder_peak_host_bytes,
                          layers_before_fusion=facts.layers_after_parsing, layers_after_fusion=facts.layers_after_fusion,
                          layers_with_reformats=facts.layers_after_reformat,
                          host_persistent_bytes=facts.host_persistent_bytes,
                          device_persistent_bytes=facts.device_persistent_bytes, scratch_bytes=facts.scratch_bytes)

    def query_fn(self, feeds: dict[str, np.ndarray]) -> QueryFn:
        raise NotImplementedError("trtexec times itself: see measure_self")

    def measure_self(self, feeds: dict[str, np.ndarray], settings: Any, batch: int) -> tuple[Any, dict[str, Any]]:
        from farm.ingest import _from_summary, _from_times
        from farm.ingest.trt_files import read_times_json

        times_path = self.work_dir / "times.json"
        if times_path.is_file():
            return _from_times(read_times_json(times_path.read_text()), batch)
        return None, _from_summary(self.facts, batch)

    def runtime_stats(self) -> dict[str, Any]:
        """The timing definition: what trtexec's "Inference Options" say it did, where they say it,
        else what the command line asked of this version."""
        from farm.ingest.trt_files import timing_from_log

        if self.facts is None or not self.command_line:
            return {}
        return timing_from_log(self.facts, self.command_line)

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        from farm.ingest import _layer_records
        from farm.layers.engine import fill_weights

        layers = self.layer_info or self.facts.layers
        fill_weights(layers, self.facts.conv_weight_shapes, self.facts.weight_shapes)
        records, _, _ = _layer_records(layers, self.profile, self.facts)
        return records

    def device_row(self) -> dict[str, Any] | None:
        """From trtexec's "Device Information" (None if its log has none)."""
        from farm.ingest import _device_row

        return _device_row(self.facts.device) if self.facts and self.facts.device.get("name") else None
