"""Unit tests of the canonical model's helpers (gateway/canonical.py)."""

from __future__ import annotations

import os
import string
from typing import Any

from gateway.canonical import (
    AssistantMessage,
    ChatResponse,
    Citation,
    agent_header,
    citations_of,
    context_with_citations,
    followups_of,
    merge_context,
    random_hex,
)

DP = {"text": ["a.pdf#page=1: first snippet"], "citations": ["a.pdf#page=1"]}


# --- merge_context -------------------------------------------------------------------------------


def test_merge_context_later_keys_win() -> None:
    old = {"data_points": DP, "thoughts": [1], "followup_questions": None}
    new = {"thoughts": [2], "followup_questions": ["Why?"]}
    assert merge_context(old, new) == {
        "data_points": DP, "thoughts": [2], "followup_questions": ["Why?"]}


def test_merge_context_is_shallow_and_does_not_mutate() -> None:
    old = {"data_points": {"text": ["x: 1"], "images": []}}
    new = {"data_points": {"text": ["y: 2"]}}
    merged = merge_context(old, new)
    assert merged == {"data_points": {"text": ["y: 2"]}}
    assert old == {"data_points": {"text": ["x: 1"], "images": []}}


def test_merge_context_flattens_nested_context() -> None:
    # the reference backend's last stream line: context.context plus followup_questions
    first = {"data_points": DP, "followup_questions": None, "answer": None}
    last = {"context": {"data_points": DP, "followup_questions": None, "answer": None},
            "followup_questions": ["What is the capital of Spain?"]}
    merged = merge_context(first, last)
    assert "context" not in merged
    assert merged["followup_questions"] == ["What is the capital of Spain?"]
    assert merged["data_points"] == DP


def test_merge_context_nested_twice_and_outer_wins() -> None:
    nested = {"context": {"context": {"thoughts": ["deep"], "x": 1}, "x": 2}, "x": 3}
    assert merge_context(None, nested) == {"thoughts": ["deep"], "x": 3}


def test_merge_context_nested_deeper_than_the_recursion_limit() -> None:
    """orjson parses 1,024 levels; the flattening must not recurse (it ran in every capability
    gate, so a deep context used to raise out of the stream translator)."""
    nested: dict[str, Any] = {"data_points": {"text": ["deep.pdf: here"]}, "depth": -1}
    for depth in range(5000):
        nested = {"context": nested, "depth": depth}
    assert merge_context(None, nested) == {"data_points": {"text": ["deep.pdf: here"]},
                                           "depth": 4999}
    assert citations_of(nested) == [Citation("deep.pdf", "deep.pdf", None, "here")]
    assert followups_of(nested) == []


def test_merge_context_with_missing_sides() -> None:
    assert merge_context(None, None) is None
    assert merge_context(None, {"a": 1}) == {"a": 1}
    assert merge_context({"a": 1}, None) == {"a": 1}
    assert merge_context({"a": 1}, "not an object") == {"a": 1}
    assert merge_context("junk", {"a": 1}) == {"a": 1}


# --- citations_of --------------------------------------------------------------------------------


def test_citations_of_splits_on_first_colon_space() -> None:
    ctx = {"data_points": {"text": [
        "Northwind.pdf#page=91:    Tips: be careful: really",
        "https://example.com/x: web result",
    ]}}
    assert citations_of(ctx) == [
        Citation("Northwind.pdf#page=91", "Northwind.pdf#page=91", None,
                 "   Tips: be careful: really"),
        Citation("https://example.com/x", "https://example.com/x", "https://example.com/x",
                 "web result"),
    ]


def test_citations_of_entry_without_separator_has_no_snippet() -> None:
    ctx = {"data_points": {"text": ["just-a-name.pdf", "time:12:30"]}}
    assert citations_of(ctx) == [
        Citation("just-a-name.pdf", "just-a-name.pdf", None, None),
        Citation("time:12:30", "time:12:30", None, None),
    ]


def test_citations_of_adds_citations_not_already_named() -> None:
    ctx = {"data_points": {
        "text": ["a.pdf: alpha", "b.pdf: beta"],
        "citations": ["a.pdf", "c.pdf", "https://e.com/d", "c.pdf"],
        "images": [{"url": "data:image/png;base64,AAAA", "detail": "auto"}],
    }}
    assert citations_of(ctx) == [
        Citation("a.pdf", "a.pdf", None, "alpha"),
        Citation("b.pdf", "b.pdf", None, "beta"),
        Citation("c.pdf", "c.pdf", None, None),
        Citation("https://e.com/d", "https://e.com/d", "https://e.com/d", None),
    ]


def test_citations_of_keeps_duplicate_text_entries() -> None:
    # the spec's own example names page 91 twice, with two snippets
    ctx = {"data_points": {"text": ["p.pdf#page=91: one", "p.pdf#page=91: two"]}}
    assert [c.snippet for c in citations_of(ctx)] == ["one", "two"]


def test_citations_of_nested_context_and_junk() -> None:
    assert citations_of({"context": {"data_points": DP}}) == [
        Citation("a.pdf#page=1", "a.pdf#page=1", None, "first snippet")]
    assert citations_of(None) == []
    assert citations_of({"data_points": None}) == []
    assert citations_of({"data_points": {"text": [1, None, "ok: yes"]}}) == [
        Citation("ok", "ok", None, "yes")]


# --- context_with_citations ----------------------------------------------------------------------


def test_context_with_citations_builds_recommended_shape() -> None:
    cites = [
        Citation("source-123", "Intro to QC", "https://example.com/q", "Qubits."),
        Citation("b.pdf", "b.pdf", None, None),
        Citation("c-id", None, None, "snippet with no title"),
    ]
    assert context_with_citations(cites) == {"data_points": {
        "text": ["Intro to QC: Qubits.", "c-id: snippet with no title"],
        "citations": ["https://example.com/q", "b.pdf", "c-id"],
    }}


def test_context_with_citations_keeps_base_and_other_data_points() -> None:
    base: dict[str, Any] = {"thoughts": ["t"],
                            "data_points": {"images": ["i"], "text": ["old: x"]}}
    out = context_with_citations([Citation("n", "n", None, "s")], base)
    assert out == {"thoughts": ["t"],
                   "data_points": {"images": ["i"], "text": ["n: s"], "citations": ["n"]}}
    assert base["data_points"]["text"] == ["old: x"]  # not mutated


def test_context_with_citations_without_citations_returns_base() -> None:
    assert context_with_citations([]) is None
    base = {"a": 1}
    assert context_with_citations([], base) is base


def test_citations_round_trip_through_context() -> None:
    cites = [Citation("a.pdf#page=3", "a.pdf#page=3", None, "x: y"),
             Citation("https://e.com", "https://e.com", "https://e.com", "web"),
             Citation("n.txt", "n.txt", None, None)]
    assert citations_of(context_with_citations(cites)) == cites


# --- followups_of, agent_header, ChatResponse.text ---------------------------------------------


def test_followups_of() -> None:
    assert followups_of({"followup_questions": ["a?", 3, "b?"]}) == ["a?", "b?"]
    assert followups_of({"context": {"x": 1}, "followup_questions": ["q?"]}) == ["q?"]
    assert followups_of({"context": {"followup_questions": ["inner?"]}}) == ["inner?"]
    assert followups_of({"followup_questions": None}) == []
    assert followups_of(None) == []


def test_agent_header() -> None:
    assert agent_header("Research", first=True) == "**Research:** "
    assert agent_header("Code", first=False) == "\n\n**Code:** "
    assert agent_header(None, first=True) == ""
    assert agent_header(None, first=False) == "\n\n"


def test_text_of_single_message_is_its_content() -> None:
    assert ChatResponse([AssistantMessage("héllo 👋\n")]).text == "héllo 👋\n"


def test_text_of_multi_agent_answer() -> None:
    resp = ChatResponse([AssistantMessage("one", agent="Research"),
                         AssistantMessage("two", agent="Code")])
    assert resp.text == "**Research:** one\n\n**Code:** two"


def test_text_of_single_named_agent_has_header() -> None:
    assert ChatResponse([AssistantMessage("hi", agent="Bot")]).text == "**Bot:** hi"


def test_text_of_mixed_named_and_unnamed() -> None:
    resp = ChatResponse([AssistantMessage("a"), AssistantMessage("b", agent="B"),
                         AssistantMessage("c")])
    assert resp.text == "a\n\n**B:** b\n\nc"


# --- random_hex ----------------------------------------------------------------------------------


def test_random_hex_has_the_asked_length_and_never_repeats_across_refills() -> None:
    assert len(random_hex()) == 32 and len(random_hex(12)) == 24
    drawn = [random_hex() for _ in range(1000)]  # 16 KB: four refills of the 4 KiB buffer
    assert len(set(drawn)) == len(drawn)
    assert all(set(d) <= set(string.hexdigits.lower()) and len(d) == 32 for d in drawn)
    assert len(random_hex(5000)) == 10000  # more than one buffer at once


def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    random_hex()  # the parent holds a buffer of random bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, random_hex().encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert len(child) == 32
    assert child != random_hex()  # the id the parent's buffer gives next


# --- the classes that write their own __init__ ---------------------------------------------------


def _samples() -> dict[type, dict[str, Any]]:
    """A value for every field of each class that writes its own ``__init__`` (see
    gateway/canonical.py), none of them its default, no two the same."""
    from gateway.balancer import Balancer
    from gateway.canonical import (
        AssistantMessage,
        ChatRequest,
        ChatResponse,
        Message,
        OutputFormat,
        ReasoningRequest,
        StreamFinish,
        StreamStart,
        TextDelta,
        TextPart,
        ToolCall,
        ToolChoice,
        ToolDef,
        Usage,
    )
    from gateway.dialects.fields import Field, Use
    from gateway.exchange.answer import Progress
    from gateway.exchange.attempts import Answered, AttemptContext, AttemptLog
    from gateway.exchange.outcome import Attempt, Outcome

    usage = Usage(1, 2, 3, 4, 5)
    return {
        Usage: {"input_tokens": 11, "output_tokens": 12, "cached_input_tokens": 13,
                "cache_write_tokens": 14, "reasoning_tokens": 15},
        TextDelta: {"text": "t", "agent": "a", "message_id": "m"},
        StreamFinish: {"reason": "length", "usage": usage},
        StreamStart: {"role": "r", "context": {"c": 1}, "session_state": {"s": 1}, "id": "i",
                      "created": 7, "model": "m", "usage": usage},
        Message: {"role": "user", "content": "hi", "context": {"c": 2}, "name": "n",
                  "tool_calls": [ToolCall("c1", "f", "{}")], "tool_call_id": "c2",
                  "is_error": True, "reasoning": [], "extras": {"e": 1}},
        ChatRequest: {"messages": [Message("user", "hi")], "stream": True, "context": {"c": 3},
                      "session_state": {"s": 2}, "session_minted": True, "model": "m",
                      "sampling": {"temperature": 0.5}, "tools": [ToolDef("f")],
                      "tool_choice": ToolChoice("auto"), "reasoning": ReasoningRequest("low"),
                      "output": OutputFormat("json_object"), "extras": {"e": 2},
                      "extras_dialect": "d", "hints": {"h": 1}, "options": {"o": 1},
                      "unmapped": ["u"], "wire": {"w": 1}, "field_uses": []},
        TextPart: {"text": "t"},
        AssistantMessage: {"content": "c", "role": "r", "agent": "a", "content_type": "text",
                           "id": "i", "tool_calls": [ToolCall("c1", "f", "{}")],
                           "reasoning": [], "extras": {"e": 3}},
        ChatResponse: {"messages": [AssistantMessage("c")], "context": {"c": 4},
                       "session_state": {"s": 3}, "finish_reason": "stop", "usage": usage,
                       "id": "i", "created": 8, "model": "m", "extras": {"e": 4},
                       "extras_dialect": "d"},
        Answered: {"outcome": "ok"},
        AttemptLog: {"attempts": [Attempt("u", "ok")], "upstream": "u", "upstream_dialect": "d",
                     "upstream_wait": 0.5, "dropped": ["x"]},
        # (what each attempt shares: only identity is checked, so an object of the declared
        # type where compiled code checks one, any object elsewhere)
        AttemptContext: {name: {} if name == "states" else "r" if name == "request_id"
                         else Balancer() if name == "balancer" else object() for name in (
                             "route", "states", "health", "transport", "balancer", "request",
                             "config", "answer", "log", "request_id", "trace")},
        Use: {"path": "p", "field": Field("p")},
        Progress: {"status": 200, "chunks": 3, "first_content": 1.5, "client_wait": 2.5,
                   "error": "e", "usage": usage, "dropped": ["x"], "sent_bytes": 9,
                   "model": "m", "finish_reason": "stop"},
        Attempt: {"upstream": "u", "outcome": "ok", "seconds": 0.5, "status": 200},
        Outcome: {"request_id": "r", "route": "/", "client_dialect": "c", "status": 200,
                  "duration": 0.25, "upstream": "u", "upstream_dialect": "d", "stream": True,
                  "ttft": 0.125, "upstream_wait": 0.5, "client_wait": 0.75, "chunks": 4,
                  "attempts": (Attempt("u", "ok"),), "dropped": ("x",), "usage": usage,
                  "error": "e", "disconnected": True, "path": "/p", "method": "GET",
                  "client": "127.0.0.1", "user_agent": "ua", "request_bytes": 5,
                  "response_bytes": 6, "model": "m", "response_model": "rm",
                  "finish_reason": "stop", "trace": None, "key": "k"},
    }


def _same(got: Any, given: Any) -> bool:
    """``got`` is ``given`` (a number compiled code keeps unboxed is the same number, boxed
    anew)."""
    if type(given) in (int, float, bool):
        return type(got) is type(given) and got == given
    return got is given


def test_hand_written_constructors_keep_to_their_fields() -> None:
    """Each such ``__init__`` takes every field, by name (and, but for keyword-only classes, in
    the fields' order), sets each to what it was given, and gives each field left out the
    default the dataclass declares (a new one from its factory each time)."""
    import dataclasses

    for cls, sample in _samples().items():
        fields = dataclasses.fields(cls)
        assert [f.name for f in fields] == list(sample), cls
        made = cls(**sample)
        for f in fields:
            assert _same(getattr(made, f.name), sample[f.name]), (cls, f.name)
        if not any(f.kw_only for f in fields):
            made = cls(*sample.values())
            for f in fields:
                assert _same(getattr(made, f.name), sample[f.name]), (cls, f.name)
        required = {f.name: sample[f.name] for f in fields
                    if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        one, two = cls(**required), cls(**required)
        for f in fields:
            if f.name in required:
                continue
            if f.default_factory is not dataclasses.MISSING:
                assert getattr(one, f.name) == f.default_factory(), (cls, f.name)
                assert getattr(one, f.name) is not getattr(two, f.name), (cls, f.name)
            else:
                assert getattr(one, f.name) == f.default, (cls, f.name)
                assert type(getattr(one, f.name)) is type(f.default), (cls, f.name)
