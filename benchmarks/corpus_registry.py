"""The corpus no one picks: the models the libraries' own registries list, enumerated at run time.

    from corpus_registry import enumerate_corpus
    entries, left_out = enumerate_corpus(cache)      # what this machine's libraries list

Each library is asked for its own list, and nothing is chosen by hand beyond the sizes:
- torchvision: every name of `torchvision.models.list_models(module)` for its classification,
  detection, segmentation, video, optical-flow and quantization modules (random weights);
- timm: one model per family (the module `timm` files it under), the one with fewest parameters;
- transformers: one model per model type of its auto-mapping (the causal-LM class where the type
  has one, else the base model), built from the type's own config shrunk to a few small layers;
- onnx: every model file its wheel ships for its backend tests (`light`, `simple`,
  `pytorch-converted`, `pytorch-operator`; its `real` folders hold only download addresses);
- scikit-learn through skl2onnx: every estimator `sklearn.utils.all_estimators` lists, fitted on
  seeded data and converted (trees, linear models, ...).
A PyTorch model is kept when one forward pass at batch 1 with the inputs guessed here runs on the
CPU (`precheck`): a model that does not run with them is the corpus's guess at fault, not farm's,
and is listed as left out with the error. Everything else that a library lists but cannot be had
here (not installed, does not build, cannot be converted) is left out with why. What is kept is
written with its library's version (`write_listing`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import json
import os
import random
import signal
import warnings
from pathlib import Path

from farm.errors import describe
from farm.files import write_atomic

# each library's models are named with its prefix, so that a name (a model left out too) says its library
PREFIXES = {"onnx": "onnx-", "scikit-learn": "sklearn-", "transformers": "hf-", "torchvision": "tv-", "timm": "timm-"}
TEXT_LENGTH = 16
PRECHECK_S = 20  # one forward of a tiny model; longer is a model that waits on something
TORCHVISION_MODULES = ("", "detection", "segmentation", "video", "optical_flow", "quantization")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One corpus model: its name, family and library (with version), its source as model_corpus's
    CORPUS gives it, and its table in the sweep file beyond `source`."""

    name: str
    family: str
    library: str
    version: str
    source: dict
    table: str = ""


def named(library: str, rest: str) -> str:
    """A corpus model's name: its library's prefix (PREFIXES), then `rest`."""
    return PREFIXES[library] + rest


def library_of(name: str) -> str | None:
    """The library a corpus model's name says it came from."""
    return next((library for library, prefix in PREFIXES.items() if name.startswith(prefix)), None)


def loads(module: str) -> str | None:
    """Why `module` cannot be used here, or None."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - PyPI's torchvision beside a CPU torch build fails to load
        return f"{module} does not load here ({describe(exc)[:160]})"
    return None


def toml_value(value) -> str:
    return json.dumps(value)  # TOML's strings, integers, floats and arrays read as JSON writes them


def inputs_table(inputs: list[tuple[str, list, str]]) -> str:
    """The `inputs` line of a model table: each input's shape and dtype, in forward()'s order."""
    parts = [f"{name} = {{ shape = {toml_value(shape)}, dtype = {toml_value(dtype)} }}" for name, shape, dtype in inputs]
    return "inputs = { " + ", ".join(parts) + " }"


def kwargs_table(kwargs: dict) -> str:
    return "kwargs = { " + ", ".join(f"{k} = {toml_value(v)}" for k, v in kwargs.items()) + " }"


# --- onnx: the models its wheel ships for its own backend tests --------------------------------

def onnx_test_models() -> tuple[list[Entry], dict[str, str]]:
    why = loads("onnx")
    if why:
        return [], {"onnx": why}
    import onnx

    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    entries, left_out = [], {}
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        for case in sorted(p for p in folder.iterdir()):
            files = sorted(case.glob("*.onnx")) if case.is_dir() else [case] if case.suffix == ".onnx" else []
            name = named("onnx", f"{folder.name}-{case.stem.removeprefix('test_').removeprefix('light_')}")
            if case.is_dir() and not files:
                left_out[name] = "the onnx wheel ships only its download address (data.json)"
            for path in files:
                entries.append(Entry(name, f"onnx backend test model ({folder.name})", "onnx", onnx.__version__,
                                     {"kind": "onnx-file", "path": str(path)}))
    return entries, left_out


# --- scikit-learn through skl2onnx ---------------------------------------------------------------

def sklearn_models(cache: Path) -> tuple[list[Entry], dict[str, str]]:
    """Every estimator scikit-learn lists that skl2onnx converts, fitted on seeded data (8 features;
    classifiers 3 classes), as ONNX files under `cache`."""
    for module in ("sklearn", "skl2onnx"):
        why = loads(module)
        if why:
            return [], {module: why}
    import numpy as np
    import skl2onnx
    import sklearn
    from sklearn.utils import all_estimators

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    target = x @ rng.normal(size=8).astype(np.float32)
    entries, left_out = [], {}
    for kind in ("classifier", "regressor", "transformer"):
        for name, cls in all_estimators(type_filter=kind):
            model_name = named("scikit-learn", name)
            path = cache / "models" / model_name / "model.onnx"
            if not path.is_file():
                why = _convert(cls, kind, x, labels, target, path)
                if why:
                    left_out[model_name] = why
                    continue
            entries.append(Entry(model_name, f"scikit-learn {kind} (skl2onnx {skl2onnx.__version__})", "scikit-learn",
                                 sklearn.__version__, {"kind": "onnx-file", "path": str(path)}))
    return entries, left_out


def _convert(cls, kind: str, x, labels, target, path: Path) -> str | None:
    """Fit and convert one estimator into `path`; why not, or None."""
    from skl2onnx import to_onnx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator = cls()
            estimator.fit(x, labels if kind == "classifier" else target if kind == "regressor" else None)
            model = to_onnx(estimator, x[:1], target_opset=17)
    except Exception as exc:  # noqa: BLE001 - an estimator that needs arguments, or that skl2onnx lacks, is left out
        return f"does not fit with its defaults, or skl2onnx cannot convert it: {describe(exc)[:200]}"
    write_atomic(path, model.SerializeToString(), make_parents=True)  # a run killed mid-write leaves no half model
    return None


# --- PyTorch libraries: transformers, torchvision, timm --------------------------------------------

def transformers_models() -> tuple[list[Entry], dict[str, str]]:
    """One model per model type: the causal-LM class where the type has one (a decoder with its
    cache), else the base model; its main input guessed from the class (`main_input_name`)."""
    why = loads("transformers")
    if why:
        return [], {"transformers": why}
    import transformers

    # guessing inputs builds configs, and transformers logs each one it cannot set a size on with
    # the whole config (two of them were 248 lines of a GPU run's log): its errors are not the corpus's
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    try:
        return _transformers_entries(transformers)
    finally:
        transformers.logging.set_verbosity(previous)


def _transformers_entries(transformers) -> tuple[list, dict[str, str]]:
    from transformers.models.auto import modeling_auto

    entries, left_out = [], {}
    for model_type, base in modeling_auto.MODEL_MAPPING_NAMES.items():
        name = named("transformers", model_type)
        head = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        class_name = head if isinstance(head, str) else base if isinstance(base, str) else None
        cls = getattr(transformers, class_name, None) if class_name else None
        if cls is None:
            left_out[name] = "transformers lists no single model class for it"
            continue
        try:
            inputs = hf_inputs(cls, model_type)
        except ImportError as exc:  # a placeholder class: the model needs a library not installed here
            left_out[name] = f"needs what is not installed here: {describe(exc)[:160]}"
            continue
        if inputs is None:
            left_out[name] = f"{class_name}'s main input ({cls.main_input_name}) has no shape guessed here"
            continue
        kwargs = {"model_type": model_type, "class_name": class_name, "names": [n for n, _, _ in inputs]}
        entries.append(Entry(name, f"transformers {'decoder' if head else 'model'} ({class_name})",
                             "transformers", transformers.__version__,
                             {"kind": "factory", "factory": "hf_small", "needs": "transformers"},
                             kwargs_table(kwargs) + "\n" + inputs_table(inputs)))
    return entries, left_out


def hf_inputs(cls, model_type: str) -> list[tuple[str, list, str]] | None:
    """The inputs a model class is called with here: its main input, and the decoder's ids for an
    encoder-decoder; None where its main input is none of those guessed."""
    main = getattr(cls, "main_input_name", "input_ids")
    shapes = {"input_ids": (["batch", TEXT_LENGTH], "int64"), "pixel_values": (["batch", 3, 224, 224], "float32"),
              "input_values": (["batch", 16000], "float32"), "input_features": (["batch", 80, 3000], "float32")}
    if not isinstance(main, str) or main not in shapes:
        return None
    parameters = inspect.signature(cls.forward).parameters
    # the main input; the decoder's ids of an encoder-decoder; text and image together where the
    # forward takes both (CLIP-like); and any other input it requires that has a shape here
    wanted = {main, *(n for n in ("decoder_input_ids",) if n in parameters)}
    if {"input_ids", "pixel_values"} <= set(parameters):
        wanted |= {"input_ids", "pixel_values"}
    wanted |= {n for n, p in parameters.items() if p.default is inspect.Parameter.empty and n in shapes}
    shapes["decoder_input_ids"] = shapes["input_ids"]
    return [(name, *shapes[name]) for name in parameters if name in wanted]


def torchvision_models() -> tuple[list[Entry], dict[str, str]]:
    why = loads("torchvision")
    if why:
        return [], {"torchvision": why}
    import torchvision
    from torchvision import models

    entries = []
    for module_name in TORCHVISION_MODULES:
        module = getattr(models, module_name) if module_name else models
        for name in models.list_models(module=module):
            image = ["batch", 3, 224, 224]
            inputs = {"": [("x", image, "float32")], "detection": [("images", ["batch", 3, 320, 320], "float32")],
                      "segmentation": [("x", image, "float32")], "video": [("x", ["batch", 3, 16, 224, 224], "float32")],
                      "optical_flow": [("image1", ["batch", 3, 128, 128], "float32"),
                                       ("image2", ["batch", 3, 128, 128], "float32")],
                      "quantization": [("x", image, "float32")]}[module_name]
            kwargs = {"name": name, "quantize": module_name == "quantization"}
            entries.append(Entry(named("torchvision", name), f"torchvision {module_name or 'classification'}", "torchvision",
                                 torchvision.__version__, {"kind": "factory", "factory": "torchvision_model",
                                                           "needs": "torchvision"},
                                 kwargs_table(kwargs) + "\n" + inputs_table(inputs)))
    return entries, {}


def timm_models() -> tuple[list[Entry], dict[str, str]]:
    """One timm model per family (the module timm files it under), the one with fewest parameters
    (counted on the meta device: nothing is allocated)."""
    why = loads("timm")
    if why:
        return [], {"timm": why}
    import timm
    import torch

    families = {family: timm.list_models(module=family) for family in timm.list_modules()}
    entries, left_out = [], {}
    for family, names in sorted(families.items()):
        sized = []
        for name in names:
            try:
                with torch.device("meta"):
                    sized.append((sum(p.numel() for p in timm.create_model(name).parameters()), name))
            except Exception:  # noqa: BLE001 - a model that does not build with defaults is not the smallest
                continue
        if not sized:
            left_out[named("timm", family)] = "no model of the family builds with its defaults"
            continue
        _, smallest = min(sized)
        size = timm.models.get_pretrained_cfg_value(smallest, "input_size") or (3, 224, 224)
        entries.append(Entry(named("timm", smallest), f"timm {family}", "timm", timm.__version__,
                             {"kind": "module", "module": "timm", "factory": "create_model", "needs": "timm"},
                             kwargs_table({"model_name": smallest}) + "\n" +
                             inputs_table([("x", ["batch", *size], "float32")])))
    return entries, left_out


def precheck(entry: Entry) -> str | None:
    """Why a PyTorch entry does not run one forward pass at batch 1 on the CPU with the inputs guessed
    here, or None: a guess at fault is the corpus's, not farm's, and such a model is left out."""
    import tomllib

    import numpy as np
    import torch

    table = tomllib.loads(entry.table)
    kwargs, inputs = table.get("kwargs", {}), table.get("inputs", {})
    if entry.source["kind"] == "factory":
        import corpus_factories

        factory = getattr(corpus_factories, entry.source["factory"])
    else:
        factory = getattr(__import__(entry.source["module"], fromlist=["_"]), entry.source["factory"])
    rng = np.random.default_rng(0)
    if entry.library == "transformers":
        import transformers

        transformers.logging.set_verbosity_error()  # its config warnings are the corpus's sizes, not news

    def expired(*_):
        raise TimeoutError(f"one forward pass took over {PRECHECK_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(PRECHECK_S)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            model = factory(**kwargs).eval()
            tensors = [torch.from_numpy(rng.integers(0, 2, [1 if d == "batch" else d for d in spec["shape"]]))
                       if spec.get("dtype") == "int64" else
                       torch.from_numpy(rng.standard_normal([1 if d == "batch" else d for d in spec["shape"]],
                                                            dtype=np.float32)) for spec in inputs.values()]
            model(*tensors)
    except Exception as exc:  # noqa: BLE001 - any error of the guessed call leaves the model out, with it
        return f"does not run with the inputs guessed here: {describe(exc)[:200]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return None


# --- the whole corpus -----------------------------------------------------------------------------

def enumerate_corpus(cache: Path, libraries: list[str] | None = None, check: bool = True) -> tuple[list[Entry], dict]:
    """(entries, left out: name -> why) of every library asked (default: all), PyTorch entries
    prechecked once (the verdicts kept in `cache`/precheck.json, so a rerun asks again only for
    models not seen before)."""
    # random weights, nothing to download: a hub lookup (timm asks for some models' configurations)
    # would wait through its retries on a host without network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sources = {"onnx": onnx_test_models, "scikit-learn": lambda: sklearn_models(cache),
               "transformers": transformers_models, "torchvision": torchvision_models, "timm": timm_models}
    entries, left_out = [], {}
    for library, enumerate_ in sources.items():
        if libraries and library not in libraries:
            continue
        found, skipped = enumerated(library, enumerate_, cache)
        entries += found
        left_out |= skipped
    if check:
        entries, failed = enumerate_checked(entries, cache)
        left_out |= failed
    return entries, left_out


# the packages whose versions decide what a library's registry lists (and this file: how it is read)
PACKAGES = {"onnx": ("onnx",), "scikit-learn": ("scikit-learn", "skl2onnx", "onnx"), "transformers": ("transformers", "torch"),
            "torchvision": ("torchvision", "torch"), "timm": ("timm", "torch")}


def enumerated(library: str, enumerate_, cache: Path) -> tuple[list[Entry], dict[str, str]]:
    """`enumerate_()` of `library`, kept in `cache`/enumeration/ under the versions of its packages
    and this file's hash: a rerun (a GPU run stopped by its time limit, resumed) reads the listing
    instead of building hundreds of configurations again. A library that did not load, or a listing
    whose model files are gone, is enumerated again."""
    from farm.provenance import library_versions

    versions = library_versions(PACKAGES[library])
    key = {"packages": {p: versions.get(p) for p in PACKAGES[library]},
           "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}
    kept = cache / "enumeration" / f"{library}.json"
    try:
        saved = json.loads(kept.read_text())
        if saved["key"] == key:
            entries = [Entry(**e) for e in saved["entries"]]
            if all(Path(e.source["path"]).is_file() for e in entries if "path" in e.source):
                return entries, saved["left_out"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none kept, another version's, or damaged: enumerate again
    entries, left_out = enumerate_()
    if entries:  # a library that did not load here says so again next time
        write_atomic(kept, json.dumps({"key": key, "entries": [dataclasses.asdict(e) for e in entries],
                                       "left_out": left_out}), make_parents=True)
    return entries, left_out


def enumerate_checked(entries: list[Entry], cache: Path) -> tuple[list[Entry], dict[str, str]]:
    """(the entries whose precheck passes, those left out: name -> why), each PyTorch entry checked
    once (the verdicts kept in `cache`/precheck.json, so a rerun asks only of models not seen before)."""
    kept = cache / "precheck.json"
    verdicts = json.loads(kept.read_text()) if kept.is_file() else {}
    keys = {e.name: hashlib.sha256(json.dumps([e.version, e.source, e.table]).encode()).hexdigest()[:16]
            for e in entries if e.source.get("kind") in ("factory", "module")}
    unseen = [e for e in entries if e.name in keys and keys[e.name] not in verdicts.get(e.name, {})]
    for entry, why in _prechecks(unseen):
        verdicts.setdefault(entry.name, {})[keys[entry.name]] = why
        write_atomic(kept, json.dumps(verdicts, indent=1), make_parents=True)  # resumable after a kill
    left_out = {name: verdicts[name][key] for name, key in keys.items() if verdicts.get(name, {}).get(key)}
    return [e for e in entries if e.name not in left_out], left_out


def _prechecks(entries: list[Entry], workers: int | None = None):
    """(entry, precheck(entry)) as each finishes, several at once in fresh processes (a GPU server's
    cores make the hundreds of forward passes minutes instead of most of an hour). A model that
    kills its process (a crash in native code) is left out with that; the others are checked again,
    each in a process of its own, since the crash took the shared pool with it."""
    import concurrent.futures
    import multiprocessing

    if workers is None:
        workers = max(1, min(16, (os.cpu_count() or 2) // 2, len(entries)))
    if not entries:
        return
    context = multiprocessing.get_context("spawn")
    broken = []
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_quiet_worker) as pool:
        futures = {pool.submit(precheck, entry): entry for entry in entries}
        for future in concurrent.futures.as_completed(futures):
            try:
                yield futures[future], future.result()
            except concurrent.futures.process.BrokenProcessPool:
                broken.append(futures[future])
    if len(broken) == 1:
        yield broken[0], "does not run with the inputs guessed here: its process died (a crash in native code)"
    else:
        for entry in broken:  # which one crashed is not known: each alone
            yield from _prechecks([entry], workers=1)


def _quiet_worker() -> None:
    """A precheck process: two threads (several run side by side), and no library chatter."""
    import torch

    torch.set_num_threads(2)


def sample(entries: list[Entry], count: int, seed: int = 0) -> list[Entry]:
    """`count` entries drawn evenly over the libraries (seeded: the same draw on every machine that
    lists the same models), in the corpus's order."""
    by_library: dict[str, list[Entry]] = {}
    for entry in entries:
        by_library.setdefault(entry.library, []).append(entry)
    rng = random.Random(seed)
    pools = {library: rng.sample(found, len(found)) for library, found in sorted(by_library.items())}
    chosen: list[Entry] = []
    while len(chosen) < min(count, len(entries)):
        for pool in pools.values():
            if pool and len(chosen) < count:
                chosen.append(pool.pop())
    order = {entry.name: i for i, entry in enumerate(entries)}
    return sorted(chosen, key=lambda e: order[e.name])


def sample_checked(entries: list[Entry], count: int, seed: int, cache: Path) -> tuple[list[Entry], dict[str, str]]:
    """`count` entries drawn as `sample` draws them, but from the models that pass their precheck,
    checking only those drawn: one left out is replaced by the next of its library's seeded order (a
    uniform draw of the kept models, without checking the hundreds not drawn). (entries, left out)."""
    by_library: dict[str, list[Entry]] = {}
    for entry in entries:
        by_library.setdefault(entry.library, []).append(entry)
    rng = random.Random(seed)
    pools = {library: rng.sample(found, len(found)) for library, found in sorted(by_library.items())}
    kept: dict[str, list[Entry]] = {library: [] for library in pools}
    left_out: dict[str, str] = {}
    while True:
        capacity = {library: len(kept[library]) + len(pool) for library, pool in pools.items()}
        quota = _round_robin(min(count, sum(capacity.values())), capacity)
        drawn = [pools[library].pop() for library in pools
                 for _ in range(min(len(pools[library]), quota[library] - len(kept[library])))]
        if not drawn:
            break
        checked, why = enumerate_checked(drawn, cache)
        left_out |= why
        for entry in checked:
            kept[entry.library].append(entry)
    order = {entry.name: i for i, entry in enumerate(entries)}
    return sorted((e for found in kept.values() for e in found), key=lambda e: order[e.name]), left_out


def _round_robin(count: int, capacity: dict[str, int]) -> dict[str, int]:
    """How many of `count` each library gets, dealt one at a time in turn, none beyond its capacity."""
    quota = dict.fromkeys(capacity, 0)
    while sum(quota.values()) < count:
        for library in capacity:
            if quota[library] < capacity[library] and sum(quota.values()) < count:
                quota[library] += 1
    return quota


def write_listing(entries: list[Entry], left_out: dict[str, str], path: Path) -> None:
    """The corpus as CSV: each model with its family, library and version, and each left out with why."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["model", "family", "library", "version", "left_out"])
    for entry in entries:
        writer.writerow([entry.name, entry.family, entry.library, entry.version, ""])
    for name, why in sorted(left_out.items()):
        writer.writerow([name, "", "", "", why])
    write_atomic(path, buffer.getvalue(), make_parents=True)
