"""``chat-gateway translate --from D1 --to D2 (--request | --response) [--stream]``, through the
function the command runs (:func:`gateway.translate_cli.run_translate`) with stdin/stdout as bytes,
for every registered pair; what comes out is read by the target dialect's strict reader.
"""

from __future__ import annotations

import io
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from observe import DEFAULT_MODEL, ERROR, RICH, read_upstream_stream, strict
from strict._wire import tolerant

from gateway.carry import GOVERNED, REPORTED, Policy
from gateway.dialects import DIALECTS, Dialect
from gateway.dialects.stored import stored_responses_of
from gateway.translate_cli import run_translate

GOLDEN = Path(__file__).parent / "golden"
NAMES = list(DIALECTS)
PAIRS = [(s, t) for s in NAMES for t in NAMES]
IDS = [f"{s}->{t}" for s, t in PAIRS]


def run(source: str, target: str, data: bytes, *, request: bool = False, stream: bool = False,
        model: str | None = None, policy: Policy = "reject",
        ) -> tuple[str | None, bytes, list[str]]:
    stdout, dropped = io.BytesIO(), []
    reason = run_translate(source, target, request=request, stream=stream, model=model,
                           stdin=io.BytesIO(data), stdout=stdout, policy=policy, dropped=dropped)
    return reason, stdout.getvalue(), dropped


def one_json_line(out: bytes) -> Any:
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    return orjson.loads(out)


def files(d: Dialect, kind: str) -> dict[str, bytes]:
    """The bodies of the samples and golden files of one kind (``request``, ``response``,
    ``stream``), as bytes."""
    samples = d.samples
    if kind == "stream":
        out = {f"sample:{k}": v for k, v in samples.streams.items()}
    else:
        table = samples.requests if kind == "request" else samples.responses
        out = {f"sample:{k}": orjson.dumps(v) for k, v in table.items()}
    suffix = ".stream" if kind == "stream" else f".{kind}.json"
    folder = GOLDEN / d.name
    if folder.is_dir():
        out |= {f"golden:{p.name}": p.read_bytes() for p in sorted(folder.glob(f"*{suffix}"))}
    return out


def assert_reason(reason: str | None, *words: str) -> str:
    assert reason is not None
    assert "\n" not in reason and reason.strip() == reason
    for w in words:
        assert w in reason, (w, reason)
    return reason


# --- every body of every dialect, into every dialect ---------------------------------------------


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=IDS)
def test_streams_translate(source: str, target: str) -> None:
    s, t = DIALECTS[source], DIALECTS[target]
    for name, data in files(s, "stream").items():
        want = read_upstream_stream(s, data)
        reason, out, dropped = run(source, target, data, stream=True, policy="drop")
        assert reason is None, (name, reason)
        got = read_upstream_stream(t, out) if s is t else strict(t).read_stream(out)
        assert got.text == want.text and got.error == want.error, name
        assert set(dropped) <= set(GOVERNED) | set(REPORTED), dropped
        if want.tool_calls and not t.capabilities.tools:
            assert "tool_calls" in dropped, name


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=IDS)
def test_whole_answers_and_errors_translate(source: str, target: str) -> None:
    s, t = DIALECTS[source], DIALECTS[target]
    for name, data in files(s, "response").items():
        want = strict(s).read_whole(orjson.loads(data))
        reason, out, _ = run(source, target, data, policy="drop")
        assert reason is None, (name, reason)
        assert strict(t).read_whole(one_json_line(out)).text == want.text, name
    error = orjson.dumps(s.samples.error)
    reason, out, _ = run(source, target, error)
    assert reason is None
    assert strict(t).read_error(one_json_line(out)) == strict(s).read_error(s.samples.error)


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=IDS)
def test_requests_translate(source: str, target: str) -> None:
    s, t = DIALECTS[source], DIALECTS[target]
    for name, data in files(s, "request").items():
        sent = strict(s).read_request(orjson.loads(data))
        for stream in (False, True):
            reason, out, dropped = run(source, target, data, request=True, stream=stream,
                                       model=DEFAULT_MODEL, policy="drop")
            assert reason is None, (name, reason)
            got = strict(t).read_request(one_json_line(out))
            kept = [m.text for m in sent.messages if m.tool_result_for is None
                    and (m.text or not m.tool_calls or t.capabilities.tools)]
            assert [m.text for m in got.messages if m.tool_result_for is None] == kept, name
            if got.stream is not None:  # --stream asks for one; else the body's own flag
                assert got.stream is (stream or bool(sent.stream)), name
            if "model" in getattr(strict(t), "SAMPLING", ()) and sent.model is None:
                assert got.model == DEFAULT_MODEL, name
            if any(m.images for m in sent.messages) and not t.capabilities.images:
                assert "images" in dropped, name


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=IDS)
def test_reject_is_the_default(source: str, target: str) -> None:
    """What the target cannot carry of a governed kind fails the command, naming it, unless
    ``--on-unsupported drop`` says otherwise."""
    s, t = DIALECTS[source], DIALECTS[target]
    for name, data in files(s, "stream").items():
        want = read_upstream_stream(s, data)
        lost = (want.tool_calls and not t.capabilities.tools) or \
            (want.reasoning and not t.capabilities.reasoning)
        reason, out, _ = run(source, target, data, stream=True)
        if lost and want.error is None:
            assert_reason(reason, t.name, "cannot carry")
            assert strict(t).read_stream(out).error is not None, name
        else:
            assert reason is None, (name, reason)


# --- bad input: one line naming what is wrong ----------------------------------------------------


@pytest.mark.parametrize("source", NAMES)
def test_not_json(source: str) -> None:
    for request in (True, False):
        reason, out, _ = run(source, NAMES[0], b'{"messages": [', request=request)
        assert_reason(reason, source, "request" if request else "response", "not valid JSON")
        assert out == b""


@pytest.mark.parametrize("source", NAMES)
def test_bodies_of_the_wrong_shape(source: str) -> None:
    for body, request in ((b"{}", True), (b"[]", True), (b'"hi"', True), (b"{}", False),
                          (b"42", False)):
        reason, out, _ = run(source, NAMES[-1], body, request=request)
        assert_reason(reason, f"bad {source} {'request' if request else 'response'}")
        assert out == b""


def text_frames(d: Dialect) -> tuple[bytes, list[int]]:
    """A dialect's ``text`` stream in the strict form, and where each of its frames ends."""
    body = tolerant(d.samples.streams["text"], d.framing)
    sep = b"\n\n" if d.framing == "sse" else b"\n"
    ends, i = [], 0
    while (j := body.find(sep, i)) != -1:
        ends.append(j + len(sep))
        i = j + len(sep)
    return body, ends


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=IDS)
def test_truncated_stream(source: str, target: str) -> None:
    """The text stream without its last frame: a bad stream exactly when the source's own strict
    reader says it was cut short; the output says so too."""
    s, t = DIALECTS[source], DIALECTS[target]
    body, ends = text_frames(s)
    cut = body[:ends[-2]]
    reason, out, _ = run(source, target, cut, stream=True)
    got = read_upstream_stream(t, out) if s is t else strict(t).read_stream(out)
    try:
        want = read_upstream_stream(s, cut)
    except AssertionError:
        assert_reason(reason, f"bad {source} stream", "ended before")
        assert got.error is not None
        return
    assert reason is None and got.error is None and got.text == want.text


@pytest.mark.parametrize("source", NAMES)
def test_stream_cut_inside_a_value(source: str) -> None:
    s = DIALECTS[source]
    body, ends = text_frames(s)
    reason, out, _ = run(source, NAMES[0], body[:ends[0] // 2], stream=True)
    assert_reason(reason, f"bad {source} stream", "malformed")
    assert strict(DIALECTS[NAMES[0]]).read_stream(out).error is not None


def broken_streams(d: Dialect) -> dict[str, bytes]:
    """Streams of ``d`` that fail mid-way: from its samples and golden files, else written."""
    out = {n: b for n, b in files(d, "stream").items()
           if read_upstream_stream(d, b).error is not None}
    module = strict(d)
    if not out and hasattr(module, "write_stream"):
        broken = replace(RICH["rag-no-state"], error=ERROR, finish=None)
        out["written"] = module.write_stream(broken, random.Random(d.name))
    return out


BROKEN_PAIRS = [(s, t) for s, t in PAIRS if broken_streams(DIALECTS[s])]


@pytest.mark.parametrize(("source", "target"), BROKEN_PAIRS,
                         ids=[f"{s}->{t}" for s, t in BROKEN_PAIRS])
def test_declared_upstream_error_is_not_a_bad_input(source: str, target: str) -> None:
    """An error the upstream sent is translated, not refused (for every source whose test data
    has a stream that fails mid-way, or whose strict module can write one)."""
    s, t = DIALECTS[source], DIALECTS[target]
    for name, data in broken_streams(s).items():
        reason, out, _ = run(source, target, data, stream=True)
        assert reason is None, (name, reason)
        got = read_upstream_stream(t, out) if s is t else strict(t).read_stream(out)
        assert got.error == read_upstream_stream(s, data).error, name


@pytest.mark.parametrize("source", NAMES)
def test_empty_stream(source: str) -> None:
    """A stream body with nothing in it is a lost answer, in every dialect."""
    for body in (b"", b"\r\n\n"):
        for target in NAMES:
            reason, out, _ = run(source, target, body, stream=True)
            assert_reason(reason, f"bad {source} stream", "ended before")
            assert strict(DIALECTS[target]).read_stream(out).error is not None


@pytest.mark.parametrize("source", [n for n in NAMES if stored_responses_of(DIALECTS[n])])
def test_a_stored_response_is_named_not_lost(source: str) -> None:
    body = {**DIALECTS[source].samples.requests["text"], "previous_response_id": "resp_1"}
    for target in (n for n in NAMES if n != source):
        reason, out, _ = run(source, target, orjson.dumps(body), request=True)
        assert_reason(reason, "previous_response_id", "stored response")
        assert out == b""
