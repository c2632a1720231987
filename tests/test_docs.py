"""The configs the docs show are configs the gateway accepts, and the files they name exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gateway.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
def _env_for(block: str) -> dict[str, str]:
    """A made-up value for every ``${VAR}`` the block reads (as its reader's shell would have)."""
    return {name: f"{name.lower()}-test" for name in re.findall(r"\$\{(\w+)", block)}


def _yaml_blocks(path: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", (ROOT / path).read_text(), re.S)


@pytest.mark.parametrize("path", ["README.md", "docs/scenarios.md"])
def test_documented_configs_validate(path: str) -> None:
    blocks = [b for b in _yaml_blocks(path) if "routes:" in b]
    assert blocks, f"{path} shows no config"
    for block in blocks:
        parse_config(yaml.safe_load(block), env=_env_for(block))


def test_readme_first_screen_has_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().split("---", 1)[0]
    commands = re.findall(r"^make (\w+)", head, re.M)
    assert commands == ["demo", "test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci/run").read_text()


_REPO_PATH = re.compile(r"(?<![\w/.-])(?:config|deploy|docs|bench|gateway|tests)/[\w./<>*-]*")
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_docs_name_only_files_the_repo_has() -> None:
    """A file the docs send the reader to is there (placeholders such as ``run-<time>.json``
    aside)."""
    named: dict[str, set[str]] = {}
    for doc in DOCS:
        for token in _REPO_PATH.findall((ROOT / doc).read_text()):
            path = token.rstrip(".-")
            if "<" not in path and "*" not in path:
                named.setdefault(path, set()).add(doc)
    assert len(named) > 10, named  # the pattern still finds what the docs link to
    missing = {path: sorted(docs) for path, docs in named.items() if not (ROOT / path).exists()}
    assert not missing, missing
