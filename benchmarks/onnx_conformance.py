"""How does farm's ONNX interpreter (the torch backend's path for ONNX files) fare on ONNX's own
operator tests? Every node test case the onnx package ships (onnx.backend.test.case.node: each a
one-operator model, or an operator expanded into the ones it is defined by, with its inputs and the
outputs the ONNX reference computes) is built by farm.onnx_torch and run on the CPU, its float inputs
in the module's type as the torch backend feeds a cell (fp16 for a model of fp16 inputs, else fp32),
and its outputs are held against the expected ones at the case's own tolerance (an fp16 output: at
least one fp16 step of its scale, the order of its roundings). Each case ends as:

  pass         every output matches
  differ       an output does not: a wrong answer, the class of fault this exists to find
  unsupported  the interpreter refuses the model or a setting of it, with why (as a cell would be)
  input type   PyTorch cannot hold an input of the case (float8, strings, ...)
  error        anything else raised: a crash where a refusal or an answer was due

    .venv/bin/python benchmarks/onnx_conformance.py --json benchmarks/results/onnx-conformance-cpu.json
    .venv/bin/python benchmarks/onnx_conformance.py --markdown benchmarks/results/onnx-conformance-cpu.json
    .venv/bin/python benchmarks/onnx_conformance.py --quick     # a fixed sample of cases: the suite
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.errors import EngineUnsupported  # noqa: E402

# --quick: cases of the classes the interpreter once got wrong (tests/test_onnx_torch_ops.py holds
# their own tests), and a few plain ones
QUICK = ("test_abs", "test_softmax_axis_1", "test_mod_mixed_sign_float32", "test_selu", "test_top_k_same_values",
         "test_gather_negative_indices", "test_clip_default_inbounds", "test_resize_downsample_sizes_nearest",
         "test_resize_upsample_sizes_nearest_axes_2_3", "test_center_crop_pad_crop_axes_chw_expanded",
         "test_reduce_max_empty_set", "test_greater_uint32", "test_training_dropout", "test_cast_FLOAT_to_BFLOAT16")


def as_torch(value):
    """A case's input as the interpreter takes it (None where PyTorch has no such type)."""
    import torch
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        value = numpy_helper.to_array(value)
    if isinstance(value, list):
        return [as_torch(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):  # a 0-d input may come as a numpy scalar
        return torch.from_numpy(np.array(value))  # raises TypeError for types torch lacks
    return value


def matches(got, expected, rtol: float, atol: float) -> bool:
    from onnx import TensorProto, numpy_helper

    if isinstance(expected, TensorProto):
        expected = numpy_helper.to_array(expected)
    if isinstance(expected, list):
        return isinstance(got, (list, tuple)) and len(got) == len(expected) and all(
            matches(g, e, rtol, atol) for g, e in zip(got, expected))
    if expected is None:
        return got is None
    got = got.detach().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        return False
    if expected.dtype.kind in "USO":
        return np.array_equal(got.astype(str), expected.astype(str))
    if expected.dtype.kind in "biu":
        return np.array_equal(got.astype(np.int64), expected.astype(np.int64))
    finite = np.abs(expected[np.isfinite(expected)].astype(np.float64)) if expected.dtype == np.float16 else ()
    if len(finite):  # the order of fp16 roundings: one fp16 step of the output's scale
        atol = max(atol, 2.0 ** -10 * max(1.0, float(finite.max())))
    return np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def run_case(case) -> tuple[str, str]:
    """(outcome, detail) of one node test case on farm's interpreter."""
    import torch

    from farm.onnx_torch import build_module

    floats = {i.type.tensor_type.elem_type for i in case.model.graph.input} & {1, 10, 11, 16}
    dtype = torch.float16 if floats == {10} else torch.float32  # as a cell: fp16 models in fp16, else fp32
    try:
        module = build_module(case.model, float_dtype=dtype)
    except EngineUnsupported as exc:
        return "unsupported", str(exc).split(": PyTorch runs an ONNX file")[0]
    except Exception as exc:  # noqa: BLE001 - a crash at build is what this counts
        return "error", f"{type(exc).__name__}: {exc}"
    for inputs, outputs in case.data_sets or []:
        try:
            feeds = [as_torch(v) for v in inputs]
            # floats in the module's type, as the torch backend feeds a cell
            feeds = [f.to(dtype) if isinstance(f, torch.Tensor) and f.is_floating_point() else f for f in feeds]
        except TypeError as exc:
            return "input type", str(exc)[:120]
        try:
            with torch.no_grad():
                got = list(module(*feeds))
        except EngineUnsupported as exc:
            return "unsupported", str(exc).split(": PyTorch runs an ONNX file")[0]
        except Exception as exc:  # noqa: BLE001
            return "error", f"{type(exc).__name__}: {exc}"
        if len(got) != len(outputs) or not all(matches(g, e, case.rtol, case.atol) for g, e in zip(got, outputs)):
            return "differ", ""
    return "pass", ""


def run(names: tuple[str, ...] | None) -> dict:
    import onnx
    import torch
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators divide by zero on purpose
        cases = [c for c in node.collect_testcases(None) if names is None or c.name in names]
    results = {}
    for case in cases:
        op = case.model.graph.node[-1].op_type if case.model.graph.node else "?"
        outcome, detail = run_case(case)
        results[case.name] = {"op": op, "outcome": outcome, "detail": detail[:200]}
    counts = collections.Counter(r["outcome"] for r in results.values())
    return {"machine": f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
                       f"onnx {onnx.__version__}", "cases": len(results), "counts": dict(counts), "results": results}


def markdown(path: Path) -> str:
    """The outcome counts, and every case that did not pass or was not refused, of a --json file."""
    data = json.loads(path.read_text())
    counts = data["counts"]
    lines = [f"<!-- made by `python3 benchmarks/onnx_conformance.py --markdown {path}`: edit there -->",
             "| cases | pass | unsupported (with why) | input type PyTorch lacks | differ | error |",
             "| --- | --- | --- | --- | --- | --- |",
             f"| {data['cases']:,} | {counts.get('pass', 0):,} | {counts.get('unsupported', 0):,} "
             f"| {counts.get('input type', 0)} | {counts.get('differ', 0)} | {counts.get('error', 0)} |"]
    wrong = sorted((name, r) for name, r in data["results"].items() if r["outcome"] in ("differ", "error"))
    if wrong:
        lines += ["", "| case | operator | outcome |", "| --- | --- | --- |"]
        lines += [f"| {name} | {r['op']} | {r['outcome']}{': ' + r['detail'][:80] if r['detail'] else ''} |"
                  for name, r in wrong]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the cases of QUICK")
    parser.add_argument("--json", type=Path, help="write every case's outcome here")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="print the table of a --json file")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(args.markdown), end="")
        return 0
    data = run(QUICK if args.quick else None)
    print(f"{data['cases']} ONNX node test cases on farm's interpreter ({data['machine']})")
    for outcome, count in sorted(data["counts"].items(), key=lambda kv: -kv[1]):
        print(f"  {outcome:12s} {count}")
    for name, r in sorted(data["results"].items()):
        if r["outcome"] in ("differ", "error") or args.quick:
            print(f"  {name}: {r['op']} {r['outcome']} {r['detail'][:100]}")
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
