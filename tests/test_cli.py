"""``chat-gateway``: check, schema, --help, serve (with a graceful drain on SIGTERM), and the demo
(its config, its backends and the curl commands it prints), all of it for whatever dialects the
registry holds: no test names one."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from fakes import (
    TEXT,
    Fakes,
    Script,
    client_request,
    free_port,
    known_to_a_new_process,
    reader_for,
)

from gateway.app import create_app
from gateway.cli import _parser, main
from gateway.config import load_config, parse_config
from gateway.demo import (
    curl_commands,
    demo_backend_app,
    demo_config,
    is_page_route,
    page_dialects,
)
from gateway.dialects import client_path, get, names, routes_by_prefix
from gateway.errors import ConfigError
from gateway.route_paths import distinct_paths

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_YAML = ROOT / "config" / "compose.yaml"
def _at(i: int) -> str:
    """The ``i``-th dialect (cyclically) a new ``chat-gateway`` process knows: the config below
    is checked in this process and in new ones."""
    known = known_to_a_new_process()
    return known[i % len(known)]


@cache
def good() -> str:
    """A valid config: two upstreams, three routes, dialects from the registry."""
    return f"""\
server:
  port: 8081
upstreams:
  a:
    dialect: {_at(3)}
    url: http://127.0.0.1:9004/v1/chat/completions
  b:
    dialect: {_at(0)}
    url: http://127.0.0.1:9001/chat
routes:
  - path: /one
    dialect: {_at(3)}
    upstream: a
  - path: /two
    dialect: {_at(2)}
    upstream: [a, b]
  - path: /three
    dialect: {_at(1)}
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
    path = write(tmp_path, good())
    assert main(["check", "--config", path]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "3 routes" in out and "2 upstreams" in out


def test_check_unknown_upstream_names_its_yaml_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, good().replace("    upstream: b\n", "    upstream: nope\n"))
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert "routes[2].upstream" in err
    assert "nope" in err


def test_check_unknown_upstream_in_a_list(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, good().replace("upstream: [a, b]", "upstream: [a, zzz]"))
    assert main(["check", "--config", path]) == 1
    assert "routes[1].upstream[1]" in capsys.readouterr().err


@pytest.mark.parametrize(("edit", "where"), [
    (("  port: 8081\n", "  port: 8081\n  hots: x\n"), "server.hots"),
    (("    dialect: {a}\n", "    dialect: {a}\n    timout: 3\n"), "upstreams.a.timout"),
    (("  - path: /one\n", "  - path: /one\n    stratgy: failover\n"), "routes[0].stratgy"),
])
def test_check_unknown_key_names_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          edit: tuple[str, str], where: str) -> None:
    old, new = (e.format(a=_at(3)) for e in edit)
    path = write(tmp_path, good().replace(old, new, 1))
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    assert f"{where}: unknown key" in err


def test_check_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = good().replace(f"dialect: {_at(3)}\n    url", "dialect: klingon\n    url", 1)
    text = text.replace("    upstream: b\n", "    upstream: nope\n")
    text = text.replace("  port: 8081\n", "  port: ${GW_TEST_UNSET_PORT}\n")
    path = write(tmp_path, text)
    assert main(["check", "--config", path]) == 1
    err = capsys.readouterr().err
    # a field error, a cross-reference and a missing variable: all three in one run
    assert "upstreams.a.dialect: unknown dialect 'klingon'" in err
    assert "routes[2].upstream: unknown upstream 'nope'" in err
    assert "server.port: environment variable GW_TEST_UNSET_PORT is not set" in err
    assert len(err.splitlines()) == 4  # the heading and one line per problem


def test_check_bad_yaml_and_missing_file(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", write(tmp_path, "routes: [\n  - {")]) == 1
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["check", "--config", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_check_interpolates_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = good().replace("port: 8081", "port: ${GW_TEST_PORT}").replace(
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
    assert script.exists(), f"{script} is missing: pip install -e . (make test does)"
    ok = subprocess.run([str(script), "check", "--config", write(tmp_path, good())],
                        capture_output=True, text=True, timeout=30, check=False)
    assert ok.returncode == 0, ok.stderr
    bad_path = write(tmp_path, good().replace("    upstream: b\n", "    upstream: nope\n"),
                     "b.yaml")
    bad = subprocess.run([str(script), "check", "--config", bad_path], capture_output=True,
                         text=True, timeout=30, check=False)
    assert bad.returncode == 1
    assert "routes[2].upstream" in bad.stderr


def test_module_help() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("serve", "check", "translate", "demo", "schema", "reload"):
        assert command in result.stdout


def test_translate_offers_every_registered_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["translate", "--help"])
    assert done.value.code == 0
    # argparse wraps lines at spaces and after hyphens
    text = " ".join(re.sub(r"(?<=-)\n\s*", "", capsys.readouterr().out).split())
    assert "--on-unsupported {reject,drop}" in text
    listed = ", ".join(names())
    assert f"--from DIALECT the dialect of the body on stdin: {listed}" in text
    assert f"--to DIALECT the dialect to write: {listed}" in text
    for name in names():  # and each one's summary
        assert f"{name}: {' '.join(get(name).summary.split())}" in text
    with pytest.raises(SystemExit) as refused:
        main(["translate", "--from", "klingon", "--to", names()[0], "--request"])
    assert refused.value.code == 2
    assert "invalid choice: 'klingon'" in capsys.readouterr().err


# --- schema -------------------------------------------------------------------------------------


def test_version_is_the_installed_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert importlib.metadata.version("chat-gateway") == declared
    assert capsys.readouterr().out == f"chat-gateway {declared}\n"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_and_flag_says_what_it_does() -> None:
    commands = _subcommands()
    assert set(commands) == {"serve", "check", "translate", "demo", "demo-backends", "schema",
                             "reload"}
    for name, parser in commands.items():
        assert parser.description, name
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = f"{name} {action.option_strings[0]}"
            assert action.help and len(action.help) > 20, flag
            # each says its default, or that it (or one of its group) is required
            if action.required:
                assert "required" in action.help, flag
            else:
                assert "default" in action.help or "is required" in action.help, flag
                if action.default not in (None, False):
                    assert "%(default)s" in action.help or str(action.default) in action.help, flag
        # and argparse can render it (a stray % in a help text cannot)
        assert f"usage: chat-gateway {name}" in parser.format_help()


def _demo_data() -> Any:
    return demo_config()


def _compose_data() -> Any:
    return yaml.safe_load(COMPOSE_YAML.read_text(encoding="utf-8"))


def _schema(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["schema"]) == 0
    schema: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return schema


@pytest.mark.parametrize("shipped", [_demo_data, _compose_data], ids=["demo", "compose"])
def test_schema_covers_shipped_configs(shipped: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import jsonschema

    schema = _schema(capsys)
    data = shipped()
    jsonschema.Draft202012Validator(schema).validate(data)
    parse_config(data, env={})  # and the config itself is valid


def test_schema_rejects_what_config_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    import jsonschema

    schema = _schema(capsys)
    validator = jsonschema.Draft202012Validator(schema)
    routes = schema["properties"]["routes"]["items"]
    route = schema["$defs"][routes["$ref"].rsplit("/", 1)[-1]] if "$ref" in routes else routes
    assert {"path", "dialect", "upstream"} <= set(route["required"])
    base = {"upstreams": {"u": {"dialect": names()[0], "url": "http://127.0.0.1:9/c"}},
            "routes": [{"path": "/c", "dialect": names()[0], "upstream": "u"}]}
    validator.validate(base)
    assert not validator.is_valid({**base, "bogus": 1})
    assert not validator.is_valid({**base, "routes": [{**base["routes"][0],
                                                       "stratgy": "failover"}]})
    assert not validator.is_valid({**base, "routes": [{**base["routes"][0],
                                                       "dialect": "klingon"}]})
    # the route options dialects declare are in it
    for name in names():
        options = get(name).route_options
        if options is not None:
            assert set(options.model_fields) <= set(route["properties"]), name


@pytest.mark.parametrize("dialect", names())
def test_unknown_route_key_names_its_path_for_every_dialect(dialect: str) -> None:
    """Whether or not the route's dialect declares route options, an unknown key is named by its
    YAML path."""
    data = {"upstreams": {"u": {"dialect": dialect, "url": "http://127.0.0.1:9/chat"}},
            "routes": [{"path": "/c", "dialect": dialect, "upstream": "u", "stratgy": "x"}]}
    with pytest.raises(ConfigError) as bad:
        parse_config(data, env={})
    assert ("routes[0].stratgy", "unknown key") in bad.value.problems


# --- serve --------------------------------------------------------------------------------------


async def test_serve_answers_then_drains_on_sigterm(tmp_path: Path, fakes: Fakes) -> None:
    """(Scripted: a long answer in paced pieces, still flowing when SIGTERM comes.)"""
    known = known_to_a_new_process()  # `serve` runs in a process of its own
    client, upstream = known[3 % len(known)], known[(3 + 1) % len(known)]
    fake = await fakes.start(upstream, Script(scripted=True, pieces=8, chunk_delay=0.15))
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "shutdown_grace": 5},
        "upstreams": {"u": {"dialect": fake.name, "url": fake.url, "timeout": 5}},
        "routes": [{"path": "/chat", "dialect": client, "upstream": "u"}],
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
            sent, body, headers = client_request(client, "/chat", stream=True)
            async with http.post(base + sent, json=body, headers=headers) as resp:
                assert resp.status == 200
                first = await resp.content.readany()
                assert first
                proc.send_signal(signal.SIGTERM)
                t0 = asyncio.get_running_loop().time()
                rest = await resp.read()
            view = reader_for(client).read_stream(first + rest)
            assert view.text == TEXT and view.error is None
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
    path = write(tmp_path, good().replace("    upstream: b\n", "    upstream: nope\n"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", path, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(20):
        _, err = await proc.communicate()
    assert proc.returncode == 1
    assert b"routes[2].upstream" in err


# --- the demo -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", names())
async def test_demo_backend_answers_whole_and_streamed(aiohttp_client: Any,
                                                       dialect: str) -> None:
    client = await aiohttp_client(demo_backend_app(dialect, token_delay=0.0))
    caps = get(dialect).capabilities
    path, body, headers = client_request(dialect, get(dialect).default_path, stream=False,
                                         text="Ping?")
    whole = await client.post(path, json=body, headers=headers)
    assert whole.status == 200
    view = reader_for(dialect).read_whole(await whole.json())
    assert f"the {dialect} demo backend" in view.text and '"Ping?"' in view.text
    if caps.usage_whole:
        assert view.usage == (12, 30)
    if caps.citations:
        assert "gateway-guide.pdf#page=1" in view.citations
    path, body, headers = client_request(dialect, get(dialect).default_path, stream=True,
                                         text="Ping?")
    streamed = await client.post(path, json=body, headers=headers)
    assert streamed.status == 200
    assert streamed.headers["Content-Type"] == get(dialect).stream_content_type
    sview = reader_for(dialect).read_stream(await streamed.read())
    assert sview.text == view.text and sview.error is None
    if caps.usage_stream:
        assert sview.usage == (12, 30)
    bad = await client.post(client_path(get(dialect), get(dialect).default_path, "m",
                                        stream=False), data=b"nope")
    assert bad.status == 400
    assert reader_for(dialect).read_error(await bad.json())


def test_demo_config_is_built_from_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    """Every registered dialect has a route (its clients) and a demo backend (an upstream), and
    each route goes to another dialect's backend, so that every demo answer is translated."""
    config = parse_config(demo_config(), env={})
    own = [r for r in config.routes if not is_page_route(r)]
    assert [r.dialect for r in own] == list(names())
    assert sorted(u.dialect for u in config.upstreams.values()) == sorted(names())
    paths = distinct_paths(names())
    assert len(set(paths.values())) == len(paths)
    for route in own:
        assert route.path == paths[route.dialect]
        assert route.path.endswith(get(route.dialect).default_path)
        [target] = route.upstreams
        assert config.upstreams[target.name].dialect != route.dialect or len(names()) == 1
    # a dialect with a chat page has a route to every backend, for the page to switch between
    pages = [r for r in config.routes if is_page_route(r)]
    assert [(r.dialect, r.path, r.upstreams[0].name) for r in pages] == [
        (d.name, f"{d.default_path}/{u}", u) for d in page_dialects() for u in config.upstreams]
    # `demo --print-config` writes that same config, as YAML
    assert main(["demo", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == demo_config()


def test_demo_config_needs_no_file(tmp_path: Path) -> None:
    """The demo works from any directory: its config comes from the installed package (and the
    registry of that process: the dialects it knows)."""
    result = subprocess.run([sys.executable, "-m", "gateway", "demo", "--print-config"],
                            capture_output=True, text=True, timeout=30, cwd=tmp_path,
                            check=False)
    assert result.returncode == 0, result.stderr
    config = parse_config(yaml.safe_load(result.stdout), env={})
    own = [r for r in config.routes if not is_page_route(r)]
    assert tuple(r.dialect for r in own) == known_to_a_new_process()
    paths = distinct_paths(r.dialect for r in own)
    assert all(r.path == paths[r.dialect] for r in own)
    # and config/demo.yaml, kept for those who serve or read the demo's config as a file, is
    # that very output (regenerate it with `chat-gateway demo --print-config` when it differs)
    shipped = (Path(__file__).resolve().parent.parent / "config" / "demo.yaml").read_text()
    assert yaml.safe_load(shipped) == yaml.safe_load(result.stdout)


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
                                                             tmp_path: Path) -> None:
    """One curl line per route: its dialect's sample request, asking for a stream the way the
    dialect does; and each one, pasted against the running demo, streams a translated answer."""
    config = parse_config(demo_config(), env={})
    commands = curl_commands(config, "http://127.0.0.1:8080")
    routes = [r for r in config.routes if not is_page_route(r)]  # a chat page's are the page's
    assert len(commands) == len(routes) == len(names())
    for route, command in zip(routes, commands, strict=True):
        d = get(route.dialect)
        url, headers, data = _parse_curl(command)
        assert url == "http://127.0.0.1:8080" + client_path(d, route.path, "demo-model",
                                                            stream=True)
        assert command.splitlines()[0] == f"# {route.dialect} client -> {route.upstreams[0].name}"
        assert headers["Content-Type"] == "application/json"
        reader = reader_for(d)
        asked = reader.read_request(orjson.loads(data))
        sample = reader.read_request(d.samples.requests["text"])
        assert asked.messages == sample.messages  # the dialect's own sample request
        by_accept = not d.stream_path and d.stream_by_accept
        assert (headers.get("Accept") == "text/event-stream") is by_accept
        by_path = d.stream_path is not None or routes_by_prefix(d)
        assert bool(asked.stream) is (not by_path and not d.stream_by_accept)
    # point the demo config at demo backends on free ports, then run every command
    backends = {name: await aiohttp_client(demo_backend_app(name, token_delay=0.0))
                for name in names()}
    data = demo_config()
    for up in data["upstreams"].values():
        port = backends[up["dialect"]].port
        up["url"] = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", up["url"])
    # its history store in this test's directory, not the demo's one in the shared temp dir
    # (which other test workers, and a running demo, may have open)
    own = {"CHAT_GATEWAY_DEMO_HISTORY": str(tmp_path / "history.db")}
    gw = await aiohttp_client(create_app(parse_config(data, env=own)))
    base = str(gw.make_url("")).rstrip("/")
    for route, command in zip(routes, curl_commands(parse_config(data, env={}), base),
                              strict=True):
        url, headers, body = _parse_curl(command)
        assert url.startswith(base + route.path)
        resp = await gw.post(url.removeprefix(base), data=body, headers=headers)
        assert resp.status == 200, command
        assert resp.headers["Content-Type"] == get(route.dialect).stream_content_type
        view = reader_for(route.dialect).read_stream(await resp.read())
        assert "demo backend" in view.text, command
        assert view.error is None
