"""The one interface every backend implements, after Polygraphy's runner: public methods check
the backend's state and call the `*_impl` method each backend overrides.

Life of a backend inside a cell: `build(request, feeds)` (parse, optimize, compile: timed as the
build), `measure(feeds)` (samples and the measurements row), `outputs(feeds)` (for the accuracy
check), `profile_layers(feeds, iterations)` (a separate, untimed run with the engine's own
per-layer profiler), then `close()`. A backend receives a `BuildRequest`, never the planner's cell.

What a backend can do is declared once, in its class's `capabilities`; the planner and the cell
runner read nothing else. Backends timed by farm's loop subclass `LoopTimedBackend` and return a
per-query callable; a tool that times itself (trtexec) overrides `measure_impl` instead.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from farm.measure import TimedWindow, run_timed, summarize
from farm.measurement_row import MeasurementRow
from farm.records import GRAPH_OP, BuildRequest, BuildStats, LayerRecord, MeasurementSettings, QueryFn, Samples

Feeds = dict[str, np.ndarray]
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")
# PyTorch's profiler leaves its process slower for every later host-bound query, more after each
# use (ResNet-50 eager batch 1 on an H200: 1.3x after one profiled run, 1.8x after ten; whatever
# Kineto leaves behind, TEARDOWN_CUPTI=1 removed most of it: benchmarks/carryover.py). A cell
# process that ran it times no other cell: it says so and its worker replaces it
# (farm.executor.cell_process), whatever the profiler's version does.
_torch_profiler_ran = False
_on_first_torch_profile: Callable[[], None] | None = None


def when_torch_profiler_starts(callback: Callable[[], None] | None) -> None:
    """Call `callback` when PyTorch's profiler first starts in this process (the cell process tells
    its worker then, which starts the process that will replace it)."""
    global _on_first_torch_profile
    _on_first_torch_profile = callback


def torch_profile(cuda: bool) -> Any:
    """`torch.profiler.profile` of the CPU activity (and CUDA's: CUPTI); the first in a process
    calls what `when_torch_profiler_starts` set (its cell process is then replaced)."""
    global _torch_profiler_ran
    from torch.profiler import ProfilerActivity, profile

    if not _torch_profiler_ran and _on_first_torch_profile is not None:
        _on_first_torch_profile()
    _torch_profiler_ran = True
    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))


class BackendOptions(BaseModel):
    """Base of each backend's options table (`[backends.NAME]`): unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Options added after cell ids were in use: at their default they stay out of the cell id
    # (farm.plan), so cells measured before they existed keep their ids and a rerun resumes.
    added_later: ClassVar[frozenset[str]] = frozenset()
    # Options only cells of one precision read (option -> that precision): the torch backend's int8
    # scheme. The two methods below are that one rule, for planning and for labels.
    read_only_at: ClassVar[dict[str, str]] = {}

    @classmethod
    def at_precision(cls, options: dict[str, Any], precision: str) -> dict[str, Any]:
        """`options` as a cell of `precision` runs them: an option only some precisions read is at its
        default for the others, so that a list of it does not measure their cells twice (farm.plan)."""
        return {**options, **{k: cls.model_fields[k].default for k, p in cls.read_only_at.items() if p != precision}}

    @classmethod
    def read_at(cls, options: dict[str, Any], precision: str) -> dict[str, Any]:
        """`options` less those a cell of `precision` does not read (their default is no setting of
        its): what a label names."""
        unread = {k for k, p in cls.read_only_at.items() if p != precision}
        return {k: v for k, v in options.items() if k not in unread}


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared once per backend class."""

    precisions: frozenset[str]  # what it runs with its default options (`unsupported_reason` may widen it)
    profiles: bool = False  # builds optimization profiles: the sweep's profile axis applies to it
    onnx_precision: bool = True  # fp16/int8 cells are built from farm's transformed ONNX (else it converts)
    outputs: bool = True  # returns outputs, so its cells get accuracy rows
    native_modules: bool = False  # runs a PyTorch source's own nn.Module: needs no ONNX file of it


class Backend(ABC):
    """Build, time and profile one model. Subclasses set `name`, `Options` and `capabilities`."""

    name: ClassVar[str]
    Options: ClassVar[type[BackendOptions]]
    capabilities: ClassVar[Capabilities]
    timed_window: TimedWindow | None = None  # set by `measure` for the timing loop's counted repeats
    # What the rest of farm knows of a backend, said here and nowhere else:
    libraries: ClassVar[tuple[str, ...]] = ()  # packages whose version can change its figures (provenance)
    layer_kind: ClassVar[str] = GRAPH_OP  # what its per-layer rows time, where a row does not say

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = self.Options.model_validate(options)
        self._request: BuildRequest | None = None

    # --- what the planner asks, before anything is built ------------------------------------------

    @classmethod
    def resolve_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options a cell runs with, once planning has settled choices left to the machine
        (e.g. `device = "auto"`); the cell id hashes these. Default: as given."""
        return options

    @classmethod
    def device_kind(cls, options: dict[str, Any]) -> str:
        """'cpu' or 'cuda': which kind of device a cell with these options occupies."""
        return "cpu"

    @classmethod
    def unsupported_reason(cls, precision: str, options: dict[str, Any]) -> str | None:
        """Why this backend cannot run `precision` with these options, or None when it can."""
        if precision in cls.capabilities.precisions:
            return None
        runs = "/".join(p for p in PRECISION_ORDER if p in cls.capabilities.precisions)
        return f"{cls.name} runs {runs}; {precision} is not supported by this backend"

    @classmethod
    def profile_note(cls) -> str | None:
        """Said on cells whose profile axis collapsed because the backend has no profiles."""
        if cls.capabilities.profiles:
            return None
        return f"profile axis collapsed: {cls.name} has no optimization profiles"

    @classmethod
    def build_cost(cls, options: dict[str, Any]) -> float:
        """How many times a plain eager cell's time a cell with these options is expected to take
        before any was measured (farm.executor.costs orders the longest first). Default 1."""
        return 1.0

    @classmethod
    def transform_note(cls, options: dict[str, Any], transformed: Any) -> str | None:
        """What to add to a cell's `transform_summary` about how this backend runs farm's
        transformed ONNX file (`transformed`: farm.precision's Transformed), or None."""
        return None

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here (with how to fix it), or None when it can."""
        return None

    # --- the public seam: state checked here, the work done by *_impl ----------------------------

    @property
    def request(self) -> BuildRequest:
        """What the backend was built for (RuntimeError before `build`)."""
        if self._request is None:
            raise RuntimeError(f"{self.name}: not built yet: call build() first")
        return self._request

    def build(self, request: BuildRequest, feeds: Feeds) -> BuildStats:
        """Turn the request's ONNX file into something runnable for these inputs (compilation included)."""
        if self._request is not None:
            raise RuntimeError(f"{self.name}: already built: one backend object builds one cell")
        self._request = request
        try:
            return self.build_impl(request, feeds)
        except BaseException:
            self._request = None
            raise

    def measure(self, feeds: Feeds, window: TimedWindow | None = None) -> tuple[Samples | None, MeasurementRow]:
        """(samples, measurements row) for the built artifact on `feeds`, timed as the request says.
        `window` (telemetry) is started and stopped around the counted repeats by backends timed by
        farm's loop; one that times itself (trtexec) never starts it."""
        self.request  # noqa: B018  built?
        self.timed_window = window
        try:
            return self.measure_impl(feeds)
        finally:
            self.timed_window = None

    def outputs(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """The model's outputs for `feeds`, as float32/int numpy arrays, by output name."""
        self.request  # noqa: B018
        if not self.capabilities.outputs:
            raise RuntimeError(f"{self.name} does not return outputs")
        return self.outputs_impl(feeds)

    def profile_layers(self, feeds: Feeds, iterations: int) -> list[LayerRecord]:
        """Per-layer times from the engine's own profiler, in a run separate from the timed one."""
        self.request  # noqa: B018
        return self.layers_impl(feeds, iterations)

    def close(self) -> None:
        """Release what build allocated; the backend can then build nothing more."""
        self.close_impl()

    # --- what each backend overrides ---------------------------------------------------------------

    @abstractmethod
    def build_impl(self, request: BuildRequest, feeds: Feeds) -> BuildStats:
        ...

    @abstractmethod
    def measure_impl(self, feeds: Feeds) -> tuple[Samples | None, MeasurementRow]:
        ...

    @abstractmethod
    def layers_impl(self, feeds: Feeds, iterations: int) -> list[LayerRecord]:
        ...

    def outputs_impl(self, feeds: Feeds) -> dict[str, np.ndarray]:
        raise NotImplementedError(f"{self.name} declares outputs but has no outputs_impl")

    def close_impl(self) -> None:  # noqa: B027 - an optional hook: most backends have nothing to release
        """Release what build allocated (called even when build failed half-way)."""

    @property
    def inferences_per_query(self) -> int:
        """Inferences one timed query runs (several streams run one each): throughput counts them all."""
        return 1

    def runtime_stats(self) -> dict[str, Any]:
        """Extra `measurements` columns gathered while timing (e.g. peak device memory, what the
        latency includes)."""
        return {}

    def device_row(self) -> dict[str, Any] | None:
        """The `devices` row of what the measurement ran on."""
        from farm.provenance import cpu_device_row

        return cpu_device_row()


class LoopTimedBackend(Backend):
    """A backend timed by farm's own loop (farm.measure.run_timed): it returns the callable the
    loop calls once per query; device backends return PhaseTimes from farm.device_timer."""

    def measure_impl(self, feeds: Feeds) -> tuple[Samples | None, MeasurementRow]:
        request = self.request
        device = self.device_kind(self.options.model_dump()) != "cpu"
        samples = run_timed(self.query_fn(feeds), request.measurement, self.timed_window, probe_host=device)
        return samples, summarize(samples, request.batch, request.measurement, self.inferences_per_query)

    @abstractmethod
    def query_fn(self, feeds: Feeds) -> QueryFn:
        """The callable the timing loop calls once per query, bound to `feeds` (built first)."""


def standalone_request(model_path: Path, feeds: Feeds, precision: str, work_dir: Path,
                       options: dict[str, Any] | None = None, cache_dir: Path | None = None,
                       measurement: MeasurementSettings | None = None) -> BuildRequest:
    """A BuildRequest outside a sweep (benchmarks, tests): the feeds' shapes, batch from the first
    feed's axis 0, no profiles (an engine gets one with the feeds' own shapes)."""
    shapes = {name: tuple(array.shape) for name, array in feeds.items()}
    first = next(iter(shapes.values()), ())
    return BuildRequest(model_path=Path(model_path), model_sha256="", precision=precision,
                        batch=first[0] if first else 1, input_shapes=shapes, options=options or {},
                        measurement=measurement or MeasurementSettings(), work_dir=Path(work_dir),
                        cache_dir=cache_dir, dynamic=True)
