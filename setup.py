"""The one build step pyproject.toml cannot declare: the hot path compiled to C.

A stream's cost in the gateway is its translation (framing, decoders, encoders) and the hop
around it (the upstream client, the answer), and that cost is Python's per call, spread thin over
many small calls: compiled by mypyc from the same strictly typed sources, the modules listed
under ``[tool.chat-gateway] compiled`` in pyproject.toml run two to three times faster. It is
the only build: the suite runs against it, and tests/test_build.py fails on a source edited since
its module was compiled.

Compiling type-checks those modules and what they import: here with mypy's defaults and no
config file (the project's strict check is `make typecheck`'s, with every dependency installed),
so that the build needs nothing beyond its own requirements (pyproject.toml's build-system): the
dependencies' types are Any to it, also when they are installed where it runs (its type check
looks in no site-packages: one build, whatever the environment), and the compiled code calls them
as Python does.
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

# The commands that build an extension; pip first asks for the metadata and the build's
# requirements (egg_info, dist_info), which need no compiling.
_BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def extensions() -> list[Any]:
    if not _BUILDS & set(sys.argv[1:]):
        return []
    from mypyc.build import mypycify

    # -O1: as fast here as -O3, in less time; one C file a module: half the compile time of one
    # file for them all, and as fast
    return list(mypycify(["--config-file=", "--no-site-packages", "--ignore-missing-imports",
                          *COMPILED],
                         opt_level="1", multi_file=True, group_name="gateway"))


setup(ext_modules=extensions())
