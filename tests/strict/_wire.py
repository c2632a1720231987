"""Framing as a strict client checks it, written for the tests with the standard library only (no
gateway code, no orjson): JSON lines, SSE events, and the tolerant reading of what real servers
send (:func:`tolerant`), which the readers use for upstream bodies, never for the gateway's output.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

__all__ = ["dumps", "frame_lines", "frame_sse", "json_lines", "loads", "pieces", "sse_events",
           "text_messages", "tolerant"]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"an object repeats a key: {keys}"
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


def loads(data: str | bytes) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no repeated keys."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise AssertionError(f"not UTF-8: {e}") from None
    try:
        return json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise AssertionError(f"not JSON ({e}): {data[:200]!r}") from None


def dumps(value: Any) -> str:
    """Compact JSON, as servers send it (non-ASCII kept as UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_lines(data: bytes) -> list[Any]:
    """A JSON-lines body as the protocol's JavaScript SDK reads it, checked harder: every line
    ends in ``\\n`` (the SDK silently drops a last line without one), none is blank or holds a
    carriage return, each is one JSON value."""
    assert data, "an empty body"
    assert b"\r" not in data, "a carriage return in a JSON-lines body"
    assert data.endswith(b"\n"), f"the last line is not newline-terminated: {data[-80:]!r}"
    out = []
    for i, line in enumerate(data[:-1].split(b"\n")):
        assert line.strip(), f"line {i} is blank"
        out.append(loads(line))
    return out


def sse_events(data: bytes, *, named: bool = False) -> list[tuple[str | None, str]]:
    """An SSE body as ``(event name, data)`` pairs, checked harder than the WHATWG parser does:
    ``\\n`` line ends only, every event one ``data: `` line (after one ``event: `` line when
    ``named``) and a blank line, nothing but comments (keep-alives) in between."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AssertionError(f"not UTF-8: {e}") from None
    assert text, "an empty body"
    assert "\r" not in text, "a carriage return in an SSE body"
    assert text.endswith("\n\n"), f"the last event has no blank line after it: {text[-80:]!r}"
    out: list[tuple[str | None, str]] = []
    for i, block in enumerate(text[:-2].split("\n\n")):
        lines = [line for line in block.split("\n") if not line.startswith(":")]
        if not lines and block:
            continue  # a comment on its own
        event: str | None = None
        if named and lines and lines[0].startswith("event: "):
            event = lines[0][len("event: "):]
            assert event, f"event {i} has an empty name"
            lines = lines[1:]
        assert len(lines) == 1 and lines[0].startswith("data: "), \
            f"event {i} is not one data line: {block!r}"
        out.append((event, lines[0][len("data: "):]))
    return out


_LINE_END = re.compile(rb"\r\n|\r|\n")


def tolerant(data: bytes, framing: str | None = None) -> bytes:
    """What a tolerant client makes of a real server's body, rewritten in the strict form:
    CRLF or CR line ends, a byte order mark, blank lines between JSON lines, SSE comments, ids
    and retries, multi-line data and a missing final terminator are all read as the gateway's
    readers read them (the captures show each of these). The framing is told by the first
    bytes, as the gateway tells it; ``framing`` (``jsonlines`` or ``sse``) rewrites the body in
    that one (a server of an SSE dialect that sends JSON lines is read all the same)."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    lines = _LINE_END.split(data)
    head = data.lstrip(b" \t\r\n")
    if head[:1] in (b"{", b"["):
        kept = [line for line in lines if line.strip()]
        if framing == "sse":
            return b"".join(b"data: " + line + b"\n\n" for line in kept)
        return b"".join(line + b"\n" for line in kept)
    out: list[bytes] = []
    event: bytes | None = None
    payload: list[bytes] = []

    def dispatch() -> None:
        nonlocal event, payload
        if payload:
            if event is not None and event != b"message":
                out.append(b"event: " + event + b"\n")
            # JSON never holds a raw newline inside a string: joining with a space is the same value
            out.append(b"data: " + b" ".join(payload) + b"\n\n")
        event, payload = None, []

    for line in lines:
        if not line:
            dispatch()
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            payload.append(value)
        elif name == b"event":
            event = value
    dispatch()
    if framing == "jsonlines":
        return b"".join(e.split(b"data: ", 1)[1][:-1] for e in out if b"data: " in e)
    return b"".join(out)


def frame_lines(values: list[Any]) -> bytes:
    return "".join(dumps(v) + "\n" for v in values).encode()


def frame_sse(events: list[Any]) -> bytes:
    """``events``: JSON values, raw strings (``[DONE]``) or ``(name, value)`` pairs."""
    out = []
    for e in events:
        if isinstance(e, tuple):
            out.append(f"event: {e[0]}\ndata: {dumps(e[1])}\n\n")
        elif isinstance(e, str):
            out.append(f"data: {e}\n\n")
        else:
            out.append(f"data: {dumps(e)}\n\n")
    return "".join(out).encode()


def pieces(text: str, rng: random.Random) -> list[str]:
    """``text`` cut at up to eight random places (code points: a writer never splits one)."""
    if not text:
        return []
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def text_messages(obs: Any) -> list[dict[str, Any]]:
    """``{role, content}`` for each message a client of a text-only dialect has: no tool
    results, no turn that only called tools."""
    return [{"role": m.role, "content": m.text} for m in obs.messages
            if m.tool_result_for is None and not (m.tool_calls and not m.text)]
