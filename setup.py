"""The one build step pyproject.toml cannot declare: the translation core compiled to C.

A stream's cost in the gateway is its translation (framing, decoders, encoders), and that cost is
Python's per call, spread thin over many small calls: compiled by mypyc from the same strictly
typed sources, the modules listed under ``[tool.chat-gateway] compiled`` in pyproject.toml run
two to three times faster. It is the only build: the suite runs against it, and
tests/test_build.py fails on a source edited since its module was compiled.

Compiling type-checks those modules and what they import, with the project's own mypy settings,
so a build needs the gateway's dependencies and their stubs beside mypy: they are its build
requirements (``setup_requires``, which pip installs in the build's own environment).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

from setuptools import setup

ROOT = Path(__file__).parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
COMPILED: list[str] = PROJECT["tool"]["chat-gateway"]["compiled"]

# What type-checking the compiled modules reads beyond the dependencies: the stubs of one
TYPE_STUBS = ["types-PyYAML"]

# The commands that build an extension; pip first asks for the metadata and the build's
# requirements (egg_info, dist_info), which need no compiling.
_BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def extensions() -> list[Any]:
    if not _BUILDS & set(sys.argv[1:]):
        return []
    from mypyc.build import mypycify

    # -O1: as fast here as -O3, in less time; one C file a module: half the compile time of one
    # file for them all, and as fast
    return list(mypycify(COMPILED, opt_level="1", multi_file=True, group_name="gateway"))


setup(setup_requires=PROJECT["project"]["dependencies"] + TYPE_STUBS, ext_modules=extensions())
