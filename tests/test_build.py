"""The build: the modules pyproject.toml lists as compiled run compiled, every other one from its
source, none compiled from an older source than the tree's (an edit without a rebuild would run
stale code); and what ``pip install .`` puts in the wheel holds every module and every data file
the gateway reads at run time."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import gateway

ROOT = Path(__file__).resolve().parent.parent
COMPILED: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "tool"]["chat-gateway"]["compiled"]


def origin(name: str) -> str:
    """The file the module is (or would be) imported from."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return spec.origin


def module_of(path: str) -> str:
    """``gateway/framing/__init__.py`` -> ``gateway.framing``."""
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def compiled_library() -> Path:
    """The shared library setup.py builds beside the package (every compiled module's code)."""
    (library,) = [p for p in ROOT.glob("gateway__mypyc*") if p.suffix == ".so"]
    return library


def test_the_run_imports_the_gateway_beside_its_tests() -> None:
    assert Path(gateway.__file__).resolve().parent.parent == ROOT


def test_the_listed_modules_run_compiled_and_every_other_from_its_source() -> None:
    names = [m.name for m in pkgutil.walk_packages(gateway.__path__, "gateway.")]
    assert "gateway.dialects.base" in names and "gateway.canonical" in names
    compiled = {module_of(p) for p in COMPILED}
    assert compiled <= set(names)
    assert all((ROOT / p).is_file() for p in COMPILED)
    ran = {n: origin(n) for n in names}
    assert {n for n, at in ran.items() if at.endswith(tuple(EXTENSION_SUFFIXES))} == compiled
    assert {n for n, at in ran.items() if at.endswith(".py")} == set(names) - compiled


def test_no_source_was_edited_since_it_was_compiled() -> None:
    """The compiled code is the shared library setup.py builds beside the package; every module
    of the package is older than it (any of them may change what the others were compiled
    against). Else: ``make test`` rebuilds first; ``pip install -e .`` does by hand."""
    library = compiled_library()
    built = library.stat().st_mtime
    edited = [str(p.relative_to(ROOT)) for p in (ROOT / "gateway").rglob("*.py")
              if p.stat().st_mtime > built]
    assert edited == [], f"edited since compiled (run make test, or pip install -e .): {edited}"


def test_the_compiled_library_exports_only_its_init_function() -> None:
    """setup.py builds it with hidden symbols: its C files call each other directly, not through
    the PLT (docs/performance.md says what that is worth); the compiled modules reach it through
    its capsules, CPython through the one init function. A build without the flag exports
    thousands."""
    library = compiled_library()
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                         text=True, timeout=60, check=True)
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert exported == {"PyInit_gateway__mypyc"}


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    """What ``pip install .`` puts in the wheel beside the compiled modules (the Docker image's
    build): setuptools' own steps for the package's files and its metadata, without compiling
    (the compiled modules are the listed ones: the test above)."""
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib"),
         "egg_info", "--egg-base", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lib = tmp_path / "lib"
    names = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file()}
    (entry_points,) = tmp_path.glob("*.egg-info/entry_points.txt")
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc")}
    assert {"gateway/__init__.py", "gateway/cli.py"} <= files
    # every file of the package: its modules (the compiled ones' sources too), and what it reads
    # beside them (the status page, the dialects' samples, the migrations' template, py.typed)
    assert files - names == set()
    assert {"gateway/py.typed", "gateway/history/migrations/script.py.mako"} <= names
    assert set(COMPILED) <= names
    assert any(n.startswith("gateway/static/") for n in names)
    assert any(n.startswith("gateway/dialects/samples/openai/") for n in names)
    assert "chat-gateway = gateway.cli:main" in entry_points.read_text()
