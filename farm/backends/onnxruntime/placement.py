"""Where ONNX Runtime placed a session's nodes: how many ran on each execution provider, which
operators fell back to the CPU provider in a device session, and their time per run.

ONNX Runtime assigns each node to the first provider in the session's list that has a kernel for
it and silently gives the rest to the CPU provider; a "CUDA" cell can thus time a model of which
part, or all, ran on the host. The assignment is read from the session itself
(`get_provider_graph_assignment_info`, ONNX Runtime 1.24 and later, recorded when the session is
made), not guessed from kernel tables.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

CPU_PROVIDER = "CPUExecutionProvider"
RECORD_KEY = "session.record_ep_graph_assignment_info"


def record(opts) -> bool:
    """Ask the session that `opts` makes to record its node assignment; False where this ONNX
    Runtime cannot tell (before 1.24)."""
    import onnxruntime as ort

    if not hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        return False
    opts.add_session_config_entry(RECORD_KEY, "1")
    return True


def assignment(session) -> dict[str, Counter] | None:
    """Provider -> Counter of the operator types of the nodes it was given (the graph after ONNX
    Runtime's basic optimizations, subgraphs included); None where the session cannot say (the
    cell is not failed for a fact about it)."""
    placed: dict[str, Counter] = {}
    try:
        for subgraph in session.get_provider_graph_assignment_info():
            ops = placed.setdefault(subgraph.ep_name, Counter())
            ops.update(node.op_type for node in subgraph.get_nodes())
    except Exception:  # noqa: BLE001 - an execution provider that does not report: the placement is unknown
        return None
    return placed


def build_facts(placed: dict[str, Counter], device: bool) -> dict[str, Any]:
    """The builds columns: `provider_nodes` for every session; for a device session the nodes on
    the CPU provider and their operators (0 and null where none fell back)."""
    total = {provider: sum(ops.values()) for provider, ops in placed.items()}
    facts: dict[str, Any] = {"provider_nodes": ", ".join(f"{p} {n}" for p, n in
                                                         sorted(total.items(), key=lambda item: -item[1]))}
    if device:
        on_cpu = placed.get(CPU_PROVIDER, Counter())
        facts["cpu_provider_nodes"] = sum(on_cpu.values())
        facts["cpu_provider_ops"] = ", ".join(f"{op} ×{n}" if n > 1 else op
                                              for op, n in on_cpu.most_common()) or None
    return facts


def all_on_cpu_reason(placed: dict[str, Counter], wanted: str) -> str | None:
    """Why a device session is not the device's engine: no node was given to any provider but the
    CPU's (a model of operators the device provider has no kernels for, e.g. ai.onnx.ml trees)."""
    nodes = sum(sum(ops.values()) for ops in placed.values())
    if not nodes or any(provider != CPU_PROVIDER and sum(ops.values()) for provider, ops in placed.items()):
        return None
    ops = ", ".join(sorted(placed.get(CPU_PROVIDER, Counter())))[:200]
    return (f"every node of the model ({nodes}: {ops}) runs on ONNX Runtime's CPU provider, none on {wanted}: "
            "run it on onnxruntime with device = \"cpu\", or on the GPU through torch (farm's interpreter has the "
            "ai.onnx.ml operators of converted scikit-learn models)")


def cpu_node_ms(events: list[dict[str, Any]]) -> float | None:
    """Milliseconds per run that the CPU provider's nodes took in an ONNX Runtime profile (its
    `model_run` events counting the runs); None where the profile holds no run."""
    runs = sum(1 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if not runs:
        return None
    micros = sum(float(e.get("dur", 0)) for e in events if e.get("cat") == "Node"
                 and e.get("name", "").endswith("_kernel_time") and e.get("args", {}).get("provider") == CPU_PROVIDER)
    return micros / 1000.0 / runs
