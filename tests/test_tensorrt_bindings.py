"""farm's TensorRT calls and the test double, held against the real Python bindings of each TensorRT
version farm claims (10.x and 11.x), read from PyPI's `tensorrt-cu12-bindings` and
`tensorrt-cu13-bindings` wheels without importing them (they need libnvinfer, which is not here).

A pybind11 module registers every class, method, property and enum member by a name kept as text
in its shared library: a name farm or the double uses that is not among the library's names is a
name that version does not have. Where a wheel cannot be downloaded (no network), the test says so
and is skipped; wheels are cached under ~/.cache/farm/tensorrt-bindings.
"""

from __future__ import annotations

import ast
import enum
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from tests.doubles.tensorrt_double import make_tensorrt

ROOT = Path(__file__).resolve().parent.parent
# the versions farm claims, each with the wheel that has its bindings
WHEELS = {"10.13.0": ("tensorrt-cu12-bindings", "10.13.0.35"), "11.4.0": ("tensorrt-cu13-bindings", "11.4.0.106")}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "farm" / "tensorrt-bindings"
# what the double has that is not TensorRT's: its recorder, and Python's own names
NOT_TENSORRT = {"calls", "plan", "engine", "rows", "times"}


class Bindings:
    """What one version's bindings name: the C strings of `tensorrt_bindings/tensorrt.so` (where
    the linker may keep a short name only as the tail of a longer string: `INPUT` inside
    `kINPUT`) and the names the wheel's Python files define (`__version__`)."""

    def __init__(self, library: bytes, python: set[str]) -> None:
        self.library, self.python = library, python

    def has(self, name: str) -> bool:
        return name in self.python or (name.encode() + b"\0") in self.library


def bindings(version: str) -> Bindings:
    """The version's bindings, from its wheel (downloaded once into CACHE)."""
    package, release = WHEELS[version]
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = list(CACHE.glob(f"{package.replace('-', '_')}-{release}-*.whl"))
    if not wheels:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                               f"{package}=={release}", "-d", str(CACHE)], capture_output=True, text=True,
                              timeout=300)
        wheels = list(CACHE.glob(f"{package.replace('-', '_')}-{release}-*.whl"))
        if done.returncode != 0 or not wheels:
            pytest.skip(f"cannot download {package}=={release} from PyPI here (no network?): "
                        f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        (library,) = [n for n in wheel.namelist() if n.endswith("tensorrt.so")]
        python: set[str] = set()
        for name in wheel.namelist():
            if name.endswith(".py"):
                with warnings.catch_warnings():  # its own files' escape sequences are not farm's concern
                    warnings.simplefilter("ignore")
                    tree = ast.parse(wheel.read(name))
                python |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                           if isinstance(t, ast.Name)}
                python |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        return Bindings(wheel.read(library), python)


def double_names(version: str) -> set[str]:
    """The TensorRT names the double of `version` answers to: its classes, their methods and
    attributes (slots: TensorRT's properties), enum types and members."""
    trt = make_tensorrt(version)
    names: set[str] = set()
    for name, value in vars(trt).items():
        if name.startswith("_") or name in NOT_TENSORRT:
            continue
        names.add(name)
        if isinstance(value, type) and issubclass(value, enum.Enum):
            names |= set(value.__members__)
        elif isinstance(value, type):
            for cls in value.__mro__[:-1]:
                names |= {n for n in vars(cls) if not n.startswith("_")}
                names |= set(getattr(cls, "__slots__", ()))
    return names - NOT_TENSORRT


def farm_names() -> set[str]:
    """The names farm's TensorRT backend reaches through the module (`trt.X`, `trt.X.Y`) and calls on
    what it returns (attribute names on objects named builder, config, network, parser, engine,
    context, inspector, profile, runtime, cache)."""
    objects = {"builder", "config", "network", "parser", "engine", "context", "inspector", "profile", "runtime",
               "cache", "timing_cache", "logger"}
    names: set[str] = set()
    for path in (ROOT / "farm" / "backends" / "tensorrt").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ({"trt"} | objects):
                names.add(node.attr)
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "trt":
                names.add(node.attr)  # trt.BuilderFlag.FP16
    return names


@pytest.mark.parametrize("version", sorted(WHEELS))
def test_every_name_the_double_knows_is_in_the_real_bindings(version: str) -> None:
    real = bindings(version)
    assert real.has("build_serialized_network") and not real.has("build_serialized_network_v9")  # it can tell
    missing = sorted(n for n in double_names(version) if not real.has(n))
    assert not missing, f"the double of TensorRT {version} answers to names its bindings lack: {missing}"


@pytest.mark.parametrize("version", sorted(WHEELS))
def test_every_name_farm_calls_is_in_the_real_bindings_or_guarded(version: str) -> None:
    """A name farm uses that a claimed version lacks is either guarded in the code (read with
    getattr or hasattr, or only on the other major version) or a failure here."""
    from farm.backends.tensorrt.engine_build import TENSORRT_10_ONLY

    real = bindings(version)
    used = farm_names()
    assert len(used) >= 30, sorted(used)  # the scan found farm's calls, not nothing
    guarded = guarded_names() | (TENSORRT_10_ONLY if version.startswith("11.") else set())
    missing = sorted(n for n in used if not real.has(n) and n not in guarded)
    assert not missing, f"farm uses names TensorRT {version}'s bindings do not have: {missing}"
    if version.startswith("10."):  # what farm keeps to 10.x is there
        assert all(real.has(n) for n in TENSORRT_10_ONLY), sorted(n for n in TENSORRT_10_ONLY if not real.has(n))


def guarded_names() -> set[str]:
    """Names farm's TensorRT code reads only through getattr/hasattr (so a version without them is
    handled), as string constants."""
    names: set[str] = set()
    for path in (ROOT / "farm" / "backends" / "tensorrt").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                names.add(str(node.args[1].value))
    return names
