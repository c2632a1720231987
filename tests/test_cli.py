"""``chat-gateway``: check, schema, --help, serve (with a graceful drain on SIGTERM), and the demo
(its backends and the curl commands it prints)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from fakes import (
    CHATUI,
    OPENAI,
    P0128,
    P0529,
    TEXT,
    Fakes,
    Script,
    free_port,
    read_stream,
    read_whole,
)

import gateway.demo
from gateway.app import create_app
from gateway.cli import curl_commands, main
from gateway.config import load_config, parse_config
from gateway.demo import DEMO_BACKENDS, demo_backend_app
from gateway.dialects import DIALECT_NAMES

ROOT = Path(__file__).resolve().parent.parent
DEMO_YAML = ROOT / "config" / "demo.yaml"
COMPOSE_YAML = ROOT / "config" / "compose.yaml"
GOOD = """\
server:
  port: 8081
upstreams:
  a:
    dialect: openai
    url: http://127.0.0.1:9004/v1/chat/completions
  b:
    dialect: protocol-2024-01-28
    url: http://127.0.0.1:9001/chat
routes:
  - path: /one
    dialect: openai
    upstream: a
  - path: /two
    dialect: chatui
    upstream: [a, b]
  - path: /three
    dialect: protocol-2024-05-29
    upstream: b
"""


def write(tmp_path: Path, text: str, name: str = "gateway.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})}, check=False)


# --- check --------------------------------------------------------------------------------------


def test_check_good_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["check", "--config", path]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "3 routes" in out and "2 upstreams" in out


def test_check_unknown_upstream_names_its_yaml_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD.replace("    upstream: b\n", "    upstream: nope\n"))
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert "routes[2].upstream" in err
    assert "nope" in err


def test_check_unknown_upstream_in_a_list(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD.replace("upstream: [a, b]", "upstream: [a, zzz]"))
    assert main(["check", "--config", path]) == 1
    assert "routes[1].upstream[1]" in capsys.readouterr().err


@pytest.mark.parametrize(("edit", "where"), [
    (("  port: 8081\n", "  port: 8081\n  hots: x\n"), "server.hots"),
    (("    dialect: openai\n", "    dialect: openai\n    timout: 3\n"), "upstreams.a.timout"),
    (("  - path: /one\n", "  - path: /one\n    stratgy: failover\n"), "routes[0].stratgy"),
])
def test_check_unknown_key_names_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          edit: tuple[str, str], where: str) -> None:
    path = write(tmp_path, GOOD.replace(*edit, 1))
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert f"{where}: unknown key" in err


def test_check_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("dialect: openai\n    url", "dialect: klingon\n    url", 1)
    text = text.replace("    upstream: b\n", "    upstream: nope\n")
    path = write(tmp_path, text)
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert "upstreams.a.dialect" in err


def test_check_bad_yaml_and_missing_file(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", write(tmp_path, "routes: [\n  - {")]) == 1
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["check", "--config", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_check_interpolates_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("port: 8081", "port: ${GW_TEST_PORT}").replace(
        "http://127.0.0.1:9001/chat", "http://${GW_TEST_HOST:-127.0.0.9}:9001/chat").replace(
        "    url: http://127.0.0.1:9004/v1/chat/completions\n",
        "    url: http://127.0.0.1:9004/v1/chat/completions\n"
        "    headers: {api-key: \"${GW_TEST_KEY}\"}\n")
    path = write(tmp_path, text)
    monkeypatch.setenv("GW_TEST_PORT", "9123")
    monkeypatch.setenv("GW_TEST_KEY", "k-123")
    monkeypatch.delenv("GW_TEST_HOST", raising=False)
    assert main(["check", "--config", path]) == 0
    config = load_config(path)
    assert config.server.port == 9123
    assert config.upstreams["b"].url == "http://127.0.0.9:9001/chat"
    assert config.upstreams["a"].headers == {"api-key": "k-123"}
    monkeypatch.setenv("GW_TEST_HOST", "10.0.0.5")
    assert load_config(path).upstreams["b"].url == "http://10.0.0.5:9001/chat"
    capsys.readouterr()
    monkeypatch.delenv("GW_TEST_KEY")
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert "upstreams.a.headers.api-key" in err and "GW_TEST_KEY" in err


def test_check_through_the_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "chat-gateway"
    if not script.exists():
        pytest.skip("the chat-gateway script is not installed in this environment")
    good = subprocess.run([str(script), "check", "--config", write(tmp_path, GOOD)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert good.returncode == 0, good.stderr
    bad_path = write(tmp_path, GOOD.replace("    upstream: b\n", "    upstream: nope\n"), "b.yaml")
    bad = subprocess.run([str(script), "check", "--config", bad_path], capture_output=True,
                         text=True, timeout=30, check=False)
    assert bad.returncode == 1
    assert "routes[2].upstream" in bad.stderr


def test_module_help() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("serve", "check", "translate", "demo", "schema", "reload"):
        assert command in result.stdout


# --- schema -------------------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = schema["$defs"][name]
    return node


def _fits(schema: dict[str, Any], node: dict[str, Any], value: Any) -> bool:
    node = _resolve(schema, node)
    kinds = {"object": dict, "array": list, "string": str, "integer": int,
             "number": (int, float), "boolean": bool, "null": type(None)}
    if "anyOf" in node:
        return any(_fits(schema, n, value) for n in node["anyOf"])
    kind = node.get("type")
    if kind is None:
        return True
    return isinstance(value, kinds[kind])  # type: ignore[arg-type]


def _check_against(schema: dict[str, Any], node: dict[str, Any], value: Any, where: str,
                   used: set[str]) -> None:
    """Every key ``value`` uses is a property of the schema at that place (walking ``$ref``,
    ``anyOf``, ``items`` and ``additionalProperties``), required keys are present and enums hold."""
    node = _resolve(schema, node)
    if "anyOf" in node:
        branches = [n for n in node["anyOf"] if _fits(schema, n, value)]
        assert branches, f"{where}: {value!r} fits no branch"
        _check_against(schema, branches[0], value, where, used)
        return
    if "enum" in node:
        assert value in node["enum"], f"{where}: {value!r} not in {node['enum']}"
    if "const" in node:
        assert value == node["const"], where
    if isinstance(value, dict):
        assert node.get("type", "object") == "object", where
        props = node.get("properties", {})
        for key in node.get("required", []):
            assert key in value, f"{where}: required key {key} missing"
        for key, sub in value.items():
            path = f"{where}.{key}" if where else key
            if key in props:
                used.add(path)
                _check_against(schema, props[key], sub, path, used)
            else:
                extra = node.get("additionalProperties")
                assert isinstance(extra, dict), f"{path}: not in the schema"
                _check_against(schema, extra, sub, path, used)
    elif isinstance(value, list):
        assert node.get("type") == "array", where
        for i, item in enumerate(value):
            _check_against(schema, node.get("items", {}), item, f"{where}[{i}]", used)
    else:
        assert _fits(schema, node, value), f"{where}: {value!r} is not {node.get('type')}"


@pytest.mark.parametrize("config_file", [DEMO_YAML, COMPOSE_YAML], ids=["demo", "compose"])
def test_schema_covers_shipped_configs(config_file: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = orjson.loads(capsys.readouterr().out)
    assert schema["type"] == "object"
    assert {"upstreams", "routes"} <= set(schema["required"])
    data = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    used: set[str] = set()
    _check_against(schema, schema, data, "", used)
    assert {"server.port", "upstreams", "routes"} <= used
    # and the config itself is valid
    parse_config(data, env={})


def test_schema_rejects_what_config_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = orjson.loads(capsys.readouterr().out)
    route = _resolve(schema, schema["properties"]["routes"]["items"])
    assert {"path", "dialect", "upstream"} <= set(route["required"])
    assert route.get("additionalProperties") is False
    dialect = _resolve(schema, route["properties"]["dialect"])
    assert set(dialect["enum"]) == set(DIALECT_NAMES)
    with pytest.raises(AssertionError):
        _check_against(schema, schema, {"upstreams": {}, "routes": [], "bogus": 1}, "", set())


# --- serve --------------------------------------------------------------------------------------


async def test_serve_answers_then_drains_on_sigterm(tmp_path: Path, fakes: Fakes) -> None:
    fake = await fakes.start(P0128, Script(pieces=8, chunk_delay=0.15))
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "shutdown_grace": 5},
        "upstreams": {"u": {"dialect": P0128, "url": fake.url, "timeout": 5}},
        "routes": [{"path": "/chat", "dialect": OPENAI, "upstream": "u"}],
    }
    path = write(tmp_path, yaml.safe_dump(config))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", path, "--log-format", "json",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with asyncio.timeout(15):
                while True:
                    assert proc.returncode is None, await proc.stderr.read()  # type: ignore[union-attr]
                    try:
                        async with http.get(f"{base}/healthz") as health:
                            if health.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
            # the admin endpoint, through `chat-gateway reload`, reloads the same file
            code = await asyncio.to_thread(main, ["reload", "--url", base])
            assert code == 0
            body = {"model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "q"}]}
            async with http.post(f"{base}/chat", json=body) as resp:
                assert resp.status == 200
                first = await resp.content.readany()
                assert first
                proc.send_signal(signal.SIGTERM)
                t0 = asyncio.get_running_loop().time()
                rest = await resp.read()
            view = read_stream(OPENAI, first + rest)
            assert view.text == TEXT and view.finished and view.error is None
            async with asyncio.timeout(8):
                code = await proc.wait()
            assert code == 0
            assert asyncio.get_running_loop().time() - t0 < 6
            with pytest.raises(aiohttp.ClientConnectionError):
                async with http.get(f"{base}/healthz"):
                    pass
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = (await proc.stdout.read()).decode()  # type: ignore[union-attr]
    events = [orjson.loads(line)["event"] for line in out.splitlines() if line.startswith("{")]
    assert "listening" in events and "draining" in events and "stopped" in events
    assert events.count("access") == 1  # the stream (health checks are not logged)


async def test_serve_refuses_bad_config(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("    upstream: b\n", "    upstream: nope\n"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", path, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(20):
        _, err = await proc.communicate()
    assert proc.returncode == 1
    assert b"routes[2].upstream" in err


# --- the demo -----------------------------------------------------------------------------------


@pytest.fixture
def fast_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.demo, "_TOKEN_DELAY", 0.0)


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
async def test_demo_backend_answers_whole_and_streamed(aiohttp_client: Any, fast_demo: None,
                                                       dialect: str) -> None:
    client = await aiohttp_client(demo_backend_app(dialect))
    _, path = DEMO_BACKENDS[dialect]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Ping?"}]}
    whole = await client.post(path, json=body)
    assert whole.status == 200
    view = read_whole(dialect, await whole.json())
    assert f"the {dialect} demo backend" in view.text and '"Ping?"' in view.text
    if dialect == OPENAI:
        assert view.usage == {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}
    else:
        assert "gateway-guide.pdf#page=1" in view.citations
    headers = {"Accept": "text/event-stream"} if dialect == CHATUI else {}
    stream_path = path + "/stream" if dialect == P0529 else path
    streamed = await client.post(stream_path, json={**body, "stream": True}, headers=headers)
    assert streamed.status == 200
    sview = read_stream(dialect, await streamed.read())
    assert sview.text == view.text and sview.finished
    bad = await client.post(path, data=b"nope")
    assert bad.status == 400


def _parse_curl(command: str) -> tuple[str, dict[str, str], bytes]:
    line = command.splitlines()[-1]
    args = shlex.split(line)
    assert args[0] == "curl"
    headers: dict[str, str] = {}
    url, data = "", b""
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "-H":
            name, _, value = args[i + 1].partition(": ")
            headers[name] = value
            i += 2
        elif arg == "-d":
            data = args[i + 1].encode()
            i += 2
        elif arg.startswith("http"):
            url = arg
            i += 1
        else:
            i += 1
    return url, headers, data


async def test_curl_commands_cover_every_demo_route_and_work(aiohttp_client: Any,
                                                             fast_demo: None) -> None:
    config = load_config(DEMO_YAML)
    commands = curl_commands(config, "http://127.0.0.1:8080")
    urls = [_parse_curl(c)[0] for c in commands]
    for route in config.routes:
        assert any(u == f"http://127.0.0.1:8080{route.path}" for u in urls), route.path
        if route.dialect == P0529:
            assert f"http://127.0.0.1:8080{route.path}/stream" in urls
        assert any(f"-> {route.upstreams[0].name}" in c for c in commands)
    for c in commands:
        orjson.loads(_parse_curl(c)[2])  # each body is valid JSON
    # point the demo config at demo backends on free ports, then run every command
    backends = {name: await aiohttp_client(demo_backend_app(name)) for name in DIALECT_NAMES}
    data = yaml.safe_load(DEMO_YAML.read_text(encoding="utf-8"))
    for up in data["upstreams"].values():
        port = backends[up["dialect"]].port
        up["url"] = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", up["url"])
    gw = await aiohttp_client(create_app(parse_config(data, env={})))
    base = str(gw.make_url("")).rstrip("/")
    for c, route_url in zip(curl_commands(parse_config(data, env={}), base), urls, strict=True):
        url, headers, body = _parse_curl(c)
        assert url.removeprefix(base) == route_url.removeprefix("http://127.0.0.1:8080")
        resp = await gw.post(url.removeprefix(base), data=body, headers=headers)
        assert resp.status == 200, c
        route = next(r for r in config.routes if url.removeprefix(base).startswith(r.path))
        raw = await resp.read()
        streamed = resp.headers["Content-Type"] != "application/json"
        view = read_stream(route.dialect, raw) if streamed else read_whole(
            route.dialect, orjson.loads(raw))
        assert "demo backend" in view.text, c
        assert view.finished and view.error is None
