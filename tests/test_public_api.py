"""The gateway uses aiohttp through its public API only: no private module imported, and no
private name of aiohttp's (a module's or a class's, as aiohttp itself defines them) read, set or
looked up by string in a module of the gateway that uses aiohttp. A minor release of aiohttp may
move any of those; its public API it keeps."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import aiohttp
import pytest

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
PRIVATE_MODULES = {"base_protocol", "web_protocol", "http_parser", "http_writer", "client_proto",
                   "client_reqrep", "web_server"}
"""Modules with no underscore that aiohttp's docs do not present as API: their classes are
reached through ``aiohttp.web`` and ``aiohttp`` where they are public at all."""


@functools.cache
def _aiohttp_private_names() -> frozenset[str]:
    """Every private name aiohttp's own sources define: module globals, class members and the
    attributes its methods set on ``self``."""
    names: set[str] = set()
    for source in Path(aiohttp.__path__[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _private(node.attr) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                    and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) \
                    and _private(node.id):
                names.add(node.id)
    return frozenset(names)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources() -> list[Path]:
    return sorted(p for p in GATEWAY.rglob("*.py")
                  if "aiohttp" in p.read_text(encoding="utf-8"))


def test_the_check_sees_what_it_looks_for() -> None:
    names = _aiohttp_private_names()
    # names the retired lane, router skip and direct writer read
    assert {"_handle", "_eof_sent", "_drain_helper", "_current_request", "_messages",
            "_acquired"} <= names
    assert _sources(), "the gateway's modules that use aiohttp"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(GATEWAY)))
def test_no_private_aiohttp_name_in_the_gateway(path: Path) -> None:
    private = _aiohttp_private_names()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("aiohttp."):
            part = node.module.split(".")[1]
            if part in PRIVATE_MODULES or part.startswith("_"):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found.extend(f"line {node.lineno}: import {a.name}" for a in node.names
                         if a.name.startswith("aiohttp.")
                         and (a.name.split(".")[1] in PRIVATE_MODULES
                              or a.name.split(".")[1].startswith("_")))
        elif isinstance(node, ast.Attribute) and node.attr in private and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr"):
            found.extend(f"line {node.lineno}: {node.func.id}(..., {a.value!r})"
                         for a in node.args[1:2]
                         if isinstance(a, ast.Constant) and a.value in private)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                text = ast.unparse(base)
                if text.startswith(("web.", "aiohttp.")) and text not in (
                        "web.View", "aiohttp.abc.AbstractAccessLogger"):
                    found.append(f"line {node.lineno}: class {node.name}({text})")
    assert not found, f"{path.relative_to(GATEWAY)}: {found}"
