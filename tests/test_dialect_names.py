"""No module outside gateway/dialects/ names a dialect: grep proves it.

A registered dialect's name may appear as a string literal only in gateway/dialects/ (the
dialects themselves and their registry), tests/dialects/ (each dialect's own tests, and the
fixture dialect), tests/strict/ (each dialect's strict reader) and bench/wire/ (each dialect as
the benchmark writes and reads it). Everything else reads the
registry and asks capabilities. Python's own parser finds the literals, so text in comments and
docstrings that mentions a dialect is not counted; a literal that *is* a name is, and so is a
name selected in an embedded config (``dialect: openai``) or a CLI line (``--from chatui``).
Data files (json, sse, yaml, md) are not code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gateway.dialects import names

ROOT = Path(__file__).resolve().parent.parent
CODE = [ROOT / "gateway", ROOT / "tests", ROOT / "bench"]
# bench/wire/ is the benchmark's own reading of each dialect's wire format (one module per
# dialect, independent of gateway/ like tests/strict/), so a gateway bug cannot hide in shared code.
MAY_NAME = [ROOT / "gateway" / "dialects", ROOT / "tests" / "dialects", ROOT / "tests" / "strict",
            ROOT / "bench" / "wire"]

ALLOWED: dict[str, str] = {
    # The peers (LiteLLM, Portkey) speak OpenAI's Chat Completions only: the comparison with them
    # is defined on that one dialect, whatever else is registered.
    "bench/peers.py": "benchmarks against peers that speak only the OpenAI dialect",
}


def _selectors(dialects: list[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(dialects, key=len, reverse=True))
    return re.compile(
        rf"(?:\bdialect[\"']?\s*:\s*[\"']?|--(?:from|to)[ =])({alternatives})(?![\w-])")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            ids.add(id(body[0].value))
    return ids


def namings(path: Path, dialects: list[str]) -> list[str]:
    """``line: literal`` for each string literal of ``path`` that names a dialect."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    selectors = _selectors(dialects)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if node.value in dialects or (id(node) not in skip and selectors.search(node.value)):
            found.append((node.lineno, f"{node.lineno}: {node.value[:60]!r}"))
    return [hit for _, hit in sorted(found)]


def code_files() -> list[Path]:
    return sorted(p for root in CODE for p in root.rglob("*.py")
                  if not any(p.is_relative_to(m) for m in MAY_NAME)
                  and ".venv" not in p.parts)


def test_no_module_outside_the_dialects_names_a_dialect() -> None:
    dialects = list(names())
    found = {p.relative_to(ROOT).as_posix(): hits for p in code_files()
             if (hits := namings(p, dialects))}
    unexpected = {p: hits for p, hits in found.items() if p not in ALLOWED}
    assert not unexpected, "dialects named outside gateway/dialects:\n" + "\n".join(
        f"  {p}:{hit}" for p, hits in unexpected.items() for hit in hits)
    cleaned = sorted(set(ALLOWED) - set(found))
    assert not cleaned, f"these no longer name a dialect: remove them from ALLOWED: {cleaned}"


def test_the_grep_sees_what_it_must(tmp_path: Path) -> None:
    """The scan itself: a literal that is a name, and a name selected in an embedded config or
    a command line, are found; a docstring or a longer string that mentions one is not."""
    dialects = list(names())
    name = dialects[0]
    source = (f'"""Talks {name} in a docstring."""\n'
              f'A = "{name}"\n'
              f'B = "upstreams: {{a: {{dialect: {name}}}}}"\n'
              f'C = ["translate", "--from {name}"]\n'
              f'D = "a sentence that mentions {name} in passing"\n'
              f'E = f"{{x}}/{name}/text.stream"\n'
              f"F = '{{\"dialect\": \"{name}\"}}'\n")
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    hits = namings(probe, dialects)
    assert [h.split(":", 1)[0] for h in hits] == ["2", "3", "4", "7"], hits
    assert code_files() and all(p.suffix == ".py" for p in code_files())
