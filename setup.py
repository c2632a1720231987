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

import os
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

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

    # -O1: as fast here as -O3, in less time (-Os, for less code to miss in the caches, is
    # slower: docs/performance.md); one C file a module: half the compile time of one file for
    # them all, and as fast
    built = list(mypycify(["--config-file=", "--no-site-packages", "--ignore-missing-imports",
                           *COMPILED],
                          opt_level="1", multi_file=True, group_name="gateway"))
    for extension in built:
        # Hidden symbols: the library exports only its module's init function (what CPython
        # looks up; the modules reach each other's code through its capsules, never the dynamic
        # linker), so a call between its C files is a direct call, not a jump through the PLT
        # that lets another library interpose: less code, and fewer branches to predict, on
        # every call (what that is worth: docs/performance.md).
        extension.extra_compile_args.append("-fvisibility=hidden")
    return built


class ParallelBuildExt(build_ext):
    """``build_ext`` compiling an extension's C files side by side: mypyc puts every module in
    one shared library, which distutils compiles a file after another (most of the install's
    time, one core idle)."""

    def build_extension(self, ext: Any) -> None:
        compiler = self.compiler
        compile_files = compiler.compile

        def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            if len(sources) < 2:
                return list(compile_files(sources, *args, **kwargs))
            objects = list(compile_files(sources[:1], *args, **kwargs))  # (makes the dirs)
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                for built in pool.map(lambda one: compile_files([one], *args, **kwargs),
                                      sources[1:]):
                    objects.extend(built)
            return objects

        compiler.compile = compile_all
        try:
            super().build_extension(ext)
        finally:
            del compiler.compile  # (the instance's own again: its class's method)


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuildExt})
