"""A real two-node Ray cluster on loopback, driven by `farm sweep --address` as a user would.

Both nodes run on this machine (`ray.cluster_utils.Cluster`: a head and a second node, each a
raylet of its own with its own logical GPUs and CPUs), so placement is real and the GPUs are not:
the GPU cells are torch cells on CUDA, which claim a GPU worker, find no GPU and are recorded
`skipped`. Which node ran a cell is read back from the warehouse (`cells.worker` names the Ray
node). No assertion on timing; generous timeouts.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from farm.config import load_config  # noqa: E402
from farm.plan import plan_sweep  # noqa: E402
from farm.warehouse import Warehouse  # noqa: E402
from tests.conftest import tiny_cnn, tiny_sweep_text, write_sweep  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
SWEEP_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def cluster():
    """A head with one logical H100 and a second node with one logical H200, one CPU each."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 1, "resources": {"accelerator_type:H100": 1}, "include_dashboard": False})
    second = cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:H200": 1})
    cluster.wait_for_nodes()
    yield cluster, second
    cluster.shutdown()


def farm_sweep(config: Path, results: Path, address: str | None) -> subprocess.CompletedProcess:
    joins = ["--address", address] if address else []
    return subprocess.run([sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results), *joins],
                          capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S,
                          cwd=ROOT, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


def node_of(worker: str) -> str:
    """The Ray node's id prefix in a `cells.worker` text ('..., Ray node 3f9c0a1e52d4')."""
    return worker.rsplit("Ray node ", 1)[1]


def rows(results: Path) -> list[dict]:
    con = Warehouse(results).connect()
    cursor = con.execute("SELECT cell_id, status, reason, worker, host, attempts, finished_at FROM cells")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


ONE_SHORT_REPEAT = """
[measurement]
warmup_ms = 5
min_iterations = 5
min_duration_ms = 50
repeats = 1
layer_iterations = 0
"""

PINNED = """
name = "two-kinds"
[[models]]
source = "tiny.onnx"
[axes]
batch_sizes = [1, 2]
backends = ["torch", "onnxruntime"]
accelerator_types = ["H100", "H200"]
[backends.torch]
device = "cuda"
""" + ONE_SHORT_REPEAT


def test_cells_land_on_both_nodes_pinned_by_gpu_model(cluster, tmp_path: Path) -> None:
    """GPU cells pinned to H100 run on the head, those pinned to H200 on the second node; CPU cells
    on either node's CPU worker; every planned cell once, written by the driver."""
    cluster, second = cluster
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, PINNED)
    plan = plan_sweep(load_config(config), tmp_path / "plan-cache")
    results = tmp_path / "results"
    done = farm_sweep(config, results, cluster.address)
    assert done.returncode == 0, done.stderr[-3000:]

    found = {row["cell_id"]: row for row in rows(results)}
    assert set(found) == {c.cell_id for c in plan.cells}  # every planned cell, once (cell_id is the file name)
    head, other = cluster.head_node.node_id[:12], second.node_id[:12]
    by_type = {"H100": head, "H200": other}
    gpu_cells = [c for c in plan.cells if c.device_kind == "cuda"]
    assert len(gpu_cells) == 4 and {c.accelerator_type for c in gpu_cells} == {"H100", "H200"}
    for cell in gpu_cells:
        row = found[cell.cell_id]
        assert row["worker"].startswith("cuda worker") and node_of(row["worker"]) == by_type[cell.accelerator_type]
        assert row["status"] == "skipped"  # a logical GPU: torch finds no CUDA and says so
    cpu_rows = [found[c.cell_id] for c in plan.cells if c.device_kind != "cuda"]
    assert len(cpu_rows) == 2 and all(r["status"] == "ok" and r["worker"].startswith("cpu worker") for r in cpu_rows)
    assert {node_of(r["worker"]) for r in found.values()} <= {head, other}
    # the driver alone wrote the warehouse: one run, nothing left in its temporary area
    con = Warehouse(results).connect()
    assert con.execute("SELECT count(*), any_value(executor) FROM sweeps").fetchone() == (1, f"ray {cluster.address}")
    temp = results / ".cache" / "tmp"
    assert not temp.exists() or not any(temp.iterdir())


def test_a_pin_no_node_offers_fails_its_cells_and_the_others_run(cluster, tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, PINNED.replace('["H100", "H200"]', '["A100"]'))
    results = tmp_path / "results"
    done = farm_sweep(config, results, cluster[0].address)
    assert done.returncode == 1
    found = rows(results)
    failed = [r for r in found if r["status"] == "failed"]
    assert len(found) == 4 and len(failed) == 2
    assert all(r["reason"].startswith("no GPU of type A100 in the cluster") and "H100, H200" in r["reason"]
               for r in failed)


def test_a_sweep_without_address_runs_on_a_ray_of_its_own_beside_a_running_cluster(cluster, tmp_path: Path) -> None:
    """Given no address, Ray joins the cluster last started on this machine (`ray start`; here the
    fixture's) and refuses a local Ray's settings; farm's default is a local Ray of its own, so a
    sweep without --address runs, on none of that cluster's nodes."""
    cluster, second = cluster
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, """
name = "own-ray"
[[models]]
source = "tiny.onnx"
[axes]
batch_sizes = [1, 2]
backends = ["onnxruntime"]
""" + ONE_SHORT_REPEAT)
    results = tmp_path / "results"
    done = farm_sweep(config, results, None)
    assert done.returncode == 0, done.stderr[-3000:]
    found = rows(results)
    assert len(found) == 2 and all(r["status"] == "ok" for r in found), found
    assert not {node_of(r["worker"]) for r in found} & {cluster.head_node.node_id[:12], second.node_id[:12]}


SLOW_CPU = tiny_sweep_text("node-lost", tuple(range(1, 9)), source="tiny.onnx", measurement={
    "warmup_ms": 5, "min_iterations": 5, "min_duration_ms": 2500, "repeats": 1, "layer_iterations": 0})


def test_a_node_removed_mid_sweep_loses_no_cell_and_doubles_none(cluster, tmp_path: Path) -> None:
    """Eight CPU cells over the CPU workers of three nodes; the third node is removed once cells
    are being written. Its cell in flight is retried on another node; every planned cell is in the
    warehouse exactly once, and no cell finished after the removal ran on the removed node."""
    cluster, second = cluster
    doomed = cluster.add_node(num_cpus=1, num_gpus=0)
    cluster.wait_for_nodes()
    tiny_cnn(tmp_path / "tiny.onnx")
    config = write_sweep(tmp_path, SLOW_CPU)
    plan = plan_sweep(load_config(config), tmp_path / "plan-cache")
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results),
                             "--address", cluster.address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        cells_dir = results / "node-lost" / "cells"
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while time.monotonic() < deadline and len(list(cells_dir.glob("*.parquet"))) < 2 and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        cluster.remove_node(doomed)
        removed_at = dt.datetime.now(dt.UTC)
        output, _ = proc.communicate(timeout=SWEEP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    found = rows(results)
    assert sorted(r["cell_id"] for r in found) == sorted(c.cell_id for c in plan.cells)  # none lost, none doubled
    assert all(r["status"] == "ok" for r in found), [r["reason"] for r in found]
    survivors = {cluster.head_node.node_id[:12], second.node_id[:12]}
    assert {node_of(r["worker"]) for r in found} <= survivors | {doomed.node_id[:12]}
    late = [r for r in found if r["finished_at"] > removed_at + dt.timedelta(seconds=1)]
    assert late and all(node_of(r["worker"]) in survivors for r in late)
    retried = [r for r in found if r["attempts"] > 1]
    assert all(node_of(r["worker"]) in survivors for r in retried)
