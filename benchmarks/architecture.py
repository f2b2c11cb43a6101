"""The shape of the code, counted: layers and imports, cycles, private names imported across
modules, modules over 400 lines, functions over 60, copies of the atomic write and of the device
timer. Plain Python (ast), no import of farm itself:

    python3 benchmarks/architecture.py                 # this checkout's farm/
    python3 benchmarks/architecture.py --root /some/other/checkout
    python3 benchmarks/architecture.py --graph         # also every module's imports, by layer

tests/test_architecture.py asserts the rules on every run of the suite; docs/architecture.md
draws the layers.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

# Layer of each module (longest matching prefix wins): a module may import its own layer or
# below, never above. docs/architecture.md explains each.
LAYERS: dict[str, int] = {
    "farm": 0, "farm.errors": 0, "farm.files": 0, "farm.records": 0, "farm.measurement_row": 0, "farm.cpus": 0,
    "farm.text": 0, "farm.scenario": 0,
    "farm.config": 1, "farm.plan": 1, "farm.models": 1, "farm.precision": 1, "farm.measure": 1,
    "farm.accuracy": 1, "farm.output_values": 1, "farm.layers": 1, "farm.trt_output": 1, "farm.provenance": 1,
    "farm.device_timer": 1, "farm.backends.registry": 1, "farm.backends.base": 1,
    "farm.backends.narrow_types": 1, "farm.onnx_torch": 1, "farm.cuda": 1,
    "farm.telemetry": 1, "farm.serving": 1,
    "farm.backends": 2,
    "farm.cell_runner": 3,
    "farm.scheduler": 4, "farm.executor": 4,
    "farm.warehouse": 5, "farm.queries": 5, "farm.sql_console": 5, "farm.compare": 5, "farm.history": 5,
    "farm.ingest": 6, "farm.sweep": 6, "farm.cli": 6, "farm.callbacks": 6, "farm.display": 6,
    "farm.dashboard": 6, "farm.report": 6, "farm.__main__": 6,
}
LAYER_NAMES = {0: "records, errors, files, cpus, text", 1: "config, plan, models, precision, measure, serving, readers",
               2: "backends", 3: "cell runner", 4: "scheduler, executor", 5: "warehouse, queries",
               6: "ingest, sweep, cli, dashboard"}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def layer_of(module: str) -> int | None:
    """The layer of `module` by its longest prefix in LAYERS (`farm` itself only by name, so a
    new top-level module is reported as in no layer rather than taken for layer 0)."""
    if module == "farm":
        return LAYERS["farm"]
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        prefix = ".".join(parts[:i])
        if prefix in LAYERS:
            return LAYERS[prefix]
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class Module:
    def __init__(self, path: Path, root: Path) -> None:
        self.path, self.name = path, module_name(path, root)
        self.text = path.read_text()
        self.tree = ast.parse(self.text)
        self.lines = self.text.count("\n")
        self.imports: dict[str, set[str]] = {}  # imported farm module -> names taken from it
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("farm"):
                        self.imports.setdefault(alias.name, set())
            elif isinstance(node, ast.ImportFrom):
                target = resolve(self.name, path.name == "__init__.py", node)
                if target.startswith("farm"):
                    self.imports.setdefault(target, set()).update(a.name for a in node.names)

    def long_functions(self) -> list[tuple[str, int]]:
        return [(f"{self.name}.{n.name}", n.end_lineno - n.lineno + 1) for n in ast.walk(self.tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]


def load(root: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted((root / "farm").rglob("*.py")):
        if "__pycache__" not in path.parts:
            m = Module(path, root)
            modules[m.name] = m
    return modules


def target_module(name: str, imported: str, modules: dict[str, Module]) -> str | None:
    """The farm module an import refers to: `from farm.x import y` is module farm.x.y when that
    is a module, else farm.x."""
    if f"{name}.{imported}" in modules:
        return f"{name}.{imported}"
    return name if name in modules else None


def edges(modules: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m in modules.values():
        for name, names in m.imports.items():
            targets = {target_module(name, n, modules) for n in names} if names else {target_module(name, "", modules)}
            graph[m.name] |= {t for t in targets if t and t != m.name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan): each is an import cycle.
    A package's __init__ importing its own submodules is not counted (that is how packages re-export)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def own(a: str, b: str) -> bool:
        return b.startswith(a + ".") or a.startswith(b + ".")

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if own(v, w):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def private_imports(modules: dict[str, Module]) -> list[str]:
    found = []
    for m in modules.values():
        for name, names in m.imports.items():
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{name}.{n}" not in modules:
                    found.append(f"{m.name} imports {name}.{n}")
    return found


def upward_imports(modules: dict[str, Module], graph: dict[str, set[str]]) -> list[str]:
    found = []
    for m, targets in graph.items():
        mine = layer_of(m)
        for t in sorted(targets):
            theirs = layer_of(t)
            if mine is not None and theirs is not None and theirs > mine and not t.startswith(m + "."):
                found.append(f"{m} (layer {mine}) imports {t} (layer {theirs})")
    return found


def copies(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Where the atomic write is written (each os.replace of a temporary file), and which modules
    time with CUDA events (cudaEventElapsedTime, torch.cuda.Event(enable_timing=True))."""
    atomic, timer = [], []
    for m in modules.values():
        renames = [n for n in ast.walk(m.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                   and n.func.attr in ("replace", "rename") and n.args and isinstance(n.args[0], ast.Name)
                   and "tmp" in n.args[0].id]
        atomic += [m.name] * len(renames)  # each: a temporary file renamed into place
        if any(k in m.text for k in ("EventElapsedTime", "enable_timing=True")):
            timer.append(m.name)  # one timer a module (farm.device_timer has two event sources)
    return {"atomic write": atomic, "device timer": timer}


def report(root: Path, graph_too: bool = False) -> dict:
    modules = load(root)
    graph = edges(modules)
    big = sorted(((m.name, m.lines) for m in modules.values() if m.lines > MAX_MODULE_LINES), key=lambda x: -x[1])
    long = sorted((f for m in modules.values() for f in m.long_functions()), key=lambda x: -x[1])
    found = {"modules": len(modules), "cycles": cycles(graph), "private": private_imports(modules),
             "upward": upward_imports(modules, graph), "big": big, "long": long, "copies": copies(modules),
             "unlayered": sorted(m for m in modules if layer_of(m) is None), "graph": graph}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="checkout whose farm/ to read (default: this one)")
    parser.add_argument("--graph", action="store_true", help="print every module's farm imports, by layer")
    args = parser.parse_args(argv)
    r = report(args.root)
    if args.graph:
        for layer in sorted(LAYER_NAMES):
            print(f"layer {layer}: {LAYER_NAMES[layer]}")
            for m in sorted(x for x in r["graph"] if layer_of(x) == layer):
                print(f"  {m} -> {', '.join(sorted(r['graph'][m])) or '-'}")
    print(f"{r['modules']} modules under {args.root / 'farm'}")
    print(f"import cycles: {len(r['cycles'])}" + "".join(f"\n  {' <-> '.join(c)}" for c in r["cycles"]))
    print(f"upward imports: {len(r['upward'])}" + "".join(f"\n  {u}" for u in r["upward"]))
    print(f"private names imported across modules: {len(r['private'])}" + "".join(f"\n  {p}" for p in r["private"]))
    print(f"modules over {MAX_MODULE_LINES} lines: {len(r['big'])}" + "".join(f"\n  {n} {c}" for n, c in r["big"]))
    print(f"functions over {MAX_FUNCTION_LINES} lines: {len(r['long'])}" + "".join(f"\n  {n} {c}" for n, c in r["long"]))
    for what, where in r["copies"].items():
        print(f"copies of the {what}: {len(where)}" + (f" ({', '.join(where)})" if where else ""))
    if r["unlayered"]:
        print(f"modules in no layer: {', '.join(r['unlayered'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
