"""The build under test: the modules pyproject.toml lists under ``[tool.chat-gateway] compiled``
run compiled exactly when the run says so (``GATEWAY_BUILD=compiled``, set by ``make
unit-compiled``), and no other module ever does. So the compiled run cannot silently test the
interpreted modules, nor the interpreted run a stale compiled one."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import FunctionType

import pytest

import gateway

ROOT = Path(__file__).resolve().parent.parent
COMPILED = os.environ.get("GATEWAY_BUILD", "source") == "compiled"


def listed() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names: list[str] = config["tool"]["chat-gateway"]["compiled"]
    return names


def origin(name: str) -> str:
    """The file the module is (or would be) imported from."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return spec.origin


def is_compiled(name: str) -> bool:
    return origin(name).endswith(tuple(EXTENSION_SUFFIXES))


@pytest.mark.parametrize("name", listed())
def test_a_listed_module_runs_as_the_build_says(name: str) -> None:
    assert is_compiled(name) is COMPILED, f"{name} from {origin(name)}"
    assert importlib.import_module(name).__file__ == origin(name)


def test_no_other_module_is_ever_compiled() -> None:
    # dialects.base above all: plugin dialects subclass what it defines, and an interpreted
    # class cannot subclass a compiled one.
    others = {m.name for m in pkgutil.walk_packages(gateway.__path__, "gateway.")} - set(listed())
    assert "gateway.dialects.base" in others
    assert [name for name in sorted(others) if is_compiled(name)] == []


def test_the_run_imports_the_gateway_beside_its_tests() -> None:
    # make unit-compiled copies the tests next to the compiled package: a run that picked up
    # the source tree's gateway instead would pass the checks above for the wrong reason.
    assert Path(gateway.__file__).resolve().parent.parent == ROOT


# Classes the compiled build makes on every request or stream. @dataclass writes its __init__ as
# a Python function, which mypyc leaves interpreted (and a named tuple's __new__ too): each of
# these defines its own, so that the compiled build runs it natively.
PER_REQUEST = [
    ("gateway.canonical", "Usage"),
    ("gateway.canonical", "StreamStart"),
    ("gateway.canonical", "StreamFinish"),
    ("gateway.exchange.answer", "Progress"),
    ("gateway.exchange.attempts", "Answered"),
    ("gateway.exchange.attempts", "AttemptContext"),
    ("gateway.exchange.attempts", "AttemptLog"),
    ("gateway.exchange.outcome", "Attempt"),
    ("gateway.exchange.outcome", "Outcome"),
    ("gateway.dialects.openai_responses", "_Item"),
]


@pytest.mark.parametrize(("module", "name"), PER_REQUEST)
def test_a_per_request_class_is_built_by_compiled_code(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls.__init__, FunctionType) is not COMPILED, (name, cls.__init__)
    if isinstance(cls.__init__, FunctionType):  # the source run: the class's own, not one
        assert cls.__init__.__code__.co_filename.endswith(".py")  # generated (in "<string>")
