"""The configs the docs show are configs the gateway accepts, and the files they name exist."""

from __future__ import annotations

import json
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


# --- docs/performance.md, the README's performance section and bench/results/ ------------------

_PERF = ROOT / "docs/performance.md"
_RETIRED = re.compile(r"bench-compiled|http_layer|DirectSink|\blane\b|make compiled",
                      re.I)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_performance_doc_is_a_doc_not_a_diary() -> None:
    text = _PERF.read_text()
    assert len(text.splitlines()) < 300
    assert not _RETIRED.findall(text), _RETIRED.findall(text)
    # a git hash of one run belongs in bench/results/, not in the doc's prose
    assert not re.findall(r"\bgit [0-9a-f]{7}\b", text)


def test_performance_doc_names_only_run_py_flags_that_exist() -> None:
    source = (ROOT / "bench/run.py").read_text()
    flags = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', source))
    running = _section(_PERF.read_text(), "## Running it")
    named = set(re.findall(r"`(--[\w-]+)", running))
    assert named, "the flag table is gone"
    assert named <= flags, named - flags
    assert "--loop" in named  # the yardstick's loop is a choice the reader must know of


def test_performance_targets_are_the_ones_run_py_checks() -> None:
    source = (ROOT / "bench/run.py").read_text()
    throughput = re.search(r"^THROUGHPUT = \{(.*?)\}", source, re.S | re.M)
    assert throughput
    limits = dict(re.findall(r'\("\w+", "(whole|stream)"\): ([\d.]+)', throughput[1]))
    assert limits == {"whole": "0.65", "stream": "0.8"}  # identity and translating alike
    targets = _section(_PERF.read_text(), "## Targets")
    assert f"≥ {limits['whole']}x whole" in targets
    assert f"≥ {limits['stream']}x streamed" in targets


def test_performance_doc_keeps_the_latest_run_rows() -> None:
    latest = _section(_PERF.read_text(), "## Latest run")
    table = [r.split("|")[1:-1] for r in latest.splitlines() if r.startswith("| ")]
    rows = [cells[0].strip() for cells in table]
    assert rows[1:] == ["identity whole", "identity streamed", "translating whole",
                        "translating streamed", "first byte added p50 / p99",
                        "RSS under 128 streams"]
    assert "uvloop pass-through" in table[0][1] and "target" in table[0][2]
    assert "≥ 0.65x" in latest and "≥ 0.8x" in latest


def test_readme_performance_is_one_table_and_one_paragraph() -> None:
    readme = (ROOT / "README.md").read_text()
    assert not _RETIRED.findall(readme), _RETIRED.findall(readme)
    perf = _section(readme, "## Performance")
    tables = re.findall(r"(?:^\|.*\n)+", perf, re.M)
    assert len(tables) == 1
    head, _, *rows = tables[0].splitlines()
    assert [c.strip() for c in head.strip("|").split("|")][1:] == [
        "gateway", "uvloop pass-through", "nginx", "Portkey", "LiteLLM"]
    assert [r.split("|")[1].strip() for r in rows] == [
        "translating, whole", "translating, streamed", "identity, whole", "identity, streamed"]
    prose = [p for p in perf.split("\n\n")[1:] if p.strip() and not p.startswith("|")]
    assert len(prose) == 1 and "docs/performance.md" in prose[0]


def test_bench_results_history_is_data() -> None:
    results = ROOT / "bench/results"
    assert len((results / "README.md").read_text().splitlines()) <= 10
    files = sorted(results.glob("history-*.json"))
    assert len(files) > 20
    runs = []
    for path in files:
        run = json.loads(path.read_text())
        assert run["git"] and path.stem.endswith(run["git"]), path
        assert path.name.startswith(f"history-{run['sequence']:02d}-")
        if "rows" in run:
            assert run["rows"] and all(len(r) == len(run["columns"]) for r in run["rows"]), path
            assert all(len(t) == len(run["target_columns"]) for t in run["targets"]), path
        if run["run"] is not None:
            runs.append(run["run"])
    assert runs == sorted(runs)  # the files' order is the runs' order


# --- docs/reliability.md and bench/results/soak-history.md -------------------------------------

_RELIABILITY = ROOT / "docs/reliability.md"


def test_reliability_doc_is_a_doc_not_a_diary() -> None:
    """Guarantees, their tests and one soak table; the earlier soaks are data. The retired server
    side is named only where the latest soak says what it measured."""
    text = _RELIABILITY.read_text()
    assert len(text.splitlines()) < 350
    assert not re.findall(r"\bgit [0-9a-f]{7}\b", text)
    soak = _section(text, "## Load and soak")
    assert soak.count("| streams completed |") == 1
    latest = soak[soak.index("### Latest soak"):]
    outside = text.replace(latest, "")
    assert not _RETIRED.findall(outside), _RETIRED.findall(outside)
    assert "bench/results/soak-history.md" in latest
    history = (ROOT / "bench/results/soak-history.md").read_text()
    assert history.count("| streams completed |") > 10
    assert re.findall(r"\| streams completed \|.*", latest) == \
        re.findall(r"\| streams completed \|.*", history)[-1:]  # the latest is the last run


def test_reliability_doc_names_what_the_code_and_tests_have() -> None:
    """Every ``test_...`` the doc cites is a test of the suite, and the edge's names it uses are
    gateway/edge.py's."""
    text = _RELIABILITY.read_text()
    suite = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    cited = set(re.findall(r"\b(test_\w+)`", text))
    assert len(cited) > 10
    missing = {name for name in cited if not re.search(rf"def {name}\(", suite)}
    assert not missing, missing
    edge = (ROOT / "gateway/edge.py").read_text()
    for name in ("EdgeConnection", "edge_middleware", "EdgeListener", "BadRequestLog"):
        assert name in text and re.search(rf"^((class|async def|def) {name}\b|{name} = )", edge,
                                          re.M), name
