"""The build: ``pyproject.toml`` alone makes the package (no setup.py), its wheel holds every
module and every data file the gateway reads at run time, and the tests run the sources of this
tree (no installed copy, no stale extension module from an old build shadowing an edit)."""

from __future__ import annotations

import importlib.util
import pkgutil
import shutil
import subprocess
import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import gateway

ROOT = Path(__file__).resolve().parent.parent


def origin(name: str) -> str:
    """The file the module is (or would be) imported from."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return spec.origin


def test_the_run_imports_the_gateway_beside_its_tests() -> None:
    assert Path(gateway.__file__).resolve().parent.parent == ROOT


def test_every_module_runs_from_its_source() -> None:
    names = [m.name for m in pkgutil.walk_packages(gateway.__path__, "gateway.")]
    assert "gateway.dialects.base" in names and "gateway.canonical" in names
    assert [n for n in names if origin(n).endswith(tuple(EXTENSION_SUFFIXES))] == []
    assert [n for n in names if not origin(n).endswith(".py")] == []


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    """What ``pip install .`` installs (the Docker image's build): built here from a copy of the
    files the image copies, without build isolation (no index needed)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "gateway", src / "gateway",
                    ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"))
    assert not (src / "setup.py").exists()
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("chat_gateway-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    files = {p.relative_to(src).as_posix() for p in (src / "gateway").rglob("*") if p.is_file()}
    assert {"gateway/__init__.py", "gateway/cli.py"} <= files
    # every file of the package: its modules, and what it reads beside them (the status page,
    # the dialects' samples, the migrations' template, py.typed)
    assert files - names == set()
    assert {"gateway/py.typed", "gateway/history/migrations/script.py.mako"} <= names
    assert any(n.startswith("gateway/static/") for n in names)
    assert any(n.startswith("gateway/dialects/samples/openai/") for n in names)
    assert "chat-gateway = gateway.cli:main" in entry_points
