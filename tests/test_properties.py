"""Property tests: random answers and requests through every registered pair.

Hypothesis draws a neutral answer (unicode text, agents, citations, follow-ups, session state,
usage, tool calls, reasoning, a finish or a mid-stream error) and a client's session state; each
upstream dialect's strict module writes it as that dialect's server would (its writer keeps what
the dialect carries), the gateway translates it for every client dialect, whole and streamed in
random reads, and the client's strict reader must read exactly what both sides declare
(:func:`observe.answer_checks`). Requests likewise (:func:`observe.request_checks`).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from observe import (
    answer_checks,
    client_request,
    governed_losses,
    read_client_stream,
    read_upstream_stream,
    request_checks,
    run_stream,
    strict,
    translate_client_request,
    translate_whole,
)
from strict.observed import Observed, ObservedCall, ObservedMessage, agents_text

from gateway.carry import Policy
from gateway.dialects import DIALECTS, Dialect

# every example runs every pair: the nightly profile (HYPOTHESIS_PROFILE=fuzz) needs more than
# the default 60 s per test
pytestmark = pytest.mark.timeout(max(60, int(settings().max_examples * 0.1)))


def writers(kind: str) -> list[Dialect]:
    return [d for d in DIALECTS.values() if hasattr(strict(d), kind)]


# --- strategies ----------------------------------------------------------------------------------

TRICKY = ["👋🏽", "🇫🇷", "👨‍👩‍👧", "\n", "\r\n", "\r", "\n\n", "data: x", "}{", "\u2028", "é", "\\",
          '"', "\x00", "**A:** ", ": ", "[DONE]", "event: x\n"]
texts = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(TRICKY)),
                 max_size=8).map("".join)
words = st.text(min_size=1, max_size=12).filter(lambda s: s == s.strip() and ": " not in s)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=8,
)
states = st.one_of(st.none(), st.text(max_size=10), json_values)
url_names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1,
                    max_size=8).map(lambda s: "https://example.com/" + s)
calls = st.lists(st.builds(ObservedCall, words, words,
                           st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
                 max_size=3, unique_by=lambda c: c.id)


@st.composite
def answers(draw: st.DrawFn) -> Observed:
    turns = draw(st.lists(st.tuples(st.none() | words, texts.filter(bool)), max_size=3))
    agents: list[tuple[str | None, str]] = []
    for agent, text in turns:  # a repeated agent continues its message
        if agents and agents[-1][0] == agent:
            agents[-1] = (agent, agents[-1][1] + text)
        else:
            agents.append((agent, text))
    if len(agents) == 1 and agents[0][0] is None:
        agents = []
    text = agents_text(agents) if agents else draw(texts)
    names = draw(st.lists(words | url_names, max_size=4, unique=True))
    snippets = {n: draw(st.none() | st.text(max_size=16)) for n in names}
    tool_calls = draw(calls)
    return Observed(
        text=text, agents=agents, citations=names,
        followups=draw(st.lists(st.text(max_size=12), max_size=3)),
        thoughts=draw(st.booleans()), session_state=draw(states),
        usage=draw(st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
        tool_calls=tool_calls, reasoning=draw(texts),
        finish="tool_calls" if tool_calls else draw(st.sampled_from(["stop", "length",
                                                                     "content_filter"])),
        extra={"snippets": snippets})


@st.composite
def requests(draw: st.DrawFn) -> Observed:
    messages = [ObservedMessage("system", draw(texts))]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "images", "calls"]))
        if kind == "images":
            urls = draw(st.lists(url_names | st.just("data:image/png;base64,iVBORw0KGgo="),
                                 min_size=1, max_size=2))
            messages.append(ObservedMessage("user", draw(texts), images=urls))
        elif kind == "calls":
            made = draw(calls.filter(bool))
            messages.append(ObservedMessage("assistant", "", tool_calls=made))
            messages += [ObservedMessage("tool", draw(texts), tool_result_for=c.id)
                         for c in made]
        else:
            messages.append(ObservedMessage(kind, draw(texts)))
    messages.append(ObservedMessage("user", draw(texts)))
    # ("/" is the readers' notation for a namespace's member: tests/test_tool_shapes.py)
    tools = draw(st.lists(words.filter(lambda s: "/" not in s), max_size=2, unique=True))
    return Observed(messages=messages, tools=tools,
                    tool_choice=draw(st.sampled_from([None, "auto", "none", "required"]))
                    if tools else None,
                    session_state=draw(states), model=draw(st.none() | words),
                    extra={"temperature": draw(st.floats(0, 2))})


seeds = st.integers(0, 2**32)


def policies(want: Observed, cl: Dialect) -> tuple[Policy, ...]:
    return ("reject", "drop") if governed_losses(want, cl) else ("drop",)


# --- properties ----------------------------------------------------------------------------------


@given(answers(), states)
def test_whole_every_pair(obs: Observed, sent: Any) -> None:
    for up in writers("write_whole"):
        body = strict(up).write_whole(obs)
        want = strict(up).read_whole(body)
        for cl in DIALECTS.values():
            for policy in policies(want, cl):
                req, asked = client_request(cl, stream=False, sent=sent)
                out, lost, rejected = translate_whole(body, up, cl, req, policy=policy)
                got = None if out is None else strict(cl).read_whole(out)
                try:
                    answer_checks(up, cl, want, got, stream=False, sent=asked.session_state,
                                  reported=lost, policy=policy, rejected=rejected, asked=asked)
                except AssertionError as e:
                    raise AssertionError(f"{up.name}->{cl.name} {policy}: {e}") from e


def cut(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` cut at up to a dozen random places (inside UTF-8 sequences and frames too; every
    single-byte split is tested on fixed cases in test_matrix and test_golden)."""
    points = sorted(rng.choices(range(len(data) + 1), k=rng.randint(0, 12)))
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(answers(), states, st.none() | st.text(min_size=1, max_size=20), seeds)
def test_stream_every_pair(obs: Observed, sent: Any, error: str | None, seed: int) -> None:
    if error is not None:
        obs = replace(obs, error=error, finish=None)
    rng = random.Random(seed)
    for up in writers("write_stream"):
        data = strict(up).write_stream(obs, rng)
        want = read_upstream_stream(up, data)
        pieces = cut(data, rng)
        for cl in DIALECTS.values():
            for policy in policies(want, cl):
                req, asked = client_request(cl, stream=True, sent=sent)
                t, out = run_stream(up, cl, req, pieces, policy=policy)
                got = read_client_stream(cl, out, same=up is cl)
                try:
                    answer_checks(up, cl, want, got, stream=True, sent=asked.session_state,
                                  reported=t.dropped, policy=policy, asked=asked)
                except AssertionError as e:
                    raise AssertionError(f"{up.name}->{cl.name} {policy}: {e}") from e


@given(requests(), st.booleans())
def test_request_every_pair(obs: Observed, stream: bool) -> None:
    for cl in writers("write_request"):
        body = strict(cl).write_request(replace(obs, stream=stream))
        sent = strict(cl).read_request(body)
        for up in DIALECTS.values():
            for policy in ("reject", "drop"):
                out, lost, rejected = translate_client_request(body, cl, up, stream=stream,
                                                               policy=policy)
                got = None if out is None else strict(up).read_request(out)
                try:
                    request_checks(cl, up, sent, got, stream=stream, lost=lost, policy=policy,
                                   rejected=rejected)
                except AssertionError as e:
                    raise AssertionError(f"{cl.name}->{up.name} {policy}: {e}") from e
