"""``chat-gateway schema``: a valid draft 2020-12 JSON Schema that describes every key, accepts
every config the docs and deploy/ ship, allows ``${VAR}`` wherever ``check`` does, and rejects
what ``check`` rejects. Validated with the jsonschema library, as an editor or a CI job would."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from jsonschema import Draft202012Validator

from gateway.cli import main
from gateway.config import check_structure, parse_config
from gateway.demo import demo_config
from gateway.errors import ConfigError
from gateway.schema import ENV_REFERENCE_SCHEMA, config_json_schema

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
SCALARS = {"integer", "number", "boolean"}


def _examples() -> Iterator[tuple[str, Any]]:
    """(name, parsed config) of every config the repository shows or ships."""
    for path in sorted((ROOT / "config").glob("*.yaml")):
        yield f"config/{path.name}", yaml.safe_load(path.read_text())
    # the demo's config is made from the registry (`chat-gateway demo --print-config`)
    yield "demo", demo_config()
    manifest = yaml.safe_load((ROOT / "deploy/kubernetes/configmap.yaml").read_text())
    for key, text in manifest["data"].items():
        yield f"configmap.yaml:{key}", yaml.safe_load(text)
    for doc in DOCS:
        blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / doc).read_text(), re.S)
        for i, block in enumerate(b for b in blocks if "routes:" in b):
            yield f"{doc}#{i}", yaml.safe_load(block)


EXAMPLES = dict(_examples())


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return config_json_schema()


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator(schema)


def _errors(validator: Draft202012Validator, data: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(data)]


def test_the_command_prints_a_draft_2020_12_schema(schema: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert orjson.loads(capsys.readouterr().out) == schema
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert {"upstreams", "routes"} <= set(schema["required"])


def _models(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "GatewayConfig", schema
    yield from schema["$defs"].items()


def test_every_key_has_a_description(schema: dict[str, Any]) -> None:
    for name, model in _models(schema):
        assert model.get("description"), name
        for key, prop in model["properties"].items():
            assert prop.get("description", "").strip(), f"{name}.{key}"
    # taken from the field docstrings in gateway/config.py
    server = schema["$defs"]["ServerConfig"]["properties"]
    assert server["max_body_bytes"]["description"] == "Request bodies past this get 413."


def _walk(node: Any, where: str, env_ok: bool) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every schema node with its place, and whether it is a branch of an ``anyOf`` that also
    allows a ``${VAR}`` reference."""
    if isinstance(node, dict):
        yield where, node, env_ok
        for key, value in node.items():
            if key == "anyOf":
                ok = ENV_REFERENCE_SCHEMA in value
                for i, branch in enumerate(value):
                    yield from _walk(branch, f"{where}/anyOf/{i}", ok)
            elif isinstance(value, dict | list) and key not in ("default", "enum"):
                yield from _walk(value, f"{where}/{key}", False)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{where}/{i}", False)


def test_references_are_allowed_beside_every_non_string_value(schema: dict[str, Any]) -> None:
    typed = [(where, node, ok) for where, node, ok in _walk(schema, "#", False)
             if node.get("type") in SCALARS or "enum" in node or "const" in node]
    assert len(typed) > 20  # the walk found the config's numbers, booleans and enums
    assert [where for where, _, ok in typed if not ok] == []


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_shipped_and_documented_configs_validate(validator: Draft202012Validator,
                                                 name: str) -> None:
    data = EXAMPLES[name]
    assert _errors(validator, data) == []
    check_structure(data)  # and check agrees


def test_the_examples_cover_every_place_configs_are_shown() -> None:
    names = set(EXAMPLES)
    assert {"demo", "config/compose.yaml", "configmap.yaml:config.yaml",
            "README.md#0", "docs/scenarios.md#0", "docs/operations.md#0"} <= names
    # one of them takes the port from the environment
    assert any(isinstance(d.get("server"), dict) and "${PORT" in str(d["server"].get("port"))
               for d in EXAMPLES.values())


README = EXAMPLES["README.md#0"]


@pytest.mark.parametrize(("place", "value"), [
    (("server", "port"), "${PORT}"),
    (("server", "port"), "${PORT:-8080}"),
    (("server", "admin"), "${ADMIN_ON}"),
    (("server", "shutdown_grace"), "${GRACE:-30}"),
    (("logging", "level"), "${LOG_LEVEL}"),
    (("upstreams", "llm", "dialect"), "${LLM_DIALECT}"),
    (("upstreams", "llm", "max_inflight"), "${LLM_MAX}"),
    (("routes", 1, "retries", "attempts"), "${ATTEMPTS}"),
    (("routes", 1, "strategy"), "${STRATEGY:-failover}"),
])
def test_a_reference_is_accepted_where_check_accepts_it(
        validator: Draft202012Validator, place: tuple[str | int, ...], value: str) -> None:
    data = copy.deepcopy(README)
    node = data
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    assert _errors(validator, data) == []
    where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in place).lstrip(".")
    assert where in check_structure(data)


@pytest.mark.parametrize(("place", "value"), [
    (("server", "port"), "abc"),
    (("server", "port"), "$PORT"),          # not a reference: ${...} only
    (("server", "port"), "${1PORT}"),       # not a variable name
    (("server", "port"), 70000),
    (("server", "admin"), "yes please"),
    (("server", "hots"), "0.0.0.0"),
    (("upstreams", "llm", "dialect"), "klingon"),
    (("upstreams", "llm", "timeout"), 0),
    (("routes", 1, "strategy"), "random"),
    (("routes",), []),
])
def test_what_check_rejects_the_schema_rejects(
        validator: Draft202012Validator, place: tuple[str | int, ...], value: Any) -> None:
    data = copy.deepcopy(README)
    node = data
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    assert _errors(validator, data) != []
    with pytest.raises(ConfigError):
        check_structure(data)
    with pytest.raises(ConfigError):
        parse_config(data, env={"GATEWAY_KEY": "k", "OPENAI_API_KEY": "k"})
