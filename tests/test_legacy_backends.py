"""Legacy backends: upstreams that always or never stream, several upstreams per route (failover,
round-robin, weighted, across dialects), retries and their bounds, outlier ejection and active
health checks, readiness, per-upstream concurrency limits, hot reload, and API keys.

No test names a dialect: the pair tests run every pair of the registry, and the others take their
dialects from the registry by position (:data:`A` to :data:`D`), so that most requests are
translated and a new dialect changes nothing here."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
import yaml
from aiohttp.test_utils import TestClient, make_mocked_request
from fakes import (
    TEXT,
    Fakes,
    FakeUpstream,
    Script,
    assert_failed_stream,
    check_carried,
    client_request,
    closed_port,
    dialect_at,
    error_message,
    eventually,
    other,
    pairs,
    read_answer,
    split_frames,
    upstream_config,
)
from prometheus_client.parser import text_string_to_metric_families
from strict.observed import Observed

from gateway import handlers
from gateway.app import create_app
from gateway.balancer import UpstreamState
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import load_config, parse_config
from gateway.dialects import get, names

PAIRS = pairs()
PAIR_IDS = [f"{c}<-{u}" for c, u in PAIRS]
A, B, C, D = (dialect_at(i) for i in range(4))
"""Dialects for the tests about something else than dialects, by registry position."""


async def gateway(aiohttp_client: Any, cfg: dict[str, Any], *,
                  config_path: Path | None = None,
                  clock: Clock = SYSTEM_CLOCK) -> TestClient[Any, Any]:
    config = load_config(config_path) if config_path else parse_config(cfg, env={})
    app = create_app(config, config_path=config_path, clock=clock)
    client: TestClient[Any, Any] = await aiohttp_client(
        app, server_kwargs={"handler_cancellation": True})
    return client


def config(client: str, upstreams: dict[str, dict[str, Any]], *, names: list[Any] | None = None,
           **route: Any) -> dict[str, Any]:
    return {"upstreams": upstreams, "health": {"failure_threshold": 5, "ejection_seconds": 30},
            "routes": [{"path": "/c", "dialect": client,
                        "upstream": names if names is not None else list(upstreams),
                        **route}]}


def down_config(dialect: str, **extra: Any) -> dict[str, Any]:
    return upstream_config(dialect, f"http://127.0.0.1:{closed_port()}/chat", **extra)


async def samples(gw: TestClient[Any, Any]) -> dict[tuple[str, frozenset[Any]], float]:
    resp = await gw.get("/metrics")
    out: dict[tuple[str, frozenset[Any]], float] = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


async def metric(gw: TestClient[Any, Any], name: str, **labels: str) -> float:
    want = set(labels.items())
    found = [v for (n, ls), v in (await samples(gw)).items() if n == name and want <= ls]
    return sum(found)


async def ask(gw: TestClient[Any, Any], client: str, *, stream: bool = False,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request; the status and what the client read (an :class:`Observed`, or an error
    message)."""
    path, body, extra = client_request(client, "/c", stream=stream)
    resp = await gw.post(path, json=body, headers={**extra, **(headers or {})})
    raw = await resp.read()
    if resp.status != 200:
        return resp.status, error_message(client, orjson.loads(raw))
    return 200, read_answer(client, resp.headers["Content-Type"], raw)


def answered(view: Observed, *fakes: FakeUpstream, stream: bool) -> bool:
    """The client read the whole of what one of ``fakes`` said (their sample answers)."""
    return view.error is None and view.text in {f.said(stream) for f in fakes}


# --- always / never streaming upstreams -----------------------------------------------------------


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_whole_answer_from_an_always_streaming_upstream(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str) -> None:
    """(Scripted, as in every pair test: what survives the assembly is the point.)"""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await gateway(aiohttp_client, config(client, {
        "u": upstream_config(fake, streaming="always")}))
    status, view = await ask(gw, client, stream=False)
    assert status == 200
    check_carried(view, client, upstream, streamed=False, up_streamed=True)
    [seen] = fake.seen
    assert seen.stream
    assert fake.is_path_for(seen.path, True)


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_stream_from_a_never_streaming_upstream(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str) -> None:
    """(Scripted.) The whole answer becomes a stream in the client's dialect: its start first,
    then the text (each dialect's own shape of it: tests/dialects/)."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await gateway(aiohttp_client, config(client, {
        "u": upstream_config(fake, streaming="never")}))
    path, body, headers = client_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == get(client).stream_content_type
    raw = await resp.read()
    view = read_answer(client, resp.headers["Content-Type"], raw)
    check_carried(view, client, upstream, streamed=True, up_streamed=False)
    [seen] = fake.seen
    assert not seen.stream and fake.is_path_for(seen.path, False)
    frames = split_frames(get(client), raw)
    assert len(frames) > 1 and not frames[0].text
    assert any(f.text for f in frames[1:])


async def test_always_upstream_html_or_broken_stream_is_502(aiohttp_client: Any,
                                                             fakes: Fakes) -> None:
    html = await fakes.start(B, Script(body=b"<html>login</html>", content_type="text/html"))
    broken = await fakes.start(A, Script(error_after=1))
    gw = await gateway(aiohttp_client, {
        "upstreams": {"html": upstream_config(html, streaming="always"),
                      "broken": upstream_config(broken, streaming="always")},
        "routes": [{"path": "/html", "dialect": D, "upstream": "html"},
                   {"path": "/broken", "dialect": D, "upstream": "broken"}]})
    _, body, headers = client_request(D, stream=False)
    for path in ("/html", "/broken"):
        resp = await gw.post(path, json=body, headers=headers)
        assert resp.status == 502, path
        assert "login" not in error_message(D, await resp.json())


# --- several upstreams per route ------------------------------------------------------------------


async def test_failover_across_dialects(aiohttp_client: Any, fakes: Fakes) -> None:
    """(Scripted: what the second upstream's answer carries reaches the client.)"""
    second = await fakes.start(B, Script(scripted=True))
    third = await fakes.start(C)
    gw = await gateway(aiohttp_client, config(C, {
        "down": down_config(D), "second": upstream_config(second),
        "third": upstream_config(third)}, strategy="failover"))
    for stream in (False, True):
        status, view = await ask(gw, C, stream=stream)
        assert status == 200
        check_carried(view, C, B, streamed=stream, up_streamed=stream)
    assert len(second.seen) == 2 and third.seen == []
    assert await metric(gw, "gateway_upstream_attempts_total", upstream="down",
                        outcome="connect") == 2
    assert await metric(gw, "gateway_upstream_attempts_total", upstream="second",
                        outcome="ok") == 2
    assert await metric(gw, "gateway_upstream_errors_total", upstream="down",
                        kind="connect") == 2
    assert await metric(gw, "gateway_requests_total", upstream="second",
                        upstream_dialect=B, status="200") == 2


async def test_round_robin_across_dialects(aiohttp_client: Any, fakes: Fakes) -> None:
    ups = [await fakes.start(d) for d in (A, D, C)]
    gw = await gateway(aiohttp_client, config(B, {
        f"u{i}": upstream_config(f) for i, f in enumerate(ups)}, strategy="round-robin"))
    order = []
    for i in range(6):
        before = [len(f.seen) for f in ups]
        status, view = await ask(gw, B, stream=i % 2 == 0)
        served = [j for j, f in enumerate(ups) if len(f.seen) > before[j]]
        assert status == 200 and len(served) == 1
        assert view.text == ups[served[0]].said(i % 2 == 0)
        order.extend(served)
    assert [len(f.seen) for f in ups] == [2, 2, 2]
    assert order == [0, 1, 2, 0, 1, 2]


async def test_weighted_across_dialects(aiohttp_client: Any, fakes: Fakes) -> None:
    heavy = await fakes.start(D)
    light = await fakes.start(A)
    gw = await gateway(aiohttp_client, config(D, {
        "heavy": upstream_config(heavy), "light": upstream_config(light)},
        names=[{"name": "heavy", "weight": 4}, {"name": "light", "weight": 1}],
        strategy="weighted"))
    random.seed(20240529)
    for _ in range(60):
        status, _view = await ask(gw, D)
        assert status == 200
    assert len(heavy.seen) + len(light.seen) == 60
    assert len(heavy.seen) > 2 * len(light.seen) > 0


async def test_weighted_fails_over_to_the_other(aiohttp_client: Any, fakes: Fakes) -> None:
    light = await fakes.start(A)
    gw = await gateway(aiohttp_client, config(D, {
        "heavy": down_config(D), "light": upstream_config(light)},
        names=[{"name": "heavy", "weight": 100}, {"name": "light", "weight": 1}],
        strategy="weighted"))
    for _ in range(4):
        status, view = await ask(gw, D, stream=True)
        assert status == 200 and view.text == light.said(True)
    assert len(light.seen) == 4


# --- retries --------------------------------------------------------------------------------------


FAILURES: dict[str, Any] = {
    "connect": None,
    "timeout": Script(delay=3),
    "500": Script(status=500),
    "502": Script(status=502),
    "503": Script(status=503),
    "429": Script(status=429, headers={"Retry-After": "0"}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", list(FAILURES))
async def test_retried_before_the_first_byte(aiohttp_client: Any, fakes: Fakes, kind: str,
                                             stream: bool) -> None:
    backup = await fakes.start(A)
    script = FAILURES[kind]
    if script is None:
        first_cfg = down_config(B)
    else:
        first = await fakes.start(B, script)
        first_cfg = upstream_config(first, timeout=0.5)
    gw = await gateway(aiohttp_client, config(D, {
        "first": first_cfg, "backup": upstream_config(backup)}))
    status, view = await ask(gw, D, stream=stream)
    assert status == 200
    assert view.text == backup.said(stream)
    assert len(backup.seen) == 1
    outcome = kind if kind in ("connect", "timeout") else "status"
    assert await metric(gw, "gateway_upstream_attempts_total", upstream="first",
                        outcome=outcome) == 1
    assert await metric(gw, "gateway_upstream_attempts_total", upstream="backup",
                        outcome="ok") == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_other_4xx_never_retried(aiohttp_client: Any, fakes: Fakes, status: int) -> None:
    first = await fakes.start(D, Script(status=status))
    backup = await fakes.start(A)
    gw = await gateway(aiohttp_client, config(B, {
        "first": upstream_config(first), "backup": upstream_config(backup)},
        retries={"attempts": 5}))
    got, message = await ask(gw, B)
    assert got == status
    assert message == first.error_text
    assert len(first.seen) == 1 and backup.seen == []


@pytest.mark.parametrize("how", ["dies", "error_event"])
@pytest.mark.parametrize("client", names())
async def test_failure_after_first_byte_never_retried(aiohttp_client: Any, fakes: Fakes,
                                                      client: str, how: str) -> None:
    """(Scripted: the stream breaks after two pieces of a known text.)"""
    script = Script(die_after=2) if how == "dies" else Script(error_after=2)
    first = await fakes.start(other(client), script)
    backup = await fakes.start(A)
    gw = await gateway(aiohttp_client, config(client, {
        "first": upstream_config(first), "backup": upstream_config(backup)},
        retries={"attempts": 3}))
    status, view = await ask(gw, client, stream=True)
    assert status == 200
    assert_failed_stream(view, client)
    assert TEXT.startswith(view.text) and view.text != TEXT
    assert len(first.seen) == 1 and backup.seen == []
    if how == "dies":
        assert await metric(gw, "gateway_upstream_errors_total", upstream="first",
                            kind="connect") == 1


async def test_retry_after_is_honoured_up_to_its_max(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(A)
    gw = await gateway(aiohttp_client, config(D, {"u": upstream_config(fake)},
                                              retries={"attempts": 2, "retry_after_max": 0.6}))
    fake.queue.append(Script(status=429, headers={"Retry-After": "0.3"}))
    t0 = time.perf_counter()
    status, _view = await ask(gw, D)
    waited = time.perf_counter() - t0
    assert status == 200 and len(fake.seen) == 2
    assert 0.3 <= waited < 1.2
    fake.queue.append(Script(status=503, headers={"Retry-After": "30"}))
    t0 = time.perf_counter()
    status, _view = await ask(gw, D)
    waited = time.perf_counter() - t0
    assert status == 200 and len(fake.seen) == 4
    assert 0.6 <= waited < 2.5


async def test_last_429_passed_on_with_retry_after(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(D, Script(status=429, headers={"Retry-After": "7"}))
    gw = await gateway(aiohttp_client, config(C, {"u": upstream_config(fake)},
                                              retries={"attempts": 2, "retry_after_max": 0.1}))
    path, body, headers = client_request(C, stream=False)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "7"
    assert error_message(C, await resp.json()) == fake.error_text
    assert len(fake.seen) == 2


async def test_attempts_are_bounded(aiohttp_client: Any, fakes: Fakes) -> None:
    ups = [await fakes.start(A, Script(status=503)) for _ in range(3)]
    gw = await gateway(aiohttp_client, config(D, {
        f"u{i}": upstream_config(f) for i, f in enumerate(ups)}, retries={"attempts": 2}))
    status, message = await ask(gw, D)
    assert status == 503 and message == ups[0].error_text
    assert [len(f.seen) for f in ups] == [1, 1, 0]
    # one upstream, three attempts: the same upstream three times
    single = await fakes.start(A, Script(status=500))
    gw2 = await gateway(aiohttp_client, config(D, {"u": upstream_config(single)},
                                               retries={"attempts": 3}))
    status, _ = await ask(gw2, D)
    assert status == 500 and len(single.seen) == 3


async def test_total_retry_time_is_bounded(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(A, Script(status=503, headers={"Retry-After": "0.3"}))
    gw = await gateway(aiohttp_client, config(D, {"u": upstream_config(fake)},
                                              retries={"attempts": 100, "total_timeout": 1.0}))
    t0 = time.perf_counter()
    status, _ = await ask(gw, D)
    elapsed = time.perf_counter() - t0
    assert status == 503
    # bounded by total_timeout (1 s): generous room for a busy machine, far below the hundred
    # attempts' 30 s of Retry-After
    assert elapsed < 4 * 1.0 + 2
    assert 2 <= len(fake.seen) <= 5


# --- health: passive ejection, active checks, readiness ------------------------------------------


class HealthClock:
    """The clock of ejections (``ejection_seconds``), driven by the test: an ejected upstream
    takes its trial when the test says the time has come, whatever a busy machine does to the
    time between two requests. The app gets it as ``create_app(clock=...)``'s monotonic clock;
    its wall clock and every duration stay real."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.clock = Clock(monotonic=self.monotonic)

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def health_clock() -> HealthClock:
    return HealthClock()


async def test_passive_outlier_ejection_and_trial(aiohttp_client: Any, fakes: Fakes,
                                                  health_clock: HealthClock) -> None:
    bad = await fakes.start(A, Script(status=500))
    good = await fakes.start(D)
    cfg = config(B, {"bad": upstream_config(bad), "good": upstream_config(good)})
    cfg["health"] = {"failure_threshold": 2, "ejection_seconds": 0.6}
    gw = await gateway(aiohttp_client, cfg, clock=health_clock.clock)
    for _ in range(2):
        assert (await ask(gw, B))[0] == 200
    assert len(bad.seen) == 2 and len(good.seen) == 2
    assert await metric(gw, "gateway_upstream_healthy", upstream="bad") == 0
    assert await metric(gw, "gateway_upstream_healthy", upstream="good") == 1
    ready = await gw.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["upstreams_down"] == ["bad"]
    # ejected: skipped while "good" can take the traffic
    for _ in range(3):
        assert (await ask(gw, B))[0] == 200
    assert len(bad.seen) == 2 and len(good.seen) == 5
    # after ejection_seconds, one trial; it fails, so out again at once
    health_clock.advance(0.6)
    assert (await ask(gw, B))[0] == 200
    assert len(bad.seen) == 3
    assert (await ask(gw, B))[0] == 200
    assert len(bad.seen) == 3
    # the next trial succeeds: back in
    health_clock.advance(0.6)
    bad.default = Script()
    status, view = await ask(gw, B)
    assert status == 200 and view.text == bad.said(False)
    assert len(bad.seen) == 4
    assert await metric(gw, "gateway_upstream_healthy", upstream="bad") == 1
    assert (await (await gw.get("/readyz")).json())["upstreams_down"] == []
    assert (await ask(gw, B))[0] == 200
    assert len(bad.seen) == 5


async def test_only_one_trial_request_after_ejection(aiohttp_client: Any, fakes: Fakes,
                                                    health_clock: HealthClock) -> None:
    bad = await fakes.start(A, Script(status=500))
    good = await fakes.start(D)
    cfg = config(C, {"bad": upstream_config(bad), "good": upstream_config(good)})
    cfg["health"] = {"failure_threshold": 1, "ejection_seconds": 0.3}
    gw = await gateway(aiohttp_client, cfg, clock=health_clock.clock)
    assert (await ask(gw, C))[0] == 200
    assert len(bad.seen) == 1 and len(good.seen) == 1
    health_clock.advance(0.3)
    gate = asyncio.Event()
    bad.default = Script(hold_before=gate)
    trial = asyncio.create_task(ask(gw, C))
    await eventually(lambda: len(bad.seen) == 2)
    # while the trial is out, the others go to the healthy upstream
    for _ in range(2):
        assert (await ask(gw, C))[0] == 200
    assert len(bad.seen) == 2 and len(good.seen) == 3
    gate.set()
    status, view = await asyncio.wait_for(trial, 5)
    assert status == 200 and view.text == bad.said(False)
    assert await metric(gw, "gateway_upstream_healthy", upstream="bad") == 1


async def test_an_ejected_only_upstream_is_still_tried(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(A, Script(status=502))
    cfg = config(D, {"u": upstream_config(fake)})
    cfg["health"] = {"failure_threshold": 1, "ejection_seconds": 30}
    gw = await gateway(aiohttp_client, cfg)
    assert (await ask(gw, D))[0] == 502
    ready = await gw.get("/readyz")
    assert ready.status == 503
    body = await ready.json()
    assert body["routes_down"] == {"/c": ["u"]} and body["upstreams_down"] == ["u"]
    fake.default = Script()
    assert (await ask(gw, D))[0] == 200
    assert len(fake.seen) == 2


async def test_active_health_checks_and_readyz(aiohttp_client: Any, fakes: Fakes) -> None:
    checked = await fakes.start(B)
    other = await fakes.start(D)
    gw = await gateway(aiohttp_client, {
        "upstreams": {
            "checked": upstream_config(checked, health_url=f"{checked.base}/health",
                                       health_interval=0.2),
            "other": upstream_config(other),
        },
        "routes": [{"path": "/c", "dialect": A, "upstream": "checked"},
                   {"path": "/d", "dialect": A, "upstream": ["checked", "other"]}]})

    async def ready() -> tuple[int, Any]:
        resp = await gw.get("/readyz")
        return resp.status, await resp.json()

    await eventually(lambda: checked.health_checks >= 2)
    assert await ready() == (200, {"status": "ok", "routes_down": {}, "upstreams_down": []})
    checked.health_status = 503
    async def ready_is(status: int) -> bool:
        return (await ready())[0] == status

    await eventually(lambda: ready_is(503))
    _, body = await ready()
    assert body["status"] != "ok"
    assert body["routes_down"] == {"/c": ["checked"]}
    assert body["upstreams_down"] == ["checked"]
    assert await metric(gw, "gateway_upstream_healthy", upstream="checked") == 0
    # /d still has "other": its traffic skips the checked one
    _, body, _ = client_request(A, stream=False)
    resp = await gw.post("/d", json=body)
    assert resp.status == 200 and checked.seen == [] and len(other.seen) == 1
    checked.health_status = 200
    await eventually(lambda: ready_is(200))
    assert await metric(gw, "gateway_upstream_healthy", upstream="checked") == 1


async def test_health_check_of_unreachable_upstream(aiohttp_client: Any) -> None:
    port = closed_port()
    gw = await gateway(aiohttp_client, config(D, {"u": upstream_config(
        A, f"http://127.0.0.1:{port}/chat", health_url=f"http://127.0.0.1:{port}/health",
        health_interval=0.2)}))
    async def not_ready() -> bool:
        return (await gw.get("/readyz")).status == 503

    await eventually(not_ready)


# --- max_inflight ---------------------------------------------------------------------------------


@pytest.mark.parametrize("client", names())
async def test_max_inflight_queue_timeout_is_503_with_retry_after(aiohttp_client: Any,
                                                                  fakes: Fakes,
                                                                  client: str) -> None:
    gate = asyncio.Event()
    fake = await fakes.start(other(client), Script(hold_after_first=gate))
    gw = await gateway(aiohttp_client, config(client, {"u": upstream_config(
        fake, max_inflight=1, queue_timeout=0.3)}))
    path, body, headers = client_request(client, "/c", stream=True)
    first = await gw.post(path, json=body, headers=headers)
    assert first.status == 200
    t0 = time.perf_counter()
    second = await gw.post(path, json=body, headers=headers)
    assert 0.25 <= time.perf_counter() - t0 < 4 * 0.3 + 2  # queue_timeout, with room
    assert second.status == 503
    assert int(second.headers["Retry-After"]) >= 1
    assert error_message(client, await second.json())
    assert len(fake.seen) == 1
    gate.set()
    view = read_answer(client, first.headers["Content-Type"], await first.read())
    assert view.text == fake.said(True) and view.error is None
    assert await metric(gw, "gateway_upstream_attempts_total", upstream="u",
                        outcome="rejected") == 1
    # the slot is free again
    third = await gw.post(path, json=body, headers=headers)
    assert third.status == 200
    assert read_answer(client, third.headers["Content-Type"],
                       await third.read()).text == fake.said(True)


async def test_max_inflight_queues_within_the_timeout(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(D, Script(delay=0.2))
    gw = await gateway(aiohttp_client, config(D, {"u": upstream_config(
        fake, max_inflight=2, queue_timeout=3)}))
    results = await asyncio.gather(*(ask(gw, D) for _ in range(6)))
    assert [s for s, _ in results] == [200] * 6


async def test_a_slot_held_across_a_reload_goes_back_where_it_came_from() -> None:
    """A reload that changes ``max_inflight`` gives the upstream new slots: a request that held
    one of the old gives it back to the old, never one more to the new."""
    def upstream(max_inflight: int | None) -> Any:
        limit = {} if max_inflight is None else {"max_inflight": max_inflight}
        return parse_config(config(D, {"u": upstream_config(
            D, "http://127.0.0.1:9/", queue_timeout=0.05, **limit)}), env={}).upstreams["u"]

    state = UpstreamState("u", upstream(1), lambda name, up: None)
    held = await state.acquire()
    assert held is not None and held.locked()
    state.reconfigure(upstream(2))
    now = await state.acquire()
    assert now is not None and now is not held
    held.release()
    assert not held.locked()
    assert await state.acquire() is now and now.locked()  # (its two slots taken: no third)
    state.reconfigure(upstream(None))
    assert not state.limited and await state.acquire() is None


# --- hot reload -----------------------------------------------------------------------------------


def reload_config(first: FakeUpstream, second: FakeUpstream, target: str) -> str:
    return yaml.safe_dump({
        "upstreams": {"a": upstream_config(first), "b": upstream_config(second)},
        "routes": [{"path": "/c", "dialect": D, "upstream": target}]})


async def test_hot_reload_valid_then_invalid(aiohttp_client: Any, fakes: Fakes,
                                             tmp_path: Path) -> None:
    a = await fakes.start(A)
    b = await fakes.start(C)
    path = tmp_path / "gateway.yaml"
    path.write_text(reload_config(a, b, "a"))
    gw = await gateway(aiohttp_client, {}, config_path=path)
    assert (await ask(gw, D))[0] == 200
    assert len(a.seen) == 1
    path.write_text(reload_config(a, b, "b"))
    resp = await gw.post("/admin/reload")
    assert resp.status == 200 and (await resp.json())["status"] == "reloaded"
    assert (await ask(gw, D, stream=True))[0] == 200
    assert len(a.seen) == 1 and len(b.seen) == 1
    path.write_text(reload_config(a, b, "b").replace("upstream: b", "upstream: nope"))
    refused = await gw.post("/admin/reload")
    assert refused.status == 400
    body = await refused.json()
    assert body["status"] == "refused"
    assert any(p["where"] == "routes[0].upstream" and "nope" in p["problem"]
               for p in body["problems"])
    path.write_text("routes: [\n")
    refused = await gw.post("/admin/reload")
    assert refused.status == 400
    assert "YAML" in (await refused.json())["problems"][0]["problem"]
    status, view = await ask(gw, D)
    assert status == 200 and view.text == b.said(False)
    assert len(b.seen) == 2 and len(a.seen) == 1
    assert await metric(gw, "gateway_config_reloads_total", result="ok") == 1
    assert await metric(gw, "gateway_config_reloads_total", result="invalid") == 2


async def test_streams_survive_config_swaps(aiohttp_client: Any, fakes: Fakes,
                                            tmp_path: Path) -> None:
    a = await fakes.start(B, Script(chunk_delay=0.01))
    b = await fakes.start(D, Script(chunk_delay=0.01))
    path = tmp_path / "gateway.yaml"
    path.write_text(reload_config(a, b, "a"))
    gw = await gateway(aiohttp_client, {}, config_path=path)
    stop = asyncio.Event()
    results: list[tuple[int, str, bool]] = []

    async def loop() -> None:
        while not stop.is_set() and len(results) < 200:
            status, view = await ask(gw, D, stream=True)
            results.append((status, view.text if status == 200 else view,
                            status == 200 and answered(view, a, b, stream=True)))

    workers = [asyncio.create_task(loop()) for _ in range(3)]
    try:
        for i in range(6):
            await asyncio.sleep(0.1)
            path.write_text(reload_config(a, b, "b" if i % 2 == 0 else "a"))
            assert (await gw.post("/admin/reload")).status == 200
            await asyncio.sleep(0.1)
            path.write_text("upstreams: {}\nroutes: []\n")
            assert (await gw.post("/admin/reload")).status == 400
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await asyncio.gather(*workers)
    assert len(results) >= 10
    assert all(r[2] for r in results), [r for r in results if r[2] is False]
    assert a.seen and b.seen


async def test_admin_reload_only_for_loopback_and_when_enabled(aiohttp_client: Any,
                                                               fakes: Fakes,
                                                               tmp_path: Path) -> None:
    a = await fakes.start(A)
    path = tmp_path / "gateway.yaml"
    path.write_text(reload_config(a, a, "a"))
    app = create_app(load_config(path), config_path=path)
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("10.1.2.3", 40000) if name == "peername" else default)
    request = make_mocked_request("POST", "/admin/reload", app=app, transport=transport)
    assert request.remote == "10.1.2.3"
    resp = await handlers.reload(request)
    assert resp.status == 403
    # admin: false refuses loopback too
    data = yaml.safe_load(path.read_text())
    data["server"] = {"admin": False}
    path.write_text(yaml.safe_dump(data))
    gw = await gateway(aiohttp_client, {}, config_path=path)
    assert (await gw.post("/admin/reload")).status == 403
    # a gateway started without a config file has nothing to reload
    gw2 = await gateway(aiohttp_client, yaml.safe_load(reload_config(a, a, "a")))
    refused = await gw2.post("/admin/reload")
    assert refused.status == 400


# --- API keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", names())
async def test_api_keys(aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    fake = await fakes.start(other(client))
    cfg = config(client, {"u": upstream_config(fake)})
    cfg["auth"] = {"api_keys": ["key-one-secret", "key-two-secret"]}
    gw = await gateway(aiohttp_client, cfg)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"api-key": "wrong"},
                    {"Authorization": "key-one-secret"},
                    {"Authorization": "Bearer key-one-secret-and-more"}):
        for stream in (False, True):
            status, message = await ask(gw, client, stream=stream, headers=headers)
            assert status == 401, headers
            assert "API key" in message
    assert fake.seen == []
    for headers in ({"Authorization": "Bearer key-one-secret"}, {"api-key": "key-two-secret"},
                    {"Authorization": "bearer key-two-secret"}):
        for stream in (False, True):
            status, view = await ask(gw, client, stream=stream, headers=headers)
            assert status == 200, headers
            assert view.text == fake.said(stream)
    assert len(fake.seen) == 6
    for seen in fake.seen:
        values = " ".join(seen.headers.values())
        assert "key-one-secret" not in values and "key-two-secret" not in values
        assert "api-key" not in {k.lower() for k in seen.headers}
        assert "Authorization" not in seen.headers


async def test_api_keys_do_not_guard_health_endpoints(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(A)
    cfg = config(D, {"u": upstream_config(fake)})
    cfg["auth"] = {"api_keys": ["k"]}
    gw = await gateway(aiohttp_client, cfg)
    assert (await gw.get("/healthz")).status == 200
    assert (await gw.get("/readyz")).status == 200
    # The operator's endpoints are not probes: with keys set they need one (docs/operations.md).
    assert (await gw.get("/metrics")).status == 401
    assert (await gw.get("/metrics", headers={"Authorization": "Bearer k"})).status == 200


async def test_reload_removing_an_upstream_mid_request(aiohttp_client: Any, fakes: Fakes,
                                                      tmp_path: Path) -> None:
    """A request keeps the config it started with, even when a reload drops the upstream it
    fails over to while its first attempt is still waiting."""
    gate = asyncio.Event()
    slow = await fakes.start(A, Script(status=503, hold_before=gate))
    backup = await fakes.start(D)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({
        "upstreams": {"slow": upstream_config(slow), "backup": upstream_config(backup)},
        "routes": [{"path": "/c", "dialect": D, "upstream": ["slow", "backup"]}]}))
    gw = await gateway(aiohttp_client, {}, config_path=path)
    pending = asyncio.create_task(ask(gw, D))
    await eventually(lambda: len(slow.seen) == 1)
    path.write_text(yaml.safe_dump({
        "upstreams": {"slow": upstream_config(slow)},
        "routes": [{"path": "/c", "dialect": D, "upstream": "slow"}]}))
    assert (await gw.post("/admin/reload")).status == 200
    gate.set()
    status, view = await asyncio.wait_for(pending, 5)
    assert status == 200 and view.text == backup.said(False)
    assert len(backup.seen) == 1
    # new requests see only the new config, and the metrics no more name the dropped upstream
    slow.default = Script(status=503)
    assert (await ask(gw, D))[0] == 503
    assert len(backup.seen) == 1
    healthy = {dict(ls)["upstream"] for (n, ls) in await samples(gw)
               if n == "gateway_upstream_healthy"}
    assert healthy == {"slow"}
