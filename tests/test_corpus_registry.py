"""The corpus no one picks (benchmarks/corpus_registry.py): what the libraries' own registries list,
drawn evenly, written with versions, and swept (benchmarks/model_corpus.py --registry, quick)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from corpus_registry import Entry, _prechecks, enumerate_corpus, precheck, sample, sample_checked, write_listing  # noqa: E402

from tests.test_benchmarks import run_benchmark  # noqa: E402


def test_every_model_the_onnx_wheel_ships_for_its_tests_is_listed(tmp_path: Path) -> None:
    import onnx

    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    shipped = sorted(data.rglob("*.onnx"))
    entries, left_out = enumerate_corpus(tmp_path, ["onnx"])
    assert sorted(Path(e.source["path"]) for e in entries) == shipped
    assert len({e.name for e in entries}) == len(entries)  # one name a model
    assert {e.version for e in entries} == {onnx.__version__} and {e.library for e in entries} == {"onnx"}
    # the `real` folders hold only a download address: listed as left out, with that reason
    real = {p.name for p in (data / "real").iterdir() if p.is_dir() and not any(p.glob("*.onnx"))}
    assert {name for name in left_out} == {f"onnx-real-{n.removeprefix('test_')}" for n in real}
    assert all("download address" in why for why in left_out.values())


def test_a_rerun_reads_the_listing_kept_under_the_libraries_versions(tmp_path: Path) -> None:
    """A run stopped by its time limit and run again does not build the registries' listings again:
    each library's is kept in the cache under its packages' versions, and one kept under other
    versions (or naming a model file that is gone) is made anew."""
    import onnx

    first = enumerate_corpus(tmp_path, ["onnx"], check=False)
    kept = tmp_path / "enumeration" / "onnx.json"
    saved = json.loads(kept.read_text())
    assert saved["key"]["packages"] == {"onnx": onnx.__version__}
    saved["entries"] = saved["entries"][:3]  # what the next run reads is the kept listing
    kept.write_text(json.dumps(saved))
    assert [e.name for e in enumerate_corpus(tmp_path, ["onnx"], check=False)[0]] == [e.name for e in first[0][:3]]
    saved["key"]["packages"] = {"onnx": "0.0.1"}  # another version's listing: enumerated again
    kept.write_text(json.dumps(saved))
    assert enumerate_corpus(tmp_path, ["onnx"], check=False) == first
    saved = json.loads(kept.read_text())
    saved["entries"][0]["source"]["path"] = str(tmp_path / "gone.onnx")
    kept.write_text(json.dumps(saved))
    assert enumerate_corpus(tmp_path, ["onnx"], check=False) == first


def test_a_sample_is_drawn_evenly_over_the_libraries_and_the_same_every_time() -> None:
    entries = [Entry(f"a{i}", "f", "a", "1", {}) for i in range(10)] + [Entry(f"b{i}", "f", "b", "1", {}) for i in range(3)]
    drawn = sample(entries, 6, seed=1)
    assert [e.library for e in drawn].count("a") == 3 and [e.library for e in drawn].count("b") == 3
    assert drawn == sample(entries, 6, seed=1)
    assert [e.name for e in drawn] == [e.name for e in entries if e in drawn]  # the corpus's order
    assert len(sample(entries, 12, seed=1)) == 12 and [e.library for e in sample(entries, 12)].count("b") == 3
    assert sample(entries, 50) == entries


def test_a_checked_sample_checks_only_what_it_draws_and_replaces_what_fails(tmp_path: Path) -> None:
    """With nothing to check it is `sample`'s draw; a drawn PyTorch model whose guessed inputs do not
    fit gives way to the next of its library, and models never drawn are never checked."""
    entries = [Entry(f"a{i}", "f", "a", "1", {}) for i in range(10)] + [Entry(f"b{i}", "f", "b", "1", {}) for i in range(3)]
    assert sample_checked(entries, 6, 1, tmp_path) == (sample(entries, 6, seed=1), {})
    linear = {"kind": "module", "module": "torch.nn", "factory": "Linear"}
    fits = 'kwargs = { in_features = 8, out_features = 2 }\ninputs = { x = { shape = ["batch", 8] } }'
    torch_entries = [Entry(f"t{i}", "f", "torch", "1", linear, fits.replace('"batch", 8', '"batch", 5') if i % 2 else fits)
                     for i in range(8)]
    drawn, left_out = sample_checked(entries + torch_entries, 6, 3, tmp_path)
    assert [e.library for e in drawn].count("torch") == 2 and all(int(e.name[1:]) % 2 == 0 for e in drawn
                                                                  if e.library == "torch")
    assert left_out and all(int(name[1:]) % 2 for name in left_out)
    checked = json.loads((tmp_path / "precheck.json").read_text())
    assert len(checked) == 2 + len(left_out) < len(torch_entries)  # the draws only
    assert sample_checked(entries + torch_entries, 6, 3, tmp_path) == (drawn, left_out)  # the same draw again


def test_a_pytorch_model_the_guessed_inputs_do_not_fit_is_left_out_with_the_error(tmp_path: Path) -> None:
    """The corpus guesses each PyTorch model's inputs; a model they do not fit is the guess's fault,
    not farm's, and is left out with the model's own error (here: a linear layer fed the wrong width)."""
    fits = Entry("lin", "f", "torch", "1", {"kind": "module", "module": "torch.nn", "factory": "Linear"},
                 'kwargs = { in_features = 8, out_features = 2 }\ninputs = { x = { shape = ["batch", 8] } }')
    wrong = Entry("lin8", "f", "torch", "1", fits.source, fits.table.replace('"batch", 8', '"batch", 5'))
    assert precheck(fits) is None
    assert "does not run with the inputs guessed here: RuntimeError: mat1 and mat2 shapes" in precheck(wrong)


def test_the_listing_names_each_model_with_its_library_and_version(tmp_path: Path) -> None:
    entries = [Entry("m", "fam", "lib", "1.2.3", {})]
    write_listing(entries, {"gone": "not installed"}, tmp_path / "corpus.csv")
    rows = list(csv.DictReader((tmp_path / "corpus.csv").read_text().splitlines()))
    assert rows == [{"model": "m", "family": "fam", "library": "lib", "version": "1.2.3", "left_out": ""},
                    {"model": "gone", "family": "", "library": "", "version": "", "left_out": "not installed"}]


@pytest.mark.slow
def test_registry_corpus_quick(tmp_path: Path) -> None:
    """Three models the onnx wheel ships, drawn by the seed, at batch 1 and 4 (and a model's own fixed
    batch) on ONNX Runtime and PyTorch (CPU): counted per engine and batch, listed with their version,
    and none failed. A run stopped by --time-limit first says it counted a part (here none), and the
    next run of the same command finishes the rest."""
    from model_corpus import markdown

    common = ["--registry", "onnx", "--sample", "3", "--quick", "--cache", str(tmp_path / "corpus"), "--json",
              str(tmp_path / "counts.json")]
    out = run_benchmark("model_corpus.py", *common, "--time-limit", "0", timeout=900)
    assert "(stopped by --time-limit)" in out and "the same command again resumes" in out, out
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts["stopped_by_time_limit"] == 0 and not any(c["cells"] for c in counts["engines"].values()), counts
    assert "; partial: the 0 of " in markdown(tmp_path / "counts.json")
    out = run_benchmark("model_corpus.py", *common, timeout=900)
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts["stopped_by_time_limit"] is None and "partial" not in markdown(tmp_path / "counts.json")
    assert counts["cells_planned"] == sum(c["cells"] for c in counts["engines"].values()), counts
    assert {f"{engine} b{batch}" for engine in ("onnxruntime cpu", "torch cpu eager") for batch in (1, 4)} <= \
        set(counts["engines"]), out
    for engine, figures in counts["engines"].items():
        assert figures.get("failed", 0) == 0, (engine, out)
    assert all(counts["engines"][f"{engine} b{batch}"]["cells"] == 3 for engine in ("onnxruntime cpu", "torch cpu eager")
               for batch in (1, 4)), out
    assert counts["corpus"]["libraries"]["onnx"]["swept"] == 3 and counts["corpus"]["batch_sizes"] == [1, 4], counts
    listing = list(csv.DictReader((tmp_path / "corpus" / "corpus-models.csv").read_text().splitlines()))
    kept = [row for row in listing if not row["left_out"]]
    assert len(kept) == 3 and all(row["library"] == "onnx" and row["version"] for row in kept), listing


def test_models_docs_table_is_made_from_the_committed_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/models.md's table of the registry corpus is what `model_corpus.py --markdown` makes of the
    committed counts: a figure there cannot drift from its file."""
    import re

    from model_corpus import markdown

    monkeypatch.chdir(ROOT)
    docs = (ROOT / "docs" / "models.md").read_text()
    blocks = re.findall(r"<!-- (corpus-registry-[a-z0-9-]+): begin -->\n(.*?)<!-- \1: end -->", docs, re.DOTALL)
    assert {name for name, _ in blocks} >= {"corpus-registry-cpu", "corpus-registry-cpu-before", "corpus-registry-gpu"}, \
        "docs/models.md lost a generated corpus table"
    for name, block in blocks:
        counts = re.search(r"--markdown (\S+)`", block)[1]
        assert block == markdown(Path(counts)), f"docs/models.md's {name} table differs from its counts: rerun --markdown"
        record = json.loads((ROOT / counts).read_text())
        assert all(f"| {c['cells']} | {c.get('ok', 0)} |" in block for c in record["engines"].values())


def test_gpu_sample_figures_in_the_docs_are_its_logs() -> None:
    """docs/models.md's figures of the H200 sample that its time limit stopped (no counts file) are
    counted from the committed log: the status of every cell line, per engine."""
    import collections
    import re

    log = (ROOT / "benchmarks" / "results" / "corpus-registry-h200-558c344-partial.log").read_text()
    rows = re.findall(r"^(ok|unsupported|failed|skipped) +(\S+) (fp32|fp16) b(\d+) (\w+) ", log, re.MULTILINE)
    status = collections.Counter(s for s, *_ in rows)
    engine = collections.Counter((backend, s) for s, _, _, _, backend in rows)
    docs = " ".join((ROOT / "docs" / "models.md").read_text().split())
    assert (f"the {len(rows)} of its 408 cells done before the device time ran out are {status['ok']} ok, "
            f"{status['unsupported']} unsupported, {status['failed']} failed") in docs
    assert (f"ONNX Runtime CUDA: {engine['onnxruntime', 'ok']} ok of "
            f"{sum(n for (b, _), n in engine.items() if b == 'onnxruntime')}, PyTorch: {engine['torch', 'ok']} ok of "
            f"{sum(n for (b, _), n in engine.items() if b == 'torch')}") in docs


@pytest.mark.parametrize("args, said", [
    (["--registry", "nosuch"], "argument --registry: invalid choice: 'nosuch' (choose from 'onnx', 'scikit-learn'"),
    (["--markdown", "no-such.json"], "--markdown no-such.json: not the --json counts of a --registry run"),
    (["--markdown", "README.md"], "--markdown README.md: not the --json counts of a --registry run (JSONDecodeError"),
])
def test_a_mistake_on_the_command_line_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "model_corpus.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_prechecks_run_side_by_side_and_a_model_that_kills_its_process_is_left_out_alone(tmp_path: Path) -> None:
    """The corpus checks its PyTorch models in a pool of processes; one that crashes in native code
    (here a segfault) is left out with that, and the models beside it keep their own verdicts."""
    fits = Entry("lin", "f", "torch", "1", {"kind": "module", "module": "torch.nn", "factory": "Linear"},
                 'kwargs = { in_features = 8, out_features = 2 }\ninputs = { x = { shape = ["batch", 8] } }')
    wrong = Entry("lin8", "f", "torch", "1", fits.source, fits.table.replace('"batch", 8', '"batch", 5'))
    crash = Entry("crash", "f", "torch", "1", {"kind": "module", "module": "faulthandler", "factory": "_sigsegv"},
                  'inputs = { x = { shape = ["batch", 8] } }')
    verdicts = {entry.name: why for entry, why in _prechecks([crash, fits, wrong], workers=2)}
    assert verdicts["lin"] is None
    assert "mat1 and mat2 shapes" in verdicts["lin8"]
    assert "its process died" in verdicts["crash"]


def test_listing_transformers_models_prints_none_of_transformers_errors(monkeypatch, capfd) -> None:
    """Guessing a model type's inputs builds its config, which some transformers versions log as an
    error with the whole config (248 lines of a GPU run's log for two types): not the corpus's, not
    printed. The verbosity is put back after."""
    pytest.importorskip("transformers")
    import corpus_registry
    import transformers

    def noisy_inputs(cls, model_type):
        transformers.logging.get_logger("transformers.configuration_utils").error(
            "Can't set hidden_size with value 32 for Config {\n  \"a\": 1\n}")
        raise ImportError("left out here")  # as a placeholder class does: listed as left out

    monkeypatch.setattr(corpus_registry, "hf_inputs", noisy_inputs)
    before = transformers.logging.get_verbosity()
    entries, left_out = corpus_registry.transformers_models()
    assert not entries and left_out and transformers.logging.get_verbosity() == before
    assert "Can't set hidden_size" not in capfd.readouterr().err


def test_unsupported_cells_are_counted_by_why_from_farms_own_words() -> None:
    """The corpus report groups unsupported cells by their reason, matched on the words farm's own
    messages use: each message below is made by the code that makes it for a cell."""
    from collections import Counter

    from model_corpus import unsupported_class

    from farm.backends.onnxruntime.placement import all_on_cpu_reason
    from farm.onnx_torch import UnsupportedOperator
    from farm.records import InputSpec, ModelArtifact

    fixed = ModelArtifact("m", "m.onnx", Path("m.onnx"), "0", 1, (InputSpec("x", "float32", (2, 3), -1.0, 1.0),), {},
                          declared_batch=2)
    exported = ModelArtifact("m", "module:a:b", Path("m.onnx"), "0", 1, (), {}, onnx_fixed_batch=(2, "it split"))
    placed = {"CPUExecutionProvider": Counter({"TreeEnsembleClassifier": 1})}
    assert unsupported_class(fixed.batch_unsupported(4)) == "the model fixes another batch"
    assert unsupported_class(exported.onnx_unsupported(4)) == "the export fixed the batch"
    assert unsupported_class(str(UnsupportedOperator("the PyTorch backend has no implementation of ONNX operator(s) "
                                                     "Scan"))) == "an operator or type the engine lacks"
    assert unsupported_class(all_on_cpu_reason(placed, "CUDAExecutionProvider")) == \
        "every node on ONNX Runtime's CPU provider"
    assert unsupported_class("something new") == "other"
