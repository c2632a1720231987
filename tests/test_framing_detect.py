"""Framing sniffed from the bytes (never the Content-Type), and the captures of real servers (now
the dialects' samples and tests/golden files) read through :class:`SniffingReader` whole, byte by
byte and split at every offset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import gateway.dialects
from gateway.errors import FramingError
from gateway.framing import (
    Framing,
    Named,
    RawData,
    SniffingReader,
    detect_framing,
    encoder_for,
)
from gateway.framing.jsonlines import encode_line
from gateway.framing.sse import encode_event

SAMPLES = Path(gateway.dialects.__file__).resolve().parent / "samples"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
BOM = b"\xef\xbb\xbf"


def sniff(pieces: list[bytes]) -> tuple[Framing | None, list[Any]]:
    reader = SniffingReader()
    out: list[Any] = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    out.extend(reader.finish())
    return reader.framing, out


def bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


# --- detect_framing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("head", "want"), [
    (b"{", "jsonlines"),
    (b"[", "jsonlines"),
    (b'{"delta": {}}\n', "jsonlines"),
    (b"  \t\r\n{", "jsonlines"),
    (b"\n\n[1]", "jsonlines"),
    (BOM + b"{", "jsonlines"),
    (b'{"data: x":1}', "jsonlines"),
    (b"data: {}\n\n", "sse"),
    (b"data:", "sse"),
    (b"d", "sse"),
    (b": keep-alive\n\n", "sse"),
    (b":", "sse"),
    (b"event: message\n", "sse"),
    (b"id: 1\n", "sse"),
    (b"retry: 1000\n", "sse"),
    (b"\r\n\r\ndata: [DONE]\n\n", "sse"),
    (BOM + b"data: x", "sse"),
    (b"data: {\"a\": [1]}\n\n", "sse"),
])
def test_detect_framing(head: bytes, want: Framing) -> None:
    assert detect_framing(head) == want


@pytest.mark.parametrize("head", [b"", b" ", b"\r\n", b"\n\n\t ", BOM, BOM[:1], BOM[:2],
                                  BOM + b"\r\n"])
def test_detect_framing_waits_while_only_blanks_arrived(head: bytes) -> None:
    assert detect_framing(head) is None


# --- SniffingReader ---------------------------------------------------------------------------

JSONL = b'{"delta":{"role":"assistant"}}\n{"delta":{"content":"data: h\xc3\xa9"}}\n'
JSONL_WANT = [{"delta": {"role": "assistant"}}, {"delta": {"content": "data: hé"}}]
SSE = b': hi\n\ndata: {"a":"{h\xc3\xa9}"}\n\ndata: [DONE]\n\n'
SSE_WANT = [{"a": "{hé}"}, RawData("[DONE]")]


@pytest.mark.parametrize("prefix", [b"", b"\n", b"  \r\n\t\n", BOM, BOM + b"\r\n"])
@pytest.mark.parametrize(("body", "framing", "want"), [
    (JSONL, "jsonlines", JSONL_WANT),
    (SSE, "sse", SSE_WANT),
])
def test_sniffing_reader(prefix: bytes, body: bytes, framing: Framing, want: list[Any]) -> None:
    data = prefix + body
    assert sniff([data]) == (framing, want)
    assert sniff(bytewise(data)) == (framing, want)
    for i in range(len(data) + 1):
        assert sniff([data[:i], data[i:]]) == (framing, want), i


def test_sniffing_reader_returns_nothing_until_it_knows() -> None:
    reader = SniffingReader()
    assert reader.feed(b"\r\n") == []
    assert reader.framing is None
    assert reader.feed(b" ") == []
    assert reader.framing is None
    assert reader.feed(b'{"a":1}') == []
    assert reader.framing == "jsonlines"
    assert reader.feed(b"\n") == [{"a": 1}]
    assert reader.finish() == []


def test_sniffing_reader_with_only_blanks_gives_nothing() -> None:
    assert sniff([b"\r\n", b" \n"]) == (None, [])
    assert sniff([]) == (None, [])


def test_sniffing_reader_bounds_the_blanks_it_holds() -> None:
    reader = SniffingReader(64)
    assert reader.feed(b"\n" * 64) == []
    with pytest.raises(FramingError):
        reader.feed(b" ")
    # Blanks that arrive with the first payload are the reader's to skip, not held.
    assert SniffingReader(64).feed(b"\r\n" * 100 + b'{"a":1}\n') == [{"a": 1}]


def test_sniffing_reader_keeps_the_first_framing() -> None:
    # A JSON lines body whose later lines look like SSE is still JSON lines (and broken).
    reader = SniffingReader()
    assert reader.feed(b'{"a":1}\n') == [{"a": 1}]
    with pytest.raises(FramingError):
        reader.feed(b"data: {}\n")


def test_sse_data_that_is_not_json_is_raw_data() -> None:
    assert sniff([b"data: [DONE]\n\ndata: {oops\n\ndata: 12\n\n"]) == (
        "sse", [RawData("[DONE]"), RawData("{oops"), 12])


def test_multi_line_sse_data_is_one_payload() -> None:
    assert sniff([b'data: {"a":\ndata: 1}\n\n']) == ("sse", [{"a": 1}])


def test_sniffed_json_lines_errors_are_framing_errors() -> None:
    reader = SniffingReader()
    with pytest.raises(FramingError):
        reader.feed(b"{nope}\n")


@pytest.mark.parametrize("framing", ["jsonlines", "sse"])
def test_encoder_for_round_trips_through_the_sniffer(framing: Framing) -> None:
    encode = encoder_for(framing)
    assert encode is (encode_line if framing == "jsonlines" else encode_event)
    payloads = [{"a": "x\ny"}, {"b": [1, 2]}, {"c": "😀"}]
    body = b"".join(encode(orjson.dumps(p)) for p in payloads)
    assert sniff([body]) == (framing, payloads)
    assert sniff(bytewise(body)) == (framing, payloads)


def test_a_named_event_is_framed_with_its_name_and_reads_back_as_it_was() -> None:
    event = Named("response.output_text.delta", b'{"delta":"h\\u00e9"}')
    framed = encode_event(event)
    assert framed == b'event: response.output_text.delta\ndata: {"delta":"h\\u00e9"}\n\n'
    reader = SniffingReader(named=True)
    assert reader.feed(framed) + reader.finish() == [Named(event.event, {"delta": "hé"})]
    assert encode_line(event) == b'{"delta":"h\\u00e9"}\n'  # no place for a name in a line


# --- golden captures --------------------------------------------------------------------------


def capture(name: str) -> bytes:
    """A capture, by its path under the samples or (``golden:``) under tests/golden."""
    if name.startswith("golden:"):
        return (GOLDEN_DIR / name.removeprefix("golden:")).read_bytes()
    return (SAMPLES / name).read_bytes()


def check_text(payloads: list[Any]) -> None:
    first, empty, text, last = payloads
    assert first["delta"] == {"role": "assistant"}
    assert first["context"]["data_points"]["citations"] == ["Benefit_Options-2.pdf"]
    assert first["context"]["data_points"]["text"] == [
        "Benefit_Options-2.pdf: There is a whistleblower policy."]
    assert first["session_state"] is None
    assert empty == {"delta": {"content": None, "role": "assistant"}}
    assert text == {"delta": {"content": "The capital of France is Paris. [Benefit_Options-2.pdf].",
                              "role": None}}
    usage = last["context"]["thoughts"][-1]["props"]["token_usage"]
    assert usage == {"prompt_tokens": 23, "completion_tokens": 896, "reasoning_tokens": 0,
                     "total_tokens": 919}


def check_session_state(payloads: list[Any]) -> None:
    assert len(payloads) == 4
    assert payloads[0]["session_state"] == {"conversation_id": 1234}
    assert payloads[-1]["session_state"] == {"conversation_id": 1234}
    assert payloads[2]["delta"]["content"] == \
        "The capital of France is Paris. [Benefit_Options-2.pdf]."


def check_followup(payloads: list[Any]) -> None:
    assert len(payloads) == 5
    assert payloads[2]["delta"]["content"] == \
        "The capital of France is Paris. [Benefit_Options-2.pdf]. "
    last = payloads[-1]["context"]
    assert last["followup_questions"] == ["What is the capital of Spain?"]
    assert last["context"]["data_points"]["citations"] == ["Benefit_Options-2.pdf"]


def check_exception(payloads: list[Any]) -> None:
    (only,) = payloads  # the capture has no final newline: finish() must still give it
    assert only["error"].startswith("The app encountered an error processing your request.\n")
    assert only["error"].endswith("Error type: <class 'ZeroDivisionError'>\n")


def check_crlf(payloads: list[Any]) -> None:
    assert payloads == [
        {"delta": {"role": "assistant"}, "sessionState": "6c6f2c4a-7b1e-4f7e-9f5a-1f2e3d4c5b6a"},
        {"delta": {"content": "Hello"}},
        {"delta": {"content": ", world"}},
    ]


def check_openai_usage(payloads: list[Any]) -> None:
    assert len(payloads) == 7
    assert payloads[-1] == RawData("[DONE]")
    chunks = payloads[:-1]
    assert all(c["id"] == "chatcmpl-A1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "",
                                                "refusal": None}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Paris is the capital of France. \U0001f1eb\U0001f1f7"
    assert chunks[4]["choices"][0]["finish_reason"] == "stop"
    assert chunks[5]["choices"] == []
    assert chunks[5]["usage"] == {"prompt_tokens": 12, "completion_tokens": 8,
                                  "total_tokens": 20}


def check_openai_error(payloads: list[Any]) -> None:
    assert len(payloads) == 3
    assert payloads[1]["choices"][0]["delta"] == {"content": "Paris"}
    assert payloads[2] == {"error": {
        "message": "The server had an error while processing your request.",
        "type": "server_error", "param": None, "code": None}}


def check_chatui_stream(payloads: list[Any]) -> None:
    assert [p["status"] for p in payloads] == ["processing", "processing", "completed"]
    assert {p["messageId"] for p in payloads} == {"msg-123"}
    assert payloads[-1]["content"] == \
        "I'm analyzing your question about quantum computing. Qubits can be 0 and 1 at once."
    assert payloads[-1]["sources"] == [{
        "id": "source-123", "title": "Introduction to Quantum Computing",
        "url": "https://example.com/quantum", "snippet": "Quantum computers use qubits."}]


def check_chatui_minimal(payloads: list[Any]) -> None:
    assert payloads == [[{"Items": [{"$type": "TextContent",
                                     "Text": "This is the response from the Python API."}]}]]


def check_chatui_multi_agent(payloads: list[Any]) -> None:
    (answer,) = payloads  # one pretty-printed array over many lines
    assert [m["agentName"] for m in answer] == ["Research", "Code"]
    assert answer[0]["sources"][0]["url"] == "https://example.com/research-paper"
    assert answer[1]["contentType"] == "markdown"


GOLDEN = [
    ("protocol-2024-05-29/text.stream", "jsonlines", check_text),
    ("protocol-2024-05-29/session.stream", "jsonlines",
     check_session_state),
    ("protocol-2024-05-29/followup.stream", "jsonlines", check_followup),
    ("golden:protocol-2024-05-29/capture-exception.stream", "jsonlines", check_exception),
    ("protocol-2024-05-29/crlf.stream", "jsonlines", check_crlf),
    ("openai/text.stream", "sse", check_openai_usage),
    ("golden:openai/capture-midstream-error.stream", "sse", check_openai_error),
    ("chatui/text.stream", "sse", check_chatui_stream),
    ("golden:chatui/capture-minimal.response.json", "jsonlines", check_chatui_minimal),
    ("golden:chatui/capture-multi-agent.response.json", "jsonlines", check_chatui_multi_agent),
]


@pytest.mark.parametrize(("name", "framing", "check"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_capture(name: str, framing: Framing, check: Any) -> None:
    data = capture(name)
    whole = sniff([data])
    assert whole[0] == framing
    check(whole[1])
    assert sniff(bytewise(data)) == whole
    for i in range(0, len(data) + 1, max(1, len(data) // 200)):
        assert sniff([data[:i], data[i:]]) == whole, i


@pytest.mark.parametrize("name", [g[0] for g in GOLDEN if g[1] == "jsonlines"
                                  and not g[0].endswith(".json")])
def test_golden_json_lines_agree_with_a_naive_line_split(name: str) -> None:
    data = capture(name)
    naive = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    assert sniff([data]) == ("jsonlines", naive)

