"""The build's one optional step: ``CHAT_GATEWAY_COMPILE=1`` compiles the translation core and
the per-request path with mypyc (the compiler that ships with mypy, from the same strict
annotations the type check reads).

Everything else about the package is declared in pyproject.toml; without the variable this adds
nothing and the package is pure Python. The modules compiled are listed there, under
``[tool.chat-gateway] compiled``: the per-frame work of a stream (framing, canonical events, the
pipeline, the dialects' decoders and encoders), which measured 8-16% less CPU per stream compiled,
and the path of a request from the lane to the upstream connection and back (the answer, its
sink, the attempts, the upstream client), 13-22% fewer instructions a request again
(docs/performance.md).

Compiling type-checks the modules and what they import, so it runs where the gateway's
dependencies and mypy are installed, without build isolation::

    pip install '.[compile]' && CHAT_GATEWAY_COMPILE=1 pip install --no-build-isolation --no-deps .
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from setuptools import setup


def compiled_modules() -> list[str]:
    with (Path(__file__).parent / "pyproject.toml").open("rb") as f:
        listed: list[str] = tomllib.load(f)["tool"]["chat-gateway"]["compiled"]
    return listed


def extensions() -> list[object]:
    if os.environ.get("CHAT_GATEWAY_COMPILE", "") in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit("CHAT_GATEWAY_COMPILE=1 needs mypy installed beside the gateway's dependencies "
                 "(pip install '.[compile]'), and pip's --no-build-isolation")
    root = Path(__file__).parent
    paths = []
    for name in compiled_modules():
        package = root.joinpath(*name.split(".")) / "__init__.py"
        paths.append(str(package.relative_to(root)) if package.exists()
                     else name.replace(".", "/") + ".py")
    return list(mypycify(paths))


setup(ext_modules=extensions())
