"""What RAG frontends need of every answer, through the exchange and the in-memory transport:
a context, and (route setting ``mint_session_state``) a session state.

A client dialect that declares an ``answer_context`` gets it in a whole answer from any upstream
that sent no context, its own dialect's included (whose answer is otherwise passed on as it came).

For every client dialect that carries session state, in front of every upstream dialect with a
strict writer, whole and streamed: a request with no session state (absent, or null) gets one
minted by the gateway, which reaches the upstream where its dialect carries session state and
comes back to the client; an upstream's own state wins; a client's own state is kept; the
setting is off by default. Which dialects carry what is read from their declarations only.
"""

from __future__ import annotations

import random
import re
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from fakes import UP_STATE, client_request, read_answer
from observe import carries, strict
from strict.observed import Observed

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.errors import ConfigError
from gateway.exchange.outcome import Outcome
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

STATEFUL = [d for d in DIALECTS.values() if d.capabilities.session_state != "none"]
STATELESS = [d for d in DIALECTS.values() if d.capabilities.session_state == "none"]
WRITTEN = [d for d in DIALECTS.values() if hasattr(strict(d), "write_whole")]
MINTED = re.compile(r"[0-9a-f]{32}")
SENTINEL = "sentinel-state"


def route_config(client: Dialect, up: Dialect, **route: Any) -> dict[str, Any]:
    return {
        "upstreams": {"a": {"dialect": up.name, "url": "http://a.test/chat", "timeout": 5,
                            "connect_timeout": 1, "model": "m"}},
        "routes": [{"path": "/c", "dialect": client.name, "upstream": "a",
                    "on_unsupported": "drop", **route}],
        "health": {"failure_threshold": 1000},
    }


def null_state(body: Any) -> Any:
    """``body`` with its session state sent as ``null`` (as the RAG app sends it): the keys that
    hold the state when one is rendered, found by rendering a sentinel."""
    assert isinstance(body, dict)
    return {k: (None if v == SENTINEL else v) for k, v in body.items()}


class Upstream:
    """Answers every call with a strict writer's answer carrying ``state``; keeps what it got."""

    def __init__(self, dialect: Dialect, *, stream: bool, state: Any = None) -> None:
        self.dialect, self.stream = dialect, stream
        self.answer = Observed(text="the answer", session_state=state)
        self.got: list[Observed] = []

    async def __call__(self, req: UpstreamRequest) -> MemoryResponse:
        self.got.append(strict(self.dialect).read_request(orjson.loads(req.body)))
        module = strict(self.dialect)
        if self.stream:
            return MemoryResponse(200, {"Content-Type": self.dialect.stream_content_type},
                                  module.write_stream(self.answer, random.Random(1)))
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(module.write_whole(self.answer)))


async def ask(aiohttp_client: Any, cfg: dict[str, Any], upstream: Upstream, client: Dialect, *,
              state: Any = None, null: bool = False,
              outcomes: list[Outcome] | None = None) -> Observed:
    """``outcomes``: where the app's ``on_outcome`` puts what it recorded of the request."""
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(upstream),
                     on_outcome=None if outcomes is None else outcomes.append)
    http: TestClient[Any, Any] = await aiohttp_client(app)
    path, body, headers = client_request(client.name, stream=upstream.stream,
                                         state=SENTINEL if null else state)
    if null:
        body = null_state(body)
    async with http.post(path, json=body, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status == 200, raw
        return read_answer(client.name, resp.headers["Content-Type"], raw)


CASES = [(c, u, s) for c in STATEFUL for u in WRITTEN for s in (False, True)]
IDS = [f"{u.name}->{c.name}-{'stream' if s else 'whole'}" for c, u, s in CASES]


@pytest.mark.parametrize(("cl", "up", "stream"), CASES, ids=IDS)
@pytest.mark.parametrize("null", [False, True], ids=["absent", "null"])
async def test_a_minted_state_goes_upstream_and_back(
        aiohttp_client: Any, cl: Dialect, up: Dialect, stream: bool, null: bool) -> None:
    outcomes: list[Outcome] = []
    upstream = Upstream(up, stream=stream)
    seen = await ask(aiohttp_client, route_config(cl, up, mint_session_state=True), upstream, cl,
                     null=null, outcomes=outcomes)
    assert isinstance(seen.session_state, str) and MINTED.fullmatch(seen.session_state), seen
    (got,) = upstream.got
    carried = carries(up.capabilities.session_state, seen.session_state)
    assert got.session_state == (seen.session_state if carried else None)
    # the gateway's own state, not the client's: an upstream without one loses nothing
    (o,) = outcomes
    assert "session_state" not in o.dropped


STATE_CASES = [c for c in CASES if c[1].capabilities.session_state != "none"]
"""The cases whose upstream answers a session state of its own."""


@pytest.mark.parametrize(("cl", "up", "stream"), STATE_CASES,
                         ids=[i for c, i in zip(CASES, IDS, strict=True) if c in STATE_CASES])
async def test_the_upstreams_own_state_wins(aiohttp_client: Any, cl: Dialect, up: Dialect,
                                            stream: bool) -> None:
    upstream = Upstream(up, stream=stream, state=UP_STATE)
    seen = await ask(aiohttp_client, route_config(cl, up, mint_session_state=True), upstream, cl)
    assert seen.session_state == UP_STATE


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("cl", STATEFUL, ids=[d.name for d in STATEFUL])
async def test_a_clients_own_state_is_kept_and_nothing_is_minted_by_default(
        aiohttp_client: Any, cl: Dialect, stream: bool) -> None:
    up = next(d for d in WRITTEN if d.capabilities.session_state == cl.capabilities.session_state)
    upstream = Upstream(up, stream=stream)
    minting = route_config(cl, up, mint_session_state=True)
    assert (await ask(aiohttp_client, minting, upstream, cl, state="mine")).session_state \
        == "mine"
    assert upstream.got[-1].session_state == "mine"
    assert (await ask(aiohttp_client, route_config(cl, up), upstream, cl, null=True)) \
        .session_state is None
    assert upstream.got[-1].session_state is None


@pytest.mark.parametrize("cl", STATELESS, ids=[d.name for d in STATELESS])
def test_only_a_dialect_with_session_state_may_mint(cl: Dialect) -> None:
    with pytest.raises(ConfigError, match="mint_session_state"):
        parse_config(route_config(cl, cl, mint_session_state=True), env={})


SHAPED = [(c, u) for c in DIALECTS.values() if c.capabilities.answer_context is not None
          for u in WRITTEN]


@pytest.mark.parametrize(("cl", "up"), SHAPED, ids=[f"{u.name}->{c.name}" for c, u in SHAPED])
async def test_a_whole_answer_without_context_gets_the_declared_one(
        aiohttp_client: Any, cl: Dialect, up: Dialect) -> None:
    upstream = Upstream(up, stream=False)
    app = create_app(parse_config(route_config(cl, up), env={}),
                     transport=MemoryTransport(upstream))
    http: TestClient[Any, Any] = await aiohttp_client(app)
    path, body, headers = client_request(cl.name, stream=False, state=None)
    async with http.post(path, json=body, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status == 200, raw
    assert cl.parse_response(orjson.loads(raw)).context == dict(cl.capabilities.answer_context
                                                                or {})
