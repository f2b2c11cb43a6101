"""PyTorch-native model sources: `module:PKG.MOD:FACTORY` and `torchvision:NAME`.

The planner calls the factory once (torch seeded first, so the weights are deterministic), saves
the module's state_dict and exports it to ONNX (batch axis dynamic) into the warehouse cache:
`torch.onnx.export(dynamo=True)`, as PyTorch recommends, and the TorchScript exporter where that
fails (`native.json` says which ran; the exporters' output goes to `export.log` beside it, never to
the terminal). The file is run at batch 1 before any cell relies on its batch being dynamic: where
the exporter fixed it, `native.json` says so and ONNX engines' cells at other batches are
`unsupported` with why. Outputs are flattened to named tensors, a cache turned off
(farm.models.outputs); a transformers mixture of experts whose export fails is exported again with
experts ONNX can hold (farm.models.export.exportable_experts). ONNX engines run that file, and the
model's sha256 is the file's. A module neither
exporter takes keeps its PyTorch cells (the model's sha256 is then its weights'), and its ONNX
engines' cells are `unsupported` with the reason; a factory that raises fails that model's cells
only. Either way the rest of the sweep runs. The torch backend builds the module
from the factory again and loads the saved state_dict (`native_module`), so PyTorch cells run
the user's real nn.Module with the very weights every other engine runs. torch and the factory's
package are imported only here, only for these sources.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from farm.config import NATIVE_SOURCE, ModelSpec
from farm.errors import ConfigError, describe, first_line
from farm.files import TEMP_DIR_NAME, write_atomic
from farm.models.export import EXPORTABLE_EXPERTS, ExportFailed, batch_check, captured_output, export_onnx, exportable_experts
from farm.models.outputs import without_cache, wrap_module
from farm.records import BATCH_NAMES, BuildStats, axis_key

NATIVE_VERSION = 4  # bump when the export changes, so cached exports are made again (4: experts a failed export retries)
EXPORT_BATCH = 2  # traced at batch 2, so that no batch-1 squeeze is baked into the graph
CHECK_BATCH = 1  # and run again at batch 1 before any cell relies on its batch being dynamic
TORCHVISION_MODULE = "torchvision.models"
# torchvision's classification models, when the sweep file names no inputs: one image batch
TORCHVISION_INPUTS = {"input": (("batch", 3, 224, 224), "float32")}
ONNX_NAME, WEIGHTS_NAME, META_NAME, LOG_NAME = "model.onnx", "state_dict.pt", "native.json", "export.log"


class ModelFailed(Exception):
    """The model itself cannot be built here (its factory raised, or returned no module): its
    cells fail with this reason, and the rest of the sweep runs."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class NativeModel:
    """What planning gets of a native source: where its files are (`model.onnx`, which may be
    absent where `onnx_error` says why), and the sha256 that stands for the model in cell ids."""

    path: Path
    sha256: str | None  # None: the ONNX file's (farm.models reads it); else the weights'
    onnx_error: str | None
    inputs: list[dict[str, Any]]  # name, dtype, shape: as the ONNX file's would read
    onnx_fixed_batch: tuple[int, str] | None = None  # the one batch the ONNX file runs (the exporter fixed it), why


def factory_ref(source: str) -> tuple[str, str]:
    """(module, factory) of a native source: `torchvision:NAME` is `module:torchvision.models:NAME`."""
    match = NATIVE_SOURCE.fullmatch(source)
    if match is None:
        raise ValueError(f"not a PyTorch source: {source!r}")
    if match["name"]:
        return TORCHVISION_MODULE, match["name"]
    return match["module"], match["factory"]


def native_model(spec: ModelSpec, where: str, base_dir: Path, cache_dir: Path, seed: int) -> NativeModel:
    """The ONNX export of a native source, made once into `<cache>/native/` (written atomically,
    `native.json` and the ONNX file last). Raises ConfigError, one line, for a mistake in the sweep
    file (no such module or factory, kwargs it does not take, no input shapes), ModelFailed for a
    factory that cannot build its module; an export no exporter manages is `onnx_error`."""
    torch, factory, folder, inputs = _export_target(spec, where, base_dir, cache_dir, seed)
    module_name, factory_name = factory_ref(spec.source)
    onnx_path = folder / ONNX_NAME
    described = [{"name": name, "dtype": dtype, "shape": list(shape)} for name, shape, dtype in inputs]
    cached = exported(folder)
    if cached is not None:
        return _described(folder, cached, described)
    net = construct(factory, spec.kwargs, seed, f"{module_name}.{factory_name}", where)
    call_kwargs, notes = without_cache(net)
    wrapper = wrap_module(net, [name for name, _, _ in inputs], [], call_kwargs)
    examples = _example_inputs(torch, inputs, spec.dims, seed)
    # the module's own forward(): one that raises, exits or never returns fails its cells, not the sweep
    outputs, dropped = within_deadline(lambda: wrapper.describe(*examples),
                                       f"{spec.source}: forward() on the example inputs")
    if not outputs:
        raise ModelFailed(f"{spec.source}: forward() returned no tensor ({'; '.join(dropped) or 'nothing'}); farm "
                          "times and checks a module's tensor outputs")
    notes += dropped
    tmp_dir = cache_dir / TEMP_DIR_NAME
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    meta = {"source": spec.source, "module": module_name, "factory": factory_name, "kwargs": spec.kwargs,
            "seed": seed, "import_path": str(base_dir), "input_names": [n for n, _, _ in inputs],
            "output_names": outputs, "call_kwargs": call_kwargs, "notes": notes, "torch": torch.__version__,
            "weights_sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}
    check = batch_check(torch, wrapper, inputs, _example_inputs(torch, inputs, spec.dims, seed, CHECK_BATCH),
                        outputs, CHECK_BATCH)
    try:
        try:
            data, exporter, log, fixed = export_onnx(torch, wrapper, examples, inputs, outputs, check)
        except ExportFailed as first:
            if not (switched := exportable_experts(net)):
                raise
            try:
                data, exporter, log, fixed = export_onnx(torch, wrapper, examples, inputs, outputs, check)
            except ExportFailed as again:  # both attempts' reasons and logs
                raise ExportFailed(f"{first.reason}; again with {EXPORTABLE_EXPERTS} experts: {again.reason}",
                                   f"{first.log}\n--- again, {switched} ---\n{again.log}") from None
            notes = [*notes, switched]
            log = f"{first.log}\n--- again, {switched} ---\n{log}"
        meta["exporter"] = "; ".join([exporter, *notes])  # what the ONNX cells' build rows say of the export
        if fixed:
            meta["fixed_batch"] = [EXPORT_BATCH, fixed]
    except ExportFailed as exc:
        data, log = None, exc.log
        meta["onnx_error"] = (f"PyTorch could not export {spec.source} to ONNX ({exc.reason}); engines that run "
                              "ONNX need a file: export it yourself and give its path as the source")
    write_atomic(folder / WEIGHTS_NAME, buffer.getvalue(), tmp_dir=tmp_dir, make_parents=True)
    write_atomic(folder / LOG_NAME, log, tmp_dir=tmp_dir)
    if data is not None:
        write_atomic(onnx_path, data, tmp_dir=tmp_dir)
    write_atomic(folder / META_NAME, json.dumps(meta, indent=1, default=str), tmp_dir=tmp_dir)
    return _described(folder, meta, described)


def _export_target(spec: ModelSpec, where: str, base_dir: Path, cache_dir: Path,
                   seed: int) -> tuple[Any, Callable, Path, list[tuple[str, tuple, str]]]:
    """(torch, the factory, the cache folder of its export, its inputs): what names an export, keyed
    by everything its weights and graph depend on. ConfigError as native_model."""
    torch = _import_torch(where)
    module_name, factory_name = factory_ref(spec.source)
    factory = import_factory(module_name, factory_name, base_dir, where)
    inputs = export_inputs(spec, module_name, where)
    key = {"source": [module_name, factory_name], "kwargs": spec.kwargs, "seed": seed, "inputs": inputs,
           "torch": torch.__version__, "factory_code": _code_identity(factory, module_name),
           "import_path": str(base_dir), "version": NATIVE_VERSION}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return torch, factory, cache_dir / "native" / f"{factory_name}-{digest}", inputs


def export_folder(spec: ModelSpec, where: str, base_dir: Path, cache_dir: Path, seed: int) -> Path:
    """The cache folder native_model keeps `spec`'s export in (ConfigError as native_model)."""
    return _export_target(spec, where, base_dir, cache_dir, seed)[2]


def exported(folder: Path) -> dict[str, Any] | None:
    """The export's `native.json` where the folder holds a finished export (its ONNX file, or the
    reason none could be made), else None."""
    cached = read_native(folder / ONNX_NAME)
    return cached if cached is not None and ((folder / ONNX_NAME).exists() or cached.get("onnx_error")) else None


def _described(folder: Path, meta: dict[str, Any], inputs: list[dict[str, Any]]) -> NativeModel:
    error = meta.get("onnx_error")
    fixed = meta.get("fixed_batch")
    return NativeModel(folder / ONNX_NAME, meta.get("weights_sha256") if error else None, error, inputs,
                       (int(fixed[0]), str(fixed[1])) if fixed else None)


def _import_torch(where: str):
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(f"{where}.source: PyTorch sources need torch, which is not importable here ({exc}): "
                          "pip install torch") from None
    return torch


def import_factory(module_name: str, factory_name: str, import_path: Path | str, where: str) -> Callable:
    """The factory function, imported with `import_path` (the sweep file's folder) on sys.path."""
    if str(import_path) not in sys.path:
        sys.path.append(str(import_path))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if module_name.split(".")[0] == "torchvision" and getattr(exc, "name", "") == "torchvision":
            raise ConfigError(f"{where}.source: torchvision is not installed: pip install torchvision") from None
        raise ConfigError(f"{where}.source: cannot import {module_name!r} ({describe(exc)}): "
                          "install it, or put it on PYTHONPATH or beside the sweep file") from None
    except SystemExit as exc:  # the module's own exit() at import: not farm's to end
        raise ConfigError(f"{where}.source: importing {module_name!r} called exit({exc.code!r}); a module a sweep "
                          "imports must not exit") from None
    except Exception as exc:  # noqa: BLE001 - the module itself raised while importing
        raise ConfigError(f"{where}.source: importing {module_name!r} raised {type(exc).__name__}: "
                          f"{first_line(exc)}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:12]
        raise ConfigError(f"{where}.source: module {module_name!r} has no factory {factory_name!r}; "
                          f"its callables include: {', '.join(public) or 'none'}")
    return factory


def construct(factory: Callable, kwargs: dict[str, Any], seed: int, label: str, where: str):
    """The factory's module, built with torch seeded and in eval mode: ConfigError for kwargs the
    factory does not take, ModelFailed where it raises or returns something else."""
    import torch

    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}.kwargs: {label}() does not take {sorted(kwargs)} ({exc})") from None
    except ValueError:
        pass  # no signature to check (a builtin): the call says
    torch.manual_seed(seed)
    terminal = os.dup(2)  # planning's own word on a slow factory reaches the terminal the capture hides
    try:
        with captured_output():  # a factory's own prints (download notices, warnings) stay off the terminal
            net = within_deadline(lambda: factory(**kwargs), f"{label}(**kwargs)",
                                  lambda text: os.write(terminal, text.encode() + b"\n"))
    finally:
        os.close(terminal)
    if not isinstance(net, torch.nn.Module):
        raise ModelFailed(f"{label}() returned a {type(net).__name__}, not a torch.nn.Module")
    return net.eval()


FACTORY_DEADLINE_S = 600.0  # a factory still running after this fails its model's cells; the sweep goes on
FACTORY_NOTE_AFTER_S = 30.0  # and after this, planning says it is waiting for it


class _ProcessExit(BaseException):
    """os._exit called by a model's own code while farm plans (its argument: the exit code)."""


def _refuse_process_exit(code: int = 0) -> None:
    raise _ProcessExit(code)


def within_deadline(call: Callable[[], Any], label: str, note: Callable[[str], Any] | None = None) -> Any:
    """`call()` (a factory: the user's code, at plan time) on a thread of its own: what it returns;
    ModelFailed where it raises, calls exit(), or has not returned within FACTORY_DEADLINE_S (a
    thread cannot be stopped: it is left to finish, or to end with farm). Planning says on stderr
    when it has waited FACTORY_NOTE_AFTER_S (through `note`), so a slow factory is never a silent stop."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except SystemExit as exc:
            outcome["error"] = f"called exit({exc.code!r})"
        except _ProcessExit as exc:
            outcome["error"] = f"called os._exit({exc.args[0]!r})"
        except BaseException as exc:  # noqa: BLE001 - a factory that raises fails its own cells, never the sweep
            outcome["error"] = f"raised {describe(exc)}"

    thread = threading.Thread(target=run, name=f"farm-factory {label}", daemon=True)
    real_exit = os._exit
    os._exit = _refuse_process_exit  # the user's code ending farm's process would end the sweep with no word
    try:
        thread.start()
        thread.join(min(FACTORY_NOTE_AFTER_S, FACTORY_DEADLINE_S))
        if thread.is_alive() and FACTORY_DEADLINE_S > FACTORY_NOTE_AFTER_S:
            (note or (lambda text: print(text, file=sys.stderr, flush=True)))(
                f"farm: waiting for {label} (a model's factory, run at plan time): {FACTORY_NOTE_AFTER_S:.0f} s so "
                f"far, its cells fail at {FACTORY_DEADLINE_S:.0f} s")
            thread.join(FACTORY_DEADLINE_S - FACTORY_NOTE_AFTER_S)
    finally:
        os._exit = real_exit
    if thread.is_alive():
        raise ModelFailed(f"{label} did not return within {FACTORY_DEADLINE_S:.0f} s (farm.models.native."
                          "FACTORY_DEADLINE_S): a factory that waits on a download or a lock blocks nothing else")
    if "error" in outcome:
        raise ModelFailed(f"{label} {outcome['error']}")
    return outcome["value"]


def export_inputs(spec: ModelSpec, module_name: str, where: str) -> list[tuple[str, tuple, str]]:
    """(name, shape, dtype) of each input: the sweep file's `inputs` (a shape each), or
    torchvision's default image batch."""
    if not spec.inputs:
        if module_name == TORCHVISION_MODULE:
            return [(name, shape, dtype) for name, (shape, dtype) in TORCHVISION_INPUTS.items()]
        raise ConfigError(f"{where}.inputs: a PyTorch source needs its inputs' shapes, in forward()'s order, e.g. "
                          'inputs = { x = { shape = ["batch", 3, 224, 224] } } (dtype float32 unless given)')
    inputs = []
    for name, override in spec.inputs.items():
        if not override.shape:
            raise ConfigError(f'{where}.inputs.{name}.shape: a PyTorch source needs each input\'s shape, '
                              'e.g. shape = ["batch", 3, 224, 224]')
        inputs.append((name, tuple(override.shape), override.dtype or "float32"))
    return inputs


def _example_inputs(torch, inputs: list[tuple[str, tuple, str]], dims: dict[str, int], seed: int,
                    batch: int = EXPORT_BATCH) -> list:
    """Seeded tensors to trace the export with: dynamic dimensions at their `dims` size, the batch at 2."""
    rng = np.random.default_rng(seed)
    examples = []
    for name, shape, dtype in inputs:
        sizes = [d if isinstance(d, int) else batch if d.strip().lower() in BATCH_NAMES
                 else dims.get(axis_key(name, axis), dims.get(d, EXPORT_BATCH)) for axis, d in enumerate(shape)]
        values = rng.uniform(-1, 1, sizes) if np.dtype(_numpy_dtype(dtype)).kind == "f" else np.zeros(sizes)
        examples.append(torch.from_numpy(values.astype(_numpy_dtype(dtype))).to(getattr(torch, dtype)))
    return examples


def _numpy_dtype(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


def _code_identity(factory: Callable, module_name: str) -> dict[str, str | None]:
    """What the weights and graph depend on beyond the call: the factory's source file and the
    package's version, so that an edited factory is exported again."""
    from importlib import metadata

    identity: dict[str, str | None] = {}
    try:
        identity["file_sha256"] = hashlib.sha256(Path(inspect.getfile(factory)).read_bytes()).hexdigest()
    except (TypeError, OSError):
        identity["file_sha256"] = None
    try:
        identity["package"] = metadata.version(module_name.split(".")[0])
    except metadata.PackageNotFoundError:
        identity["package"] = None
    return identity


# --- the cell's side: the module the torch backend runs ------------------------------------------

def read_native(model_path: Path) -> dict[str, Any] | None:
    """The native source an ONNX file was exported from (its `native.json`), or None."""
    meta = model_path.parent / META_NAME
    if model_path.name != ONNX_NAME or not meta.exists():
        return None
    return json.loads(meta.read_text())


def native_module(model_path: Path, meta: dict[str, Any]):
    """The factory's module with the saved weights loaded (its cache turned off as at export),
    wrapped to take the ONNX inputs in order and return a tuple of its output tensors."""
    import torch

    where = f"model {meta['source']}"
    factory = import_factory(meta["module"], meta["factory"], meta["import_path"], where)
    net = construct(factory, meta["kwargs"], meta["seed"], f"{meta['module']}.{meta['factory']}", where)
    state = torch.load(model_path.parent / WEIGHTS_NAME, map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    call_kwargs, notes = without_cache(net)
    module = wrap_module(net, meta["input_names"], meta["output_names"], call_kwargs)
    module.notes = notes
    return module


def torch_module(model_path: Path, dtype, cache_dir: Path) -> tuple[Any, BuildStats, bool]:
    """The module the torch backend runs for a model file, its build row, and whether it is native:
    the source's own nn.Module where the file was exported from a PyTorch source, else farm's ONNX
    interpreter over the file, converted as for ONNX Runtime where older than opset 7 (farm.models.opset:
    the interpreter follows today's operators; the row's transform_summary says which)."""
    native = read_native(model_path)
    if native is not None:
        module = native_module(model_path, native)
        summary = "; ".join([f"PyTorch: native module ({native['source']})", *module.notes])
        return module, BuildStats(build_s=None, layers_before_fusion=leaf_modules(module.net),
                                  transform_summary=summary), True
    import onnx

    from farm.models.opset import runnable
    from farm.onnx_torch import build_module

    model_path, converted = runnable(model_path, cache_dir)
    model = onnx.load(str(model_path))
    module = build_module(model, dtype)
    summary = "; ".join(filter(None, [converted, "PyTorch: ONNX interpreter (farm.onnx_torch)"]))
    return module, BuildStats(build_s=None, layers_before_fusion=len(model.graph.node),
                              layers_after_fusion=len(module.nodes), transform_summary=summary), False


def leaf_modules(net) -> int:
    """How many leaf modules (layers) a module has: the build row's layers_before_fusion."""
    return sum(1 for m in net.modules() if not any(True for _ in m.children()))


def has_conv_4d(net) -> bool:
    """Whether a convolution of the module takes 4-D inputs (channels_last helps it on CUDA)."""
    import torch

    return any(isinstance(m, torch.nn.Conv2d) for m in net.modules())


