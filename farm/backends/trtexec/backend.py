"""TrtexecBackend: one trtexec run per cell, its flags, and what its exported files say (the
package's docstring says how)."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import numpy as np

from farm.backends.base import Backend, Capabilities
from farm.backends.tensorrt.options import INSTALL_HINT, PRECISIONS, BuildsTensorRTEngines
from farm.backends.trtexec.options import TrtexecOptions, timing_flags
from farm.errors import EngineUnsupported
from farm.measurement_row import MeasurementRow
from farm.records import BuildRequest, BuildStats, LayerRecord, ProfileShapes, Samples


class TrtexecBackend(BuildsTensorRTEngines, Backend):
    """Times itself: `measure_impl` reads trtexec's own per-query times instead of farm's loop."""

    name = "trtexec"
    Options = TrtexecOptions
    # trtexec's outputs are not read back: no accuracy rows for its cells
    capabilities = Capabilities(precisions=PRECISIONS, profiles=True, outputs=False)
    options: TrtexecOptions

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.facts: Any = None  # farm.trt_output.LogFacts of the run
        self.profile: Any = None  # farm.trt_output.Profile (--exportProfile)
        self.layer_info: list = []  # farm.trt_output.EngineLayer (--exportLayerInfo)
        self.command_line: list[str] = []  # the last trtexec run's (its timing definition: runtime_stats)

    def unavailable_reason(self) -> str | None:
        if shutil.which(self.options.binary) is None:
            return (f"no `{self.options.binary}` on PATH: {INSTALL_HINT} (trtexec ships with it), "
                    "or set backends.trtexec.binary")
        return None

    def version(self) -> str:
        from farm.trt_output import version_from_int

        out = subprocess.run([self.options.binary, "--help"], capture_output=True, text=True, timeout=60)
        match = re.search(r"TensorRT v(\d+)", out.stdout + out.stderr)
        if not match:
            raise RuntimeError(f"cannot tell the TensorRT version of {self.options.binary} from its --help")
        return version_from_int(match.group(1))

    def command(self, request: BuildRequest, version: str) -> list[str]:
        """The trtexec command line for this request (10.x and 11.x defaults aligned)."""
        options, settings, work_dir = self.options, request.measurement, request.work_dir
        major = int(version.split(".")[0])
        cmd = [options.binary, f"--onnx={request.model_path}", f"--saveEngine={work_dir / 'engine.plan'}",
               f"--exportTimes={work_dir / 'times.json'}", f"--exportProfile={work_dir / 'profile.json'}",
               f"--exportLayerInfo={work_dir / 'layers.json'}", "--profilingVerbosity=detailed",
               f"--builderOptimizationLevel={options.builder_optimization_level}",
               f"--warmUp={int(settings.warmup_ms)}", f"--duration={max(settings.min_duration_ms / 1e3, 0):g}",
               f"--iterations={settings.min_iterations}", "--verbose"]
        if request.profile is not None:
            cmd += shape_flags(request.profile)
        cmd.append(f"--shapes={shapes_text(request.input_shapes)}")
        if options.workspace_mib:
            cmd.append(f"--memPoolSize=workspace:{options.workspace_mib}M")
        if options.timing_cache and request.cache_dir is not None:
            cache = request.cache_dir / "tensorrt" / f"timing-trtexec-trt{version}.cache"
            cache.parent.mkdir(parents=True, exist_ok=True)
            cmd.append(f"--timingCacheFile={cache}")
        if request.precision == "fp32":
            cmd.append("--noTF32")
        cmd += timing_flags(major, options)  # the same definition on 10.x and 11.x (TIMING_FLAGS)
        cmd += precision_flags(major, options, request.precision)
        cmd += options.extra_args.split()
        return [c for c in cmd if c]

    def build_impl(self, request: BuildRequest, feeds: dict[str, np.ndarray]) -> BuildStats:
        from farm.precision.tensorrt_qdq import tensorrt_request
        from farm.trt_output import BuildStatsFromLog, LayersFromInspectorJson, LogFactsFromTrtexecLog, ProfileFromProfileJson

        request, qdq_note = tensorrt_request(request)  # int8/fp8: a Q/DQ model its parser takes
        version = self.version()
        work_dir = request.work_dir
        cmd = self.command(request, version)
        self.command_line = cmd
        run = subprocess.run(cmd, capture_output=True, text=True)
        (work_dir / "trtexec.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            tail = [line for line in (run.stdout + run.stderr).splitlines() if "[E]" in line][-3:]
            raise RuntimeError(f"trtexec exited with {run.returncode}: " + (" | ".join(tail) or "see its log"))
        self.facts = LogFactsFromTrtexecLog(run.stdout + run.stderr)
        self.facts.tensorrt_version = self.facts.tensorrt_version or version
        if (work_dir / "profile.json").is_file():
            self.profile = ProfileFromProfileJson((work_dir / "profile.json").read_text())
        if (work_dir / "layers.json").is_file():
            self.layer_info = LayersFromInspectorJson((work_dir / "layers.json").read_text())
        engine = work_dir / "engine.plan"
        stats = BuildStatsFromLog(self.facts, engine.stat().st_size if engine.is_file() else None)
        stats.transform_summary = qdq_note
        return stats

    def measure_impl(self, feeds: dict[str, np.ndarray]) -> tuple[Samples | None, MeasurementRow]:
        """trtexec's own per-query times (`--exportTimes`), else its printed summary."""
        from farm.trt_output import MeasurementFromSummary, MeasurementFromTimes, SamplesFromTimes, TimesFromTimesJson

        times_path, batch = self.request.work_dir / "times.json", self.request.batch
        if times_path.is_file():
            times = TimesFromTimesJson(times_path.read_text())
            return SamplesFromTimes(times), MeasurementFromTimes(times, batch)
        return None, MeasurementFromSummary(self.facts, batch)

    def runtime_stats(self) -> dict[str, Any]:
        """The timing definition: what trtexec's "Inference Options" say it did, where they say it,
        else what the command line asked of this version."""
        from farm.trt_output import TimingFromLog

        if self.facts is None or not self.command_line:
            return {}
        return TimingFromLog(self.facts, self.command_line)

    def layers_impl(self, feeds: dict[str, np.ndarray], iterations: int) -> list[LayerRecord]:
        from farm.trt_output import LayerRecordsFromEngineLayers, fill_weights

        layers = self.layer_info or self.facts.layers
        fill_weights(layers, self.facts.conv_weight_shapes, self.facts.weight_shapes)
        return LayerRecordsFromEngineLayers(layers, self.profile, self.facts.layer_memory).records

    def device_row(self) -> dict[str, Any] | None:
        """From trtexec's "Device Information" (None if its log has none)."""
        from farm.trt_output import DeviceRowFromLog

        return DeviceRowFromLog(self.facts) if self.facts else None


def shapes_text(shapes: dict[str, tuple[int, ...]]) -> str:
    """trtexec's shape list: `name:AxBxC,name2:...`."""
    return ",".join(f"{name}:{'x'.join(map(str, shape))}" for name, shape in shapes.items())


def shape_flags(profile: ProfileShapes) -> list[str]:
    """--minShapes/--optShapes/--maxShapes of a swept profile (the planner's shapes, per input)."""
    flags = []
    for flag, which in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
        flags.append(f"{flag}={shapes_text({name: ranges[which] for name, ranges in profile.shapes.items()})}")
    return flags


def precision_flags(major: int, options: TrtexecOptions, precision: str) -> list[str]:
    """11.x is strongly typed; 10.x is weakly typed unless asked (--stronglyTyped)."""
    asked = options.precision_flags and precision in ("fp16", "bf16")
    if major >= 11:
        if asked:
            raise EngineUnsupported("trtexec 11 removed --fp16 and --bf16 (strongly typed: the precision comes "
                                    "from the ONNX file): leave precision_flags off, farm then converts the model")
        return []
    return [f"--{precision}"] if asked else ["--stronglyTyped"]
