"""Config validation finds every problem in one pass, and ``check_structure`` (``check --no-env``)
judges a config without its environment.

Before, a missing ``${VAR}`` stopped validation, and the cross-reference checks (unknown upstream,
a path served twice) ran only once every field was valid, so some problems showed only on a
second run.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gateway.config import check_structure, parse_config
from gateway.dialects import names
from gateway.errors import ConfigError

# Any two registered dialects: which ones does not matter to the config's checks.
ONE, TWO = list(names())[:2]

# One config with a problem of every kind: unknown key, wrong type, wrong enum value, bad URL,
# out-of-range number, a field validator, a missing key, environment variables missing, unknown
# upstreams (as a name and in a list), a path served twice.
MANY = f"""\
server:
  port: ${{GW_PORT}}
  hots: 0.0.0.0
  max_body_bytes: lots
logging:
  level: loud
auth:
  api_keys: ["${{GW_MISSING_KEY}}"]
upstreams:
  a:
    dialect: klingon
    url: ftp://example.com/chat
    timeout: -1
  b:
    dialect: {ONE}
    url: http://127.0.0.1:9004/v1/chat/completions
    headers: {{Authorization: "Bearer ${{GW_MISSING_TOKEN}}"}}
routes:
  - path: /one
    dialect: {ONE}
    upstream: nope
  - path: /one
    dialect: {TWO}
    upstream: [a, {{name: ghost, weight: 2}}]
    retries: {{attempts: 0}}
  - path: two
    dialect: {ONE}
    upstream: b
  - dialect: {ONE}
    upstream: b
"""

PROBLEMS_WITHOUT_ENV = {
    "server.hots": "unknown key",
    "server.max_body_bytes": "valid integer",
    "logging.level": "'debug', 'info', 'warning' or 'error'",
    "upstreams.a.dialect": "unknown dialect 'klingon'",
    "upstreams.a.url": "absolute http:// or https:// URL",
    "upstreams.a.timeout": "greater than 0",
    "routes[1].retries.attempts": "greater than or equal to 1",
    "routes[2].path": "must start with /",
    "routes[3].path": "is required",
    "routes[0].upstream": "unknown upstream 'nope' (known: a, b)",
    "routes[1].upstream[1]": "unknown upstream 'ghost' (known: a, b)",
    "routes[1].path": "/one is already served by routes[0]",
}


def _problems(data: Any, env: dict[str, str] | None) -> dict[str, str]:
    """``where -> message`` of every problem (``env=None``: structure only); each ``where``
    appears once."""
    with pytest.raises(ConfigError) as info:
        if env is None:
            check_structure(data)
        else:
            parse_config(data, env=env)
    problems = info.value.problems
    wheres = [w for w, _ in problems]
    assert len(wheres) == len(set(wheres)), problems
    return dict(problems)


def _assert_problems(found: dict[str, str], expected: dict[str, str]) -> None:
    assert set(found) == set(expected), found
    for where, words in expected.items():
        assert words in found[where], (where, found[where])


def test_every_kind_of_problem_in_one_run() -> None:
    expected = {
        **PROBLEMS_WITHOUT_ENV,
        "server.port": "environment variable GW_PORT is not set",
        "auth.api_keys[0]": "environment variable GW_MISSING_KEY is not set",
        "upstreams.b.headers.Authorization": "environment variable GW_MISSING_TOKEN is not set",
    }
    _assert_problems(_problems(yaml.safe_load(MANY), env={}), expected)


def test_a_value_from_the_environment_is_validated_where_it_lands() -> None:
    env = {"GW_PORT": "eighty", "GW_MISSING_KEY": "k", "GW_MISSING_TOKEN": "t"}
    expected = {**PROBLEMS_WITHOUT_ENV, "server.port": "valid integer"}
    _assert_problems(_problems(yaml.safe_load(MANY), env=env), expected)


def test_structure_only_leaves_the_environment_out() -> None:
    _assert_problems(_problems(yaml.safe_load(MANY), env=None), PROBLEMS_WITHOUT_ENV)


def test_a_missing_variable_is_one_problem_not_two() -> None:
    """The empty value a missing variable leaves would fail its field (and the list and union
    around it): only the variable is reported."""
    data = {
        "server": {"port": "${GW_PORT}", "admin": "${GW_ADMIN}"},
        "auth": {"api_keys": ["${GW_KEY}"]},
        "upstreams": {"u": {"dialect": "${GW_DIALECT}", "url": "${GW_URL}"}},
        "routes": [{"path": "/c", "dialect": ONE,
                    "upstream": ["u", {"name": "u", "weight": "${GW_WEIGHT}"}]}],
    }
    found = _problems(data, env={})
    assert found == {
        "server.port": "environment variable GW_PORT is not set",
        "server.admin": "environment variable GW_ADMIN is not set",
        "auth.api_keys[0]": "environment variable GW_KEY is not set",
        "upstreams.u.dialect": "environment variable GW_DIALECT is not set",
        "upstreams.u.url": "environment variable GW_URL is not set",
        "routes[0].upstream[1].weight": "environment variable GW_WEIGHT is not set",
    }
    env = {"GW_PORT": "9000", "GW_ADMIN": "false", "GW_KEY": "k", "GW_DIALECT": TWO,
           "GW_URL": "http://127.0.0.1:1/chat", "GW_WEIGHT": "2.5"}
    config = parse_config(data, env=env)
    assert config.server.port == 9000 and config.server.admin is False
    assert config.upstreams["u"].dialect == TWO
    assert config.routes[0].upstreams[1].weight == 2.5
    # and without the environment, all of it is left as it stands
    assert check_structure(data) == ["server.port", "server.admin", "auth.api_keys[0]",
                                     "upstreams.u.dialect", "upstreams.u.url",
                                     "routes[0].upstream[1].weight"]


def test_structure_only_accepts_references_wherever_a_value_may_come_from() -> None:
    data = {
        "server": {"host": "${HOST:-0.0.0.0}", "port": "${PORT}",
                   "shutdown_grace": "${GRACE:-30}", "cors": {"allow_credentials": "${CRED}"}},
        "logging": {"format": "${LOG_FORMAT}"},
        "upstreams": {"llm": {"dialect": ONE, "url": "${LLM_URL}",
                              "headers": {"Authorization": "Bearer ${KEY}"},
                              "max_inflight": "${MAX}", "streaming": "${STREAMING}"}},
        "routes": [{"path": "${ROUTE_PATH}", "dialect": ONE, "upstream": "${UPSTREAM}",
                    "retries": {"attempts": "${ATTEMPTS}"}},
                   {"path": "/b", "dialect": TWO, "upstream": "llm"}],
    }
    assert len(check_structure(data)) == 12
    # and the same config is still checked where no reference stands
    data["routes"][1]["upstream"] = "nope"
    data["upstreams"]["llm"]["timeout"] = "soon"
    _assert_problems(_problems(data, env=None), {
        "routes[1].upstream": "unknown upstream 'nope'",
        "upstreams.llm.timeout": "valid number",
    })


def test_cross_references_run_beside_field_errors() -> None:
    data = {
        "upstreams": {"u": {"dialect": ONE, "url": "http://h/x", "timeout": 0}},
        "routes": [{"path": "/a", "dialect": TWO, "upstream": "u",
                    "strategy": "random"},
                   {"path": "/a/stream", "dialect": ONE, "upstream": ["u", "v"]},
                   "not a route"],
    }
    _assert_problems(_problems(data, env={}), {
        "upstreams.u.timeout": "greater than 0",
        "routes[0].strategy": "'failover', 'round-robin' or 'weighted'",
        "routes[1].path": "/a/stream is already served by routes[0]",
        "routes[1].upstream[1]": "unknown upstream 'v' (known: u)",
        "routes[2]": "valid dictionary",
    })


def _route_policy(value: Any) -> Any:
    return parse_config({
        "upstreams": {"b": {"dialect": ONE, "url": "http://127.0.0.1:9004/chat"}},
        "routes": [{"path": "/one", "dialect": ONE, "upstream": "b",
                    **({} if value is None else {"on_unsupported": value})}]}).routes[0]


def test_on_unsupported_is_one_word_or_one_per_field() -> None:
    from gateway.carry import DEFAULT_POLICIES, GOVERNED

    assert _route_policy(None).policies == DEFAULT_POLICIES
    assert _route_policy("reject").policies == "reject"
    named = _route_policy({"hosted_tools": "reject"}).policies
    assert named == {**DEFAULT_POLICIES, "hosted_tools": "reject"}
    assert _route_policy({"default": "drop", "images": "reject"}).policies == {
        **dict.fromkeys(GOVERNED, "drop"), "images": "reject"}
    with pytest.raises(ConfigError, match="on_unsupported"):
        _route_policy({"hosted_tool": "drop"})
    with pytest.raises(ConfigError, match="on_unsupported"):
        _route_policy({"tools": "ignore"})


def test_every_governed_field_may_be_named() -> None:
    from typing import get_args

    from gateway.carry import GOVERNED
    from gateway.config import GovernedField

    assert set(get_args(GovernedField)) == {"default", *GOVERNED}
