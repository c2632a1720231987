"""Named keys with limits, through the real app on the embedded store: which keys are accepted,
the routes a key may use (403), its limits (429 in the client's own dialect, with
``Retry-After`` and both providers' limit headers on every answer), what its requests used
(settled from the usage the answers report, else estimated and counted as such), its metrics
and access log, ``GET /admin/usage``, a reload that keeps the counters, and ``check``."""

from __future__ import annotations

import asyncio
import io
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import yaml
from aiohttp.test_utils import TestClient
from fakes import (
    USAGE,
    Fakes,
    FakeUpstream,
    Script,
    client_request,
    error_message,
    eventually,
    free_port,
    upstream_config,
)

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get, names
from gateway.errors import ConfigError
from gateway.keys import RELOADER
from gateway.log import configure_logging

TEAM_KEY = "team-a-secret-5e1f"
OTHER_KEY = "team-b-secret-77aa"
PLAIN_KEY = "plain-key-0c0c"
OPERATOR = {"Authorization": f"Bearer {PLAIN_KEY}"}
REPORTING = [n for n in names() if get(n).capabilities.usage_whole
             and get(n).capabilities.usage_stream]
"""Dialects whose answers report usage, whole and streamed."""


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf, level="debug")
    yield buf
    structlog.configure(**saved)


def config(fake: FakeUpstream, dialect: str, keys: list[dict[str, Any]],
           **limits: Any) -> dict[str, Any]:
    return {"upstreams": {"u": upstream_config(fake)},
            "routes": [{"path": "/a", "dialect": dialect, "upstream": "u"},
                       {"path": "/b", "dialect": dialect, "upstream": "u"}],
            "auth": {"api_keys": [PLAIN_KEY], "keys": keys},
            "limits": limits}


async def gateway(aiohttp_client: Any, cfg: dict[str, Any], **app: Any) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(cfg, env={}), **app),
        server_kwargs={"handler_cancellation": True})
    return client


async def ask(gw: TestClient[Any, Any], dialect: str, key: str, route: str = "/a", *,
              stream: bool = False) -> tuple[int, dict[str, str], bytes]:
    path, body, headers = client_request(dialect, route, stream=stream)
    async with gw.post(path, json=body, headers={**headers, "Authorization": f"Bearer {key}"}
                       ) as r:
        return r.status, dict(r.headers), await r.read()


async def usage(gw: TestClient[Any, Any]) -> dict[str, Any]:
    async with gw.get("/admin/usage", headers=OPERATOR) as r:
        assert r.status == 200
        body: dict[str, Any] = await r.json()
        return {k["name"]: k for k in body["keys"]}


async def metrics(gw: TestClient[Any, Any]) -> str:
    async with gw.get("/metrics", headers=OPERATOR) as r:
        return await r.text()


def team(**limits: int) -> dict[str, Any]:
    return {"name": "team-a", "key": TEAM_KEY, "limits": limits}


async def test_named_keys_and_plain_keys_are_both_accepted(aiohttp_client: Any,
                                                           fakes: Fakes) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    gw = await gateway(aiohttp_client, config(fake, d, [
        team(requests_per_minute=100), {"name": "team-b", "key": OTHER_KEY}]))
    for key in (TEAM_KEY, OTHER_KEY, PLAIN_KEY):
        status, headers, _ = await ask(gw, d, key)
        assert status == 200
        # only a key with limits has limit headers
        assert ("x-ratelimit-limit-requests" in headers) == (key == TEAM_KEY)
    status, _, _ = await ask(gw, d, "no-such-key")
    assert status == 401


@pytest.mark.parametrize("dialect", names())
async def test_a_key_off_its_routes_is_refused_403_in_its_dialect(aiohttp_client: Any,
                                                                  fakes: Fakes,
                                                                  dialect: str) -> None:
    fake = await fakes.start(dialect)
    gw = await gateway(aiohttp_client, config(fake, dialect, [
        {"name": "team-a", "key": TEAM_KEY, "routes": ["/a/"]}]))
    assert (await ask(gw, dialect, TEAM_KEY, "/a"))[0] == 200
    status, _, body = await ask(gw, dialect, TEAM_KEY, "/b")
    assert status == 403
    assert "/b" in error_message(dialect, orjson.loads(body))
    assert len(fake.seen) == 1
    assert (await ask(gw, dialect, PLAIN_KEY, "/b"))[0] == 200  # a plain key has every route


@pytest.mark.parametrize("dialect", names())
async def test_over_its_limit_a_key_gets_a_429_in_its_dialect(aiohttp_client: Any, fakes: Fakes,
                                                              dialect: str) -> None:
    fake = await fakes.start(dialect)
    gw = await gateway(aiohttp_client, config(fake, dialect, [
        team(requests_per_minute=2, tokens_per_minute=100_000)]))
    seen = [await ask(gw, dialect, TEAM_KEY, stream=True), await ask(gw, dialect, TEAM_KEY)]
    assert [s for s, _, _ in seen] == [200, 200]
    for i, (_, headers, _) in enumerate(seen):  # the stream's and the whole answer's headers
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == str(1 - i)
        assert headers["anthropic-ratelimit-requests-limit"] == "2"
        assert headers["anthropic-ratelimit-requests-remaining"] == str(1 - i)
        assert headers["x-ratelimit-limit-tokens"] == "100000"
        assert headers["anthropic-ratelimit-tokens-limit"] == "100000"
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    status, headers, body = await ask(gw, dialect, TEAM_KEY)
    assert status == 429
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert abs(int(headers["retry-after-ms"]) - 1000 * int(headers["Retry-After"])) <= 1000
    assert "x-should-retry" not in headers  # the SDKs wait a minute and retry
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "requests_per_minute" in error_message(dialect, orjson.loads(body))
    assert len(fake.seen) == 2  # the refused request never reached the upstream
    assert (await ask(gw, dialect, PLAIN_KEY))[0] == 200  # other keys are not limited
    text = await metrics(gw)
    assert 'gateway_key_limited_total{key="team-a",limit="requests_per_minute"} 1.0' in text
    assert 'gateway_key_requests_total{key="team-a",route="/a",status="200"} 2.0' in text
    assert 'gateway_key_requests_total{key="team-a",route="/a",status="429"} 1.0' in text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", REPORTING)
async def test_tokens_are_settled_from_the_usage_answers_report(aiohttp_client: Any,
                                                                fakes: Fakes, dialect: str,
                                                                stream: bool) -> None:
    fake = await fakes.start(dialect, Script(scripted=True))
    gw = await gateway(aiohttp_client, config(fake, dialect, [team(tokens_per_day=10**6)]))
    for _ in range(3):
        assert (await ask(gw, dialect, TEAM_KEY, stream=stream))[0] == 200
    await asyncio.sleep(0)  # the settlements run off the request's path
    got = await usage(gw)
    spent = 3 * sum(USAGE)
    assert got["team-a"]["totals"] == {
        "requests": 3, "limited": 0, "tokens": spent, "prompt_tokens": 3 * USAGE[0],
        "completion_tokens": 3 * USAGE[1], "estimated_tokens": 0}
    assert got["team-a"]["windows"]["tokens_per_day"]["used"] == spent  # reservations replaced
    text = await metrics(gw)
    assert f'gateway_key_tokens_total{{key="team-a",kind="prompt"}} {3 * USAGE[0]}.0' in text
    assert f'gateway_key_tokens_total{{key="team-a",kind="completion"}} {3 * USAGE[1]}.0' in text
    assert 'kind="estimated"' not in text


async def test_tokens_no_answer_reports_are_estimated_and_said_so(aiohttp_client: Any,
                                                                   fakes: Fakes) -> None:
    d = REPORTING[0]
    fake = await fakes.start(d, Script(scripted=True, usage=None))
    gw = await gateway(aiohttp_client, config(fake, d, [team(tokens_per_day=10**6)]))
    assert (await ask(gw, d, TEAM_KEY))[0] == 200
    await asyncio.sleep(0)
    totals = (await usage(gw))["team-a"]["totals"]
    assert totals["tokens"] > 0
    assert totals["estimated_tokens"] == totals["tokens"]
    assert 'gateway_key_tokens_total{key="team-a",kind="estimated"}' in await metrics(gw)


async def test_a_failed_answer_gives_its_reservation_back(aiohttp_client: Any,
                                                         fakes: Fakes) -> None:
    d = names()[0]
    fake = await fakes.start(d, Script(status=400))
    gw = await gateway(aiohttp_client, config(fake, d, [team(tokens_per_minute=10**6)]))
    assert (await ask(gw, d, TEAM_KEY))[0] == 400
    await asyncio.sleep(0)
    got = (await usage(gw))["team-a"]
    assert got["windows"]["tokens_per_minute"]["used"] == 0
    assert got["totals"]["requests"] == 1 and got["totals"]["tokens"] == 0


async def test_max_concurrent_counts_requests_in_flight(aiohttp_client: Any,
                                                        fakes: Fakes) -> None:
    d = names()[0]
    release = asyncio.Event()
    fake = await fakes.start(d, Script(hold_before=release))
    gw = await gateway(aiohttp_client, config(fake, d, [team(max_concurrent=2)]))
    held = [asyncio.create_task(ask(gw, d, TEAM_KEY)) for _ in range(2)]
    await eventually(lambda: len(fake.seen) == 2)
    assert (await usage(gw))["team-a"]["in_flight"] == 2
    status, headers, body = await ask(gw, d, TEAM_KEY)
    assert status == 429 and "max_concurrent" in error_message(d, orjson.loads(body))
    assert headers["Retry-After"] == "1"
    release.set()
    assert [s for s, _, _ in await asyncio.gather(*held)] == [200, 200]
    await asyncio.sleep(0)
    assert (await usage(gw))["team-a"]["in_flight"] == 0
    assert (await ask(gw, d, TEAM_KEY))[0] == 200


async def test_a_reload_keeps_the_counters(aiohttp_client: Any, fakes: Fakes,
                                           tmp_path: Path) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    cfg = config(fake, d, [team(requests_per_minute=3)])
    path = tmp_path / "gw.yaml"
    path.write_bytes(orjson.dumps(cfg))
    gw = await gateway(aiohttp_client, cfg, config_path=path)
    assert [(await ask(gw, d, TEAM_KEY))[0] for _ in range(2)] == [200, 200]
    cfg["auth"]["keys"] = [team(requests_per_minute=4),
                           {"name": "team-b", "key": OTHER_KEY, "limits": {}}]
    path.write_bytes(orjson.dumps(cfg))
    assert await gw.app[RELOADER]() == []
    # two counted before the reload, the new limit of 4: two more
    assert [(await ask(gw, d, TEAM_KEY))[0] for _ in range(3)] == [200, 200, 429]
    assert (await ask(gw, d, OTHER_KEY))[0] == 200  # a key the reload added
    got = await usage(gw)
    assert got["team-a"]["totals"]["requests"] == 4
    assert got["team-b"]["limits"] == {} and got["team-b"]["totals"]["requests"] == 1


async def test_the_access_log_names_the_key_and_never_shows_it(aiohttp_client: Any,
                                                               fakes: Fakes,
                                                               logs: io.StringIO) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    gw = await gateway(aiohttp_client, config(fake, d, [team(requests_per_minute=5)]))
    await ask(gw, d, TEAM_KEY)
    await ask(gw, d, PLAIN_KEY)
    lines = [orjson.loads(line) for line in logs.getvalue().splitlines()]
    access = [line for line in lines if line.get("event") == "access"]
    assert [line["key"] for line in access] == ["team-a", None]
    assert TEAM_KEY not in logs.getvalue()


async def test_the_usage_is_for_the_operator_only(aiohttp_client: Any, fakes: Fakes) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    gw = await gateway(aiohttp_client, config(fake, d, [team(requests_per_minute=5)]))
    async with gw.get("/admin/usage", headers={"Authorization": f"Bearer {TEAM_KEY}"}) as r:
        assert r.status == 401
    got = await usage(gw)
    assert got["team-a"]["limits"] == {"requests_per_minute": 5}
    assert got["team-a"]["windows"]["requests_per_minute"] == {
        "limit": 5, "used": 0, "remaining": 5, "reset_seconds": 0}
    assert TEAM_KEY.encode() not in orjson.dumps(got)


@pytest.mark.parametrize("policy,status", [("allow", 200), ("deny", 503)])
async def test_an_unreachable_store_gets_the_policy(aiohttp_client: Any, fakes: Fakes,
                                                    logs: io.StringIO, policy: str,
                                                    status: int) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    from fakes import closed_port

    gw = await gateway(aiohttp_client, config(
        fake, d, [team(requests_per_minute=1)], store=f"redis://127.0.0.1:{closed_port()}/0",
        on_store_error=policy, timeout=0.5))
    got = [await ask(gw, d, TEAM_KEY) for _ in range(3)]
    assert [s for s, _, _ in got] == [status] * 3
    if status == 503:
        assert got[0][1]["Retry-After"] == "1"
        assert error_message(d, orjson.loads(got[0][2]))
    text = await metrics(gw)
    # one call failed; the next requests got the policy without asking (retry_interval)
    assert 'gateway_limits_store_errors_total{op="admit"} 1.0' in text
    if policy == "deny":
        assert 'gateway_key_limited_total{key="team-a",limit="store_unavailable"} 3.0' in text
    events = [orjson.loads(line)["event"] for line in logs.getvalue().splitlines()]
    assert events.count("limits_store_unreachable") == 1


@pytest.mark.parametrize("keys,limits,where", [
    ([{"name": "a", "key": "k", "limits": {"tokens_per_hour": 5}}], {},
     "auth.keys[0].limits.tokens_per_hour"),
    ([{"name": "a", "key": "k"}, {"name": "a", "key": "k2"}], {}, "auth"),
    ([{"name": "a", "key": "k"}, {"name": "b", "key": "k"}], {}, "auth"),
    ([{"name": "a", "key": PLAIN_KEY}], {}, "auth"),
    ([{"name": "a b", "key": "k"}], {}, "auth.keys[0].name"),
    ([{"name": "a", "key": "k", "routes": ["/nowhere"]}], {}, "auth.keys[0].routes[0]"),
    ([{"name": "a", "key": "k"}], {"store": "http://127.0.0.1:6379"}, "limits.store"),
    ([{"name": "a", "key": "k"}], {"store": "redis://127.0.0.1:6379/zero"}, "limits.store"),
    ([{"name": "a", "key": "k"}], {"on_store_error": "maybe"}, "limits.on_store_error"),
])
def test_check_names_each_problem_of_the_keys(keys: list[dict[str, Any]],
                                              limits: dict[str, Any], where: str) -> None:
    cfg = {"upstreams": {"u": {"dialect": names()[0], "url": "http://127.0.0.1:9/"}},
           "routes": [{"path": "/a", "dialect": names()[0], "upstream": "u"}],
           "auth": {"api_keys": [PLAIN_KEY], "keys": keys}, "limits": limits}
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, env={})
    assert [w for w, _ in e.value.problems] == [where]


async def test_the_status_page_shows_each_keys_usage(aiohttp_client: Any, fakes: Fakes) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    gw = await gateway(aiohttp_client, config(fake, d, [
        team(requests_per_minute=7, max_concurrent=3), {"name": "team-b", "key": OTHER_KEY}]))
    await ask(gw, d, TEAM_KEY)
    await asyncio.sleep(0)
    async with gw.get("/api/status", headers=OPERATOR) as r:
        rows = (await r.json())["keys"]
    assert rows[0]["key"] == "team-a" and rows[0]["requests_per_minute"] == "1 / 7"
    assert rows[0]["in_flight"] == 0 and rows[0]["requests"] == 1
    assert rows[1] == {"key": "team-b"}
    async with gw.get("/", headers=OPERATOR) as r:
        html = await r.text()
    assert "team-a" in html and "1 / 7" in html
    assert TEAM_KEY not in html


def test_with_workers_and_the_memory_store_the_start_says_limits_are_per_worker(
        tmp_path: Path) -> None:
    d = names()[0]
    cfg = {"upstreams": {"u": upstream_config(d, "http://127.0.0.1:9/")},
           "routes": [{"path": "/a", "dialect": d, "upstream": "u"}],
           "auth": {"keys": [team(requests_per_minute=5)]}}
    path = tmp_path / "gw.yaml"
    path.write_bytes(orjson.dumps(cfg))
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--port",
             str(port), "--workers", "2", "--log-format", "json"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        _ready(f"http://127.0.0.1:{port}/readyz", proc)
        first = orjson.loads(log.read_bytes().splitlines()[0])  # said before any worker
    finally:
        proc.send_signal(signal.SIGTERM)  # once the workers serve: the supervisor's clean path
        proc.wait(timeout=60)
    assert first["event"] == "limits_per_worker" and first["workers"] == 2
    assert "each of the 2 workers" in first["note"]


def test_the_worked_example_of_the_docs_is_a_config_check_accepts() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs/operations.md").read_text()
    section = doc[doc.index("## Keys with limits"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    env = {name: f"{name.lower()}-value" for name in re.findall(r"\$\{(\w+)", block.group(1))}
    cfg = parse_config(yaml.safe_load(block.group(1)), env=env)
    assert [k.name for k in cfg.auth.keys] == ["team-a", "batch", "dashboards"]
    assert cfg.limits.store.startswith("redis://")


@pytest.mark.parametrize("keys", [[], [{"name": "team-b", "key": OTHER_KEY}]],
                         ids=["no named keys", "a named key without limits"])
async def test_without_limits_the_store_is_never_asked(aiohttp_client: Any, fakes: Fakes,
                                                       keys: list[dict[str, Any]]) -> None:
    from fakes import closed_port

    d = names()[0]
    fake = await fakes.start(d)
    # a store that cannot be reached, and a policy that would refuse: no request may notice
    gw = await gateway(aiohttp_client, config(
        fake, d, keys, store=f"redis://127.0.0.1:{closed_port()}/0", on_store_error="deny"))
    for key in (PLAIN_KEY, *(k["key"] for k in keys)):
        status, headers, _ = await ask(gw, d, key)
        assert status == 200 and "x-ratelimit-limit-requests" not in headers
    text = await metrics(gw)
    assert "gateway_limits_store_errors_total{" not in text
    assert ('gateway_key_requests_total{key="team-b",route="/a",status="200"} 1.0' in text) \
        == bool(keys)


async def test_a_spent_day_tells_the_sdks_not_to_retry(aiohttp_client: Any, fakes: Fakes) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    gw = await gateway(aiohttp_client, config(fake, d, [team(tokens_per_day=1)]))
    assert (await ask(gw, d, TEAM_KEY))[0] == 200  # the window had room
    status, headers, body = await ask(gw, d, TEAM_KEY)
    assert status == 429 and "tokens_per_day" in error_message(d, orjson.loads(body))
    assert int(headers["Retry-After"]) > 23 * 3600
    assert headers["x-should-retry"] == "false"
    assert headers["x-ratelimit-remaining-tokens"] == "0"


def _ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status in (200, 503):  # serving (its upstream is a closed port)
                    return
        except urllib.error.HTTPError as e:
            if e.code == 503:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")
