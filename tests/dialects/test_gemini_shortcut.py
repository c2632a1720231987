"""The Gemini stream decoder's shortcut for the common event (``_Decoder.decode``) reads every
event as its general path (``_Decoder._decode``) reads it: the same events, the same error, the
same state after (counts kept for the finish, calls made, finished or not), for events spelled in
camelCase, snake_case or both, with keys the shortcut does not know, null values, missing or
damaged parts, several candidates or parts, thoughts and function calls; and the common events
are read by the shortcut alone."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.canonical import StreamEvent, StreamFinish, TextDelta, Usage
from gateway.dialects import get
from gateway.errors import DialectError

G = get("gemini")

_START = {"candidates": [{"content": {"parts": [{"text": "s"}], "role": "model"}, "index": 0}],
          "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                            "totalTokenCount": 2},
          "modelVersion": "m", "responseId": "r"}
_FINISH = {"candidates": [{"finishReason": "STOP"}]}
_COUNTS = {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}
_TEXT = [{"text": "a"}]

_PARTS: dict[str, Any] = {
    "text": _TEXT,
    "texts": [{"text": "a"}, {"text": ""}, {"text": "b"}],
    "empty text": [{"text": ""}],
    "none": [],
    "thought": [{"text": "t", "thought": True}],
    "signed thought": [{"text": "t", "thought": True, "thoughtSignature": "c2ln"}],
    "signed text": [{"text": "a", "thoughtSignature": "c2ln"}],
    "text then thought": [{"text": "a"}, {"text": "t", "thought": True}],
    "call": [{"functionCall": {"name": "f", "args": {"x_y": 1}}}],
    "call with id": [{"functionCall": {"name": "f", "id": "c1", "args": None}}],
    "text then call": [{"text": "a"}, {"functionCall": {"name": "f", "args": {}}}],
    "calls": [{"functionCall": {"name": "f"}}, {"functionCall": {"name": "g", "args": {}}}],
    "call without name": [{"functionCall": {"args": {}}}],
    "null text": [{"text": None}],
    "text and null": [{"text": "a", "thought": None}],
    "unknown key": [{"text": "a", "extraKey": 1}],
    "not a part": [{"text": "a"}, 1],
    "image": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}],
}

_MISSING = object()


def _frame(parts: Any = _TEXT, *, content: Any = None, candidate: Any = None,
           candidates: Any = None, counts: Any = _COUNTS, finish: Any = _MISSING,
           **top: Any) -> dict[str, Any]:
    """A stream event of the common shape, but for what is given (``_MISSING``: left out)."""
    if content is None:
        content = {"parts": parts, "role": "model"}
    if candidate is None:
        candidate = {"content": content, "index": 0}
        if finish is not _MISSING:
            candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate] if candidates is None else candidates}
    if counts is not _MISSING:
        out["usageMetadata"] = counts
    out.update({"modelVersion": "m", "responseId": "r"})
    out.update(top)
    return {k: v for k, v in out.items() if v is not _MISSING}


def _shapes() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, parts in _PARTS.items():
        yield f"parts {name}", _frame(parts)
        yield f"parts {name}, finished", _frame(parts, finish="STOP")
    contents: dict[str, Any] = {
        "no role": {"parts": _TEXT}, "no parts": {"role": "model"}, "empty": {},
        "null parts": {"parts": None, "role": "model"}, "parts not a list": {"parts": "a"},
        "unknown key": {"parts": _TEXT, "role": "model", "extraKey": 1},
        "null role": {"parts": _TEXT, "role": None},
        "a key that camel-cases to parts": {"parts": _TEXT, "parts_": [{"text": "b"}]},
        "parts under such a key alone": {"role": "model", "parts_": _TEXT}}
    for name, content in contents.items():
        yield f"content {name}", _frame(content=content)
    candidates: dict[str, Any] = {
        "no content": {"index": 0}, "null content": {"content": None, "index": 0},
        "content a string": {"content": "a"}, "no index": {"content": {"parts": _TEXT}},
        "null finish": {"content": {"parts": _TEXT}, "finishReason": None},
        "finish a number": {"content": {"parts": _TEXT}, "finishReason": 1},
        "safety": {"content": {"parts": _TEXT}, "finishReason": "SAFETY"},
        "unknown key": {"content": {"parts": _TEXT}, "index": 0, "safetyRatings": []},
        "not an object": "a",
        "a key that camel-cases to content": {"content": {"parts": _TEXT},
                                              "content_": {"parts": []}}}
    for name, candidate in candidates.items():
        yield f"candidate {name}", _frame(candidate=candidate)
    lists: dict[str, Any] = {
        "two": [{"content": {"parts": _TEXT}}, {"content": {"parts": [{"text": "b"}]}}],
        "none": [], "null": None, "not a list": {"content": {}}, "of a number": [1]}
    for name, cands in lists.items():
        yield f"candidates {name}", _frame(candidates=cands)
    countss: dict[str, Any] = {
        "with thoughts": {**_COUNTS, "thoughtsTokenCount": 5},
        "with details": {**_COUNTS, "promptTokensDetails": [{"modality": "TEXT"}]},
        "total only": {"totalTokenCount": 9}, "booleans": {**_COUNTS, "promptTokenCount": True,
                                                           "candidatesTokenCount": False},
        "null prompt": {**_COUNTS, "promptTokenCount": None},
        "thoughts only": {"thoughtsTokenCount": 2, "totalTokenCount": 3, "x": 1},
        "null": None, "a list": [1], "missing": _MISSING, "empty": {}}
    for name, counts in countss.items():
        yield f"counts {name}", _frame(counts=counts)
        yield f"counts {name}, finished", _frame(counts=counts, finish="MAX_TOKENS")
    tops: dict[str, dict[str, Any]] = {
        "no model": {"modelVersion": _MISSING}, "no id": {"responseId": _MISSING},
        "null model": {"modelVersion": None}, "unknown key": {"sdkHttpResponse": {}},
        "blocked": {"promptFeedback": {"blockReason": "SAFETY"}},
        "null error": {"error": None},
        "error": {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}},
        "private key": {"_private": 1},
        "a key that camel-cases to candidates": {"candidates_": [{"content": {"parts": []}}]}}
    for name, extra in tops.items():
        yield f"top {name}", _frame(**extra)


def _snake_key(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def _snake(obj: Any, depth: int | None) -> Any:
    """``obj`` with the keys of its objects in snake_case, down to ``depth`` levels of objects
    (``None``: all), a level counting each object on the way (lists are passed through)."""
    if isinstance(obj, list):
        return [_snake(v, depth) for v in obj]
    if not isinstance(obj, dict) or depth == 0:
        return obj
    below = None if depth is None else depth - 1
    return {_snake_key(k): _snake(v, below) for k, v in obj.items()}


def _at_level(obj: Any, level: int, change: Any) -> Any:
    """``obj`` with ``change`` applied to its objects at ``level`` alone (0: ``obj`` itself)."""
    if isinstance(obj, list):
        return [_at_level(v, level, change) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if level == 0:
        return change(obj)
    return {k: _at_level(v, level - 1, change) for k, v in obj.items()}


def _both(obj: dict[str, Any]) -> dict[str, Any]:
    """Each key with an underscore-free name also under its snake_case name, another value
    under it where the value is a string or a number (which of the two wins is the general
    path's call)."""
    out = dict(obj)
    for k, v in obj.items():
        if _snake_key(k) != k:
            out[_snake_key(k)] = v + "!" if isinstance(v, str) else \
                v + 100 if type(v) is int else v
    return out


def _spellings(frame: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "camelCase", frame
    yield "snake_case", _snake(frame, None)
    for level in range(6):  # top, candidate, content, part, function call / counts' values
        yield f"snake_case at level {level}", _at_level(frame, level,
                                                        lambda o: _snake(o, 1))
        yield f"both spellings at level {level}", _at_level(frame, level, _both)


def _cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for shape, frame in _shapes():
        for spelling, spelled in _spellings(frame):
            yield f"{shape}; {spelling}", spelled


def _read(frame: dict[str, Any], *, general: bool) -> tuple[Any, ...]:
    """What a started decoder gives for ``frame`` and what it holds after: the events (or the
    error), the usage it would finish with, whether it finished, the calls it made, and what a
    later finish and the stream's end give."""
    dec = G.decoder()
    dec.decode(copy.deepcopy(_START))
    read = dec._decode if general else dec.decode
    events: Any
    try:
        events = read(copy.deepcopy(frame))
    except DialectError as e:
        events = ("error", e.message, e.where)
    state = (dec._usage_so_far(), dec._finished, dec._calls)
    return events, state, dec.decode(copy.deepcopy(_FINISH)), dec.end()


def test_the_shortcut_reads_every_event_as_the_general_path_reads_it() -> None:
    cases = list(_cases())
    assert len(cases) > 1000
    for name, frame in cases:
        assert _read(frame, general=False) == _read(frame, general=True), name


_COMMON: list[tuple[dict[str, Any], list[StreamEvent]]] = [
    (_frame(), [TextDelta("a")]),
    (_frame([{"text": "a"}, {"text": ""}, {"text": "b"}]), [TextDelta("a"), TextDelta("b")]),
    (_frame([{"text": ""}], finish="STOP"),
     [StreamFinish("stop", Usage(input_tokens=3, output_tokens=4))]),
    (_frame(counts={**_COUNTS, "thoughtsTokenCount": 5}, finish="MAX_TOKENS"),
     [TextDelta("a"), StreamFinish("length", Usage(input_tokens=3, output_tokens=9,
                                                   reasoning_tokens=5))]),
    (_frame(counts=_MISSING, modelVersion=_MISSING, finish="STOP"),
     [TextDelta("a"), StreamFinish("stop", Usage(input_tokens=1, output_tokens=1))]),
    (_frame(content={"parts": _TEXT}), [TextDelta("a")]),
]


@pytest.mark.parametrize("frame,events", _COMMON)
def test_the_common_events_are_read_by_the_shortcut(
        frame: dict[str, Any], events: list[StreamEvent]) -> None:
    dec = G.decoder()
    dec.decode(copy.deepcopy(_START))
    assert dec._shortcut(frame) == events
