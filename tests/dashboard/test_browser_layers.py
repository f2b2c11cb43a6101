"""End to end in headless Chromium (as tests/dashboard/test_browser.py): the Cell page's engine
explorer views and roofline, and the Diff page's plain word when two cells' layers cannot be
compared, on the GPU example warehouse (examples/results: ResNet-50 on 2 x H200, PyTorch eager,
CUDA graphs and torch.compile). Every expected figure is computed here from the cell's own rows
(layer output shapes, MACs, sizes, times) and NVIDIA's H200 datasheet, not by the dashboard's code.
Screenshots go to artifacts/screenshots/ (or $FARM_SCREENSHOTS)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from farm.dashboard.data import Snapshot
from tests.dashboard.test_browser import browser, expect, metric, page, printed, shoot  # noqa: F401 - the fixtures, shared

pytestmark = [pytest.mark.slow, pytest.mark.browser]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "results"
H200_BF16_TFLOPS, H200_GBPS = 989.4, 4800  # NVIDIA H200 SXM datasheet: dense BF16 tensor core, HBM3e bandwidth

if not any(EXAMPLES.glob("*/measurements/*.parquet")):
    pytest.skip("examples/results has no measurements in this checkout", allow_module_level=True)


def elements(shape: str) -> int:
    return int(pd.Series(shape.split("x")).astype(int).prod())


def expected_flops(layers: pd.DataFrame) -> int:
    """ResNet-50's FLOPs per query from its graph-op rows: 2 x the MACs the backend recorded for
    Conv and Gemm; per output element 2 for batch norm, 1 for Relu and Add, 9 for the 3x3 max pool;
    the global average pool one per input element; Flatten none."""
    per_output = {"BatchNormalization": 2, "Relu": 1, "Add": 1, "MaxPool": 9, "Flatten": 0}
    total = 0
    for row in layers.itertuples():
        if row.type in ("Conv", "Gemm"):
            total += 2 * int(row.macs)
        elif row.type == "GlobalAveragePool":
            total += elements(row.input_shapes)
        else:
            total += per_output[row.type] * elements(row.output_shapes)
    return total



@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's gpu-resnet50 sweep alone (the one these views are checked on), in a copy: the
    server's log goes beside the warehouse, not into the checkout."""
    root = tmp_path_factory.mktemp("layers") / "results"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("gpu-engines", ".cache", ".lock"))
    return root


def test_cell_page_shows_the_engine_explorer_views_and_the_roofline(examples, page, dashboard) -> None:  # noqa: F811
    snap = Snapshot(examples)
    ok = snap.cell_frame[snap.cell_frame.status == "ok"]
    # no cell asked for: the first ok cell whose layers have edges (a compile cell's kernels have none)
    first_with_edges = next(c for c in ok.cell_id if snap.cell_file(c, "layers").input_tensors.ne("[]").any())
    cell = snap.cell(first_with_edges)
    assert '"eager"' in cell.options or '"cudagraphs"' in cell.options
    layers = snap.cell_file(cell.cell_id, "layers")
    server = dashboard(examples)
    page.goto(f"{server.url}/cell")
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text(cell.cell_id)

    # Roofline: FLOPs from the rows, over the compute time, against the H200's bf16 and bandwidth peaks
    flops = expected_flops(layers)
    tflops = flops / (cell.compute_mean_ms / 1e3) / 1e12
    expect(metric(page, "GFLOP per query")).to_have_text(f"{flops / 1e9:.4g}")
    expect(metric(page, "MiB moved per query")).to_have_text(f"{layers.total_bytes.sum() / 2**20:.4g}")
    expect(metric(page, "Achieved TFLOP/s")).to_have_text(printed(tflops))
    expect(metric(page, "% of peak compute")).to_have_text(f"{100 * tflops / H200_BF16_TFLOPS:.3g} %")
    intensity = flops / layers.total_bytes.sum()
    assert intensity < H200_BF16_TFLOPS * 1e12 / (H200_GBPS * 1e9)  # under the ridge: bandwidth bounds it
    expect(metric(page, "FLOP per byte")).to_have_text(f"{intensity:.4g}")
    expect(metric(page, "% of peak bandwidth")).to_have_text(
        f"{100 * layers.total_bytes.sum() / (cell.compute_mean_ms / 1e3) / 1e9 / H200_GBPS:.3g} %")
    expect(metric(page, "Bound by")).to_have_text("memory")
    expect(main).to_contain_text("against the H200 SXM's datasheet peaks at bf16")

    # Time by layer type: shares of the graph-op time, slowest type first
    by_type = layers.groupby("type").time_avg_ms.agg(["sum", "size"]).sort_values("sum", ascending=False)
    share = 100 * by_type["sum"] / layers.time_avg_ms.sum()
    page.get_by_role("radio", name="Time by layer type").click()
    slowest = by_type.index[0]
    expect(main).to_contain_text(f"{slowest} {share.iloc[0]:.1f} % ({by_type['size'].iloc[0]} layers, "
                                 f"{by_type['sum'].iloc[0]:.4g} ms)")
    page.get_by_role("heading", name="Roofline").scroll_into_view_if_needed()
    shoot(page, "layers-1-cell-roofline-time-by-type")

    # Memory per layer, in human units: weights, activations, the largest layer
    page.get_by_role("radio", name="Memory per layer").click()
    expect(metric(page, "Weights")).to_have_text(f"{layers.weight_bytes.sum() / 2**20:.2f} MiB")
    expect(metric(page, "Largest layer")).to_have_text(f"{layers.total_bytes.max() / 2**20:.2f} MiB")
    shoot(page, "layers-2-cell-memory")

    # Precision per layer: every row of this bf16 cell says bfloat16
    assert set(layers.output_dtypes.str.lower()) == {"bfloat16"}
    page.get_by_role("radio", name="Precision per layer").click()
    expect(main).to_contain_text(f"bf16: {len(layers)} layers, 100.0 % of the time")

    # The graph: ranked along the tensors, drawn as an image
    graph = page.get_by_text("Engine graph").first
    expect(graph).to_be_visible()  # the radio's click re-renders the page: scroll once the heading is back
    graph.scroll_into_view_if_needed()
    expect(page.get_by_test_id("stImage").locator("img").first).to_be_visible()
    shoot(page, "layers-3-cell-precision-graph")


def test_kernels_without_edges_are_a_searchable_list(examples, page, dashboard) -> None:  # noqa: F811
    snap = Snapshot(examples)
    ok = snap.cell_frame[snap.cell_frame.status == "ok"]
    compiled = next(c for c in ok.cell_id if set(snap.cell_file(c, "layers").type) == {"kernel"})
    kernels = snap.cell_file(compiled, "layers")
    server = dashboard(examples)
    page.goto(f"{server.url}/cell?cell={compiled}")
    main = page.get_by_test_id("stMain")
    expect(page.get_by_role("heading", name="Layers in execution order")).to_be_visible()
    expect(page.get_by_role("heading", name="Engine graph")).to_have_count(0)
    expect(main).to_contain_text(f"These {len(kernels)} rows name no tensors")
    expect(main).to_contain_text(f"{len(kernels)} of {len(kernels)} layers")
    box = page.get_by_label("Search layers")
    box.fill("triton")
    box.press("Enter")
    found = kernels.name.str.contains("triton", case=False).sum()
    assert 0 < found < len(kernels)
    expect(main).to_contain_text(f"{found} of {len(kernels)} layers match “triton”")
    page.get_by_role("radio", name="Roofline per layer").click()
    expect(main).to_contain_text(f"0 of {len(kernels)} layers map to ONNX nodes")  # unmapped kernels
    page.get_by_role("heading", name="Layers in execution order").scroll_into_view_if_needed()
    shoot(page, "layers-4-cell-kernel-list")


def test_diff_of_eager_against_compiled_says_it_cannot_compare(examples, page, dashboard) -> None:  # noqa: F811
    snap = Snapshot(examples)
    ok = snap.cell_frame[snap.cell_frame.status == "ok"]
    eager = ok[ok.options.str.contains('"eager"') & (ok.precision == "fp32") & (ok.batch == 32)].cell_id.iloc[0]
    compiled = ok[ok.options.str.contains('"compile"') & (ok.precision == "fp32") & (ok.batch == 32)].cell_id.iloc[0]
    server = dashboard(examples)
    page.goto(f"{server.url}/diff?a={eager}&b={compiled}")
    alerts = page.get_by_test_id("stAlert")
    expect(alerts.filter(has_text="Layers not diffed")).to_contain_text(
        "A's rows are ONNX graph ops, B's are generated or CUDA kernels")
    expect(page.get_by_test_id("stMetricLabel").filter(has_text="Matched layers")).to_have_count(0)
    expect(page.get_by_test_id("stMetricLabel").filter(has_text="Σ")).to_have_count(0)
    shoot(page, "layers-5-diff-kinds-differ")
