"""``chat-gateway translate --from D1 --to D2 (--request | --response) [--stream]``, through the
function the command runs (:func:`gateway.translate_cli.run_translate`) with stdin/stdout as bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from readback import read_back

from gateway.dialects import DIALECT_NAMES, get
from gateway.framing import RawData, SniffingReader
from gateway.translate_cli import run_translate

GOLDEN = Path(__file__).parent / "golden"
CAPTURES, SPECS = GOLDEN / "captures", GOLDEN / "specs"
P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
CAPTURE_DIALECT = {"ai-chat-protocol": P0529, "azure-search-openai-demo": P0529,
                   "chatui": CHATUI, "openai": OPENAI}
CAPTURE_FILES = sorted(p for p in CAPTURES.rglob("*") if p.is_file() and p.name != "README.md")


def run(source: str, target: str, data: bytes, *, request: bool = False, stream: bool = False,
        model: str | None = None) -> tuple[str | None, bytes]:
    stdout = io.BytesIO()
    reason = run_translate(source, target, request=request, stream=stream, model=model,
                           stdin=io.BytesIO(data), stdout=stdout)
    return reason, stdout.getvalue()


def one_json_line(out: bytes) -> Any:
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    return orjson.loads(out)


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", CAPTURE_FILES,
                         ids=[p.relative_to(CAPTURES).as_posix() for p in CAPTURE_FILES])
def test_every_capture_translates(path: Path, target: str) -> None:
    source = CAPTURE_DIALECT[path.parent.name]
    data = path.read_bytes()
    if path.suffix == ".json":
        reason, out = run(source, target, data)
        assert reason is None
        back = get(target).parse_response(one_json_line(out))
        assert back.text == get(source).parse_response(orjson.loads(data)).text
        return
    reason, out = run(source, target, data, stream=True)
    assert reason is None
    if get(target).framing == "jsonlines":
        assert out.endswith(b"\n")
        assert all(orjson.loads(line) for line in out.split(b"\n")[:-1])
    else:
        assert out.endswith(b"\n\n")
        assert all(e.startswith(b"data: ") for e in out.split(b"\n\n")[:-1])
    got, want = read_back(target, out), read_back(source, data)
    assert got.response().text == want.response().text
    assert (got.error and got.error.message) == (want.error and want.error.message)
    if want.error is None and target == OPENAI:
        assert out.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("target", DIALECT_NAMES)
def test_spec_requests_translate(target: str) -> None:
    for path in sorted(SPECS.glob("*/request*.json")):
        source = path.parent.name
        for stream in (False, True):
            reason, out = run(source, target, path.read_bytes(), request=True, stream=stream,
                              model="the-default")
            assert reason is None, path
            body = one_json_line(out)
            req = get(target).parse_request(body)
            assert [m.content for m in req.messages] == [
                m["content"] for m in orjson.loads(path.read_bytes())["messages"]]
            if target == OPENAI:
                assert body["model"] == "the-default"
            if target in (P0128, OPENAI):
                assert bool(body.get("stream")) is stream


@pytest.mark.parametrize("target", DIALECT_NAMES)
def test_spec_responses_and_errors_translate(target: str) -> None:
    for path in sorted([*SPECS.glob("*/response*.json"), *SPECS.glob("*/error*.json")]):
        source = path.parent.name
        reason, out = run(source, target, path.read_bytes())
        assert reason is None, path
        body = one_json_line(out)
        err = get(target).parse_error(body)
        if path.name.startswith("error"):
            want = orjson.loads(path.read_bytes())["error"]
            assert err is not None
            assert err.message == (want if isinstance(want, str) else want["message"])
        else:
            assert err is None
            get(target).parse_response(body)


def test_spec_streams_translate() -> None:
    for path in sorted(SPECS.glob("*/stream*")):
        source = path.parent.name
        for target in DIALECT_NAMES:
            reason, out = run(source, target, path.read_bytes(), stream=True)
            assert reason is None, (path, target)
            assert read_back(target, out).response().text or "error" in path.name


def test_request_stream_flag_and_model() -> None:
    body = orjson.dumps({"messages": [{"role": "user", "content": "Hi"}],
                         "context": {"overrides": {"temperature": 0.5}}})
    reason, out = run(P0529, OPENAI, body, request=True, stream=True, model="gpt-x")
    assert reason is None
    assert one_json_line(out) == {
        "model": "gpt-x", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0.5,
        "stream": True, "stream_options": {"include_usage": True}}


# --- bad input: one line naming what is wrong ----------------------------------------------------


def assert_reason(reason: str | None, *words: str) -> str:
    assert reason is not None
    assert "\n" not in reason and reason.strip() == reason
    for w in words:
        assert w in reason, (w, reason)
    return reason


@pytest.mark.parametrize("source", DIALECT_NAMES)
def test_not_json(source: str) -> None:
    for request in (True, False):
        reason, out = run(source, OPENAI, b'{"messages": [', request=request)
        assert_reason(reason, source, "request" if request else "response", "not valid JSON")
        assert out == b""


@pytest.mark.parametrize("source", DIALECT_NAMES)
def test_missing_messages(source: str) -> None:
    reason, out = run(source, P0128, b'{"stream": true}', request=True)
    assert_reason(reason, f"bad {source} request", "messages", "required")
    assert out == b""


def test_messages_of_the_wrong_shape() -> None:
    reason, _ = run(OPENAI, CHATUI, b'{"messages": [{"content": "hi"}]}', request=True)
    assert_reason(reason, "messages[0].role")
    reason, _ = run(CHATUI, OPENAI, b'{"messages": "hi"}', request=True)
    assert_reason(reason, "messages", "list")


def test_response_of_the_wrong_shape() -> None:
    reason, out = run(OPENAI, P0529, b'{"id": "x", "choices": []}')
    assert_reason(reason, "bad openai response", "choices")
    assert out == b""
    reason, _ = run(P0529, OPENAI, b'{"message": "hi"}')
    assert_reason(reason, "message", "object")


@pytest.mark.parametrize("target", DIALECT_NAMES)
def test_truncated_openai_stream(target: str) -> None:
    """No finish_reason and no [DONE]: the stream was cut, and the output says so too."""
    full = (CAPTURES / "openai" / "chat_stream_usage.sse").read_bytes()
    cut = full[: full.index(b'"finish_reason":"stop"')]
    cut = cut[: cut.rindex(b"\n\n") + 2]  # whole events only, the last one a content chunk
    reason, out = run(OPENAI, target, cut, stream=True)
    assert_reason(reason, "bad openai stream", "ended before it finished")
    asm = read_back(target, out)
    assert asm.error is not None and asm.response().text == "Paris is the capital of France. 🇫🇷"
    assert b"[DONE]" not in out and b'"completed"' not in out


@pytest.mark.parametrize("source", DIALECT_NAMES)
def test_stream_cut_inside_a_value(source: str) -> None:
    body = b'{"delta": {"content": "Hel' if get(source).framing == "jsonlines" else \
        b'data: {"choices": [{"delta": {"content": "Hel'
    reason, out = run(source, P0529, body, stream=True)
    assert_reason(reason, f"bad {source} stream", "malformed")
    payloads = SniffingReader().feed(out)
    assert payloads and "error" in payloads[-1]


def test_chatui_stream_without_completed() -> None:
    data = (CAPTURES / "chatui" / "chat_stream.sse").read_bytes()
    first_two = b"\n\n".join(data.split(b"\n\n")[:2]) + b"\n\n"
    reason, out = run(CHATUI, OPENAI, first_two, stream=True)
    assert_reason(reason, "bad chatui stream", "before it completed")
    payloads = SniffingReader().feed(out)
    assert RawData("[DONE]") not in payloads and "error" in payloads[-1]


def test_declared_upstream_error_is_not_a_bad_input() -> None:
    """An error the upstream sent is translated, not refused."""
    data = (CAPTURES / "openai" / "chat_stream_midstream_error.sse").read_bytes()
    reason, out = run(OPENAI, P0529, data, stream=True)
    assert reason is None
    assert orjson.loads(out.splitlines()[-1]) == {
        "error": "The server had an error while processing your request."}


@pytest.mark.parametrize("source", DIALECT_NAMES)
def test_empty_stream(source: str) -> None:
    """A stream body with nothing in it is a lost answer, in every dialect."""
    for body in (b"", b"\r\n\n"):
        reason, out = run(source, OPENAI, body, stream=True)
        assert_reason(reason, f"bad {source} stream", "ended before")
        assert b"[DONE]" not in out and b'"error"' in out
