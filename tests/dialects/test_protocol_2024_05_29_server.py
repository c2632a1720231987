"""protocol-2024-05-29 as the gateway serves it: what belongs to this dialect alone (the generic
server tests cover the rest). Its session state has two spellings, ``sessionState`` (the Microsoft
spec, the JavaScript SDK) and ``session_state`` (the first publication, the reference backend);
the first line of its stream carries a context, which the reference frontend reads
``data_points`` from."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fakes import (
    CITATION_NAMES,
    CLIENT_STATE,
    QUESTION,
    TEXT,
    UP_STATE,
    Fakes,
    Script,
    expected_state,
    serve_route,
)

from gateway.dialects import get, names

DIALECT = "protocol-2024-05-29"
KEYS = ("sessionState", "session_state")


def _lines(raw: bytes) -> list[Any]:
    return [orjson.loads(line) for line in raw.splitlines() if line.strip()]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("key", [*KEYS, None], ids=[*KEYS, "none"])
@pytest.mark.parametrize("upstream", names())
async def test_answered_in_the_session_key_spelling_it_used(
        aiohttp_client: Any, fakes: Fakes, upstream: str, key: str | None, stream: bool) -> None:
    """A client is answered in the spelling it used; one that used none gets both."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await serve_route(aiohttp_client, DIALECT, fake)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": QUESTION}]}
    if key is not None:
        body[key] = CLIENT_STATE
    resp = await gw.post("/c/stream" if stream else "/c", json=body)
    assert resp.status == 200
    raw = await resp.read()
    objects = _lines(raw) if stream else [orjson.loads(raw)]
    spelled = {k: o[k] for o in objects for k in KEYS if k in o}
    if key is None:
        has_state = get(upstream).capabilities.session_state != "none"
        assert spelled == ({k: UP_STATE for k in KEYS} if has_state else {})
    else:
        assert spelled == {key: expected_state(DIALECT, upstream)}


@pytest.mark.parametrize("upstream", names())
async def test_first_line_carries_the_context(aiohttp_client: Any, fakes: Fakes,
                                              upstream: str) -> None:
    """(Scripted.) From a never-streaming upstream: the role and the whole context (its
    citations, where the upstream has them) first, then the text. From a streaming one too, the
    first line has a context."""
    never = await fakes.start(upstream, Script(scripted=True))
    gw = await serve_route(aiohttp_client, DIALECT, never, streaming="never")
    resp = await gw.post("/c/stream", json={"messages": [{"role": "user", "content": QUESTION}]})
    assert resp.status == 200
    lines = _lines(await resp.read())
    assert lines[0]["delta"] == {"role": "assistant"} and isinstance(lines[0]["context"], dict)
    if get(upstream).capabilities.citations:
        assert lines[0]["context"]["data_points"]["citations"] == CITATION_NAMES
    assert "".join(line["delta"].get("content") or "" for line in lines[1:]) == TEXT
    streaming = await fakes.start(upstream)
    gw = await serve_route(aiohttp_client, DIALECT, streaming)
    resp = await gw.post("/c/stream", json={"messages": [{"role": "user", "content": QUESTION}]})
    first = _lines(await resp.read())[0]
    assert isinstance(first.get("context"), dict), first
