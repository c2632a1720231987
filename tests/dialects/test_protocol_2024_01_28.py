"""What only ``protocol-2024-01-28`` does: the ``stream`` flag always in the body, ``context`` and
``session_state`` per choice, chunks that keep one ``id``/``created`` and end with a
``finish_reason`` chunk carrying the usage; the request context (``overrides``) kept."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest
from observe import RICH, client_request, run_stream, strict

from gateway.dialects import DIALECTS, get
from gateway.pipeline import translate_request

ME = get("protocol-2024-01-28")
GOLDEN = Path(__file__).parent.parent / "golden" / ME.name
WRITTEN = [d for d in DIALECTS.values() if hasattr(strict(d), "write_stream")]


@pytest.mark.parametrize("stream", [False, True])
def test_stream_flag_is_always_written(stream: bool) -> None:
    for c in DIALECTS.values():
        _, out, _ = translate_request(c.samples.requests["text"], c, ME, stream=stream)
        assert out["stream"] is stream, c.name


@pytest.mark.parametrize("up", [d.name for d in WRITTEN])
def test_chunks_keep_one_identity_and_end_with_the_finish(up: str) -> None:
    u = DIALECTS[up]
    req, _ = client_request(ME, stream=True)
    obs = RICH["rag-no-state"]
    _, out = run_stream(u, ME, req, [strict(u).write_stream(obs, random.Random(up))])
    chunks = [orjson.loads(line) for line in out.splitlines()]
    assert len({(c["id"], c["created"]) for c in chunks}) == 1
    # its frontend keeps the first chunk as the answer's shell only when data_points is there
    assert isinstance(chunks[0]["choices"][0]["context"]["data_points"], dict)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[:-1] == [None] * (len(chunks) - 1) and reasons[-1] == "stop"
    if u.capabilities.usage_stream:
        assert chunks[-1]["usage"]["total_tokens"] == sum(obs.usage or ())


def test_request_context_is_kept_and_its_temperature_read() -> None:
    overrides = orjson.loads((GOLDEN / "fragments" / "overrides.json").read_bytes())["overrides"]
    body = {"messages": [{"role": "user", "content": "Hi"}], "stream": True,
            "context": {"overrides": {**overrides, "temperature": 0.2}},
            "session_state": {"user": "ü"}}
    _, out, _ = translate_request(body, ME, ME, stream=True)
    assert out == body
    for up in DIALECTS.values():
        _, out, _ = translate_request(body, ME, up, stream=True, model="m")
        if "temperature" in getattr(strict(up), "SAMPLING", ()):
            assert strict(up).read_request(out).extra["temperature"] == 0.2, up.name


def test_strict_reader_wants_context_first_and_one_identity() -> None:
    reader = strict(ME)
    data = ME.samples.streams["text"]
    first, rest = data.split(b"\n", 1)
    reader.read_stream(data)
    with pytest.raises(AssertionError, match="context"):
        reader.read_stream(rest)
    other = rest.replace(b"chatcmpl-8lNX48CGv9kW7vXTCa9Jb0J4RfnlQ", b"chatcmpl-other", 1)
    assert other != rest
    with pytest.raises(AssertionError, match="id"):
        reader.read_stream(first + b"\n" + other)
