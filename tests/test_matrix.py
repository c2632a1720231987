"""Every ordered (upstream, client) pair of registered dialects, whole and streamed, plus requests.

The upstream's bodies are its samples and the richer cases its strict module writes
(:mod:`observe`); the client's output is read by the client dialect's strict reader; what must
arrive is decided by the two dialects' capabilities only (:func:`observe.answer_checks`,
:func:`observe.request_checks`). No dialect is named: a dialect registered from outside (the
fixture dialect of tests/dialects) runs through every test here.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from observe import (
    RICH,
    Case,
    answer_checks,
    chunks,
    client_request,
    governed_losses,
    pairs,
    read_client_stream,
    read_upstream_stream,
    request_cases,
    request_checks,
    run_stream,
    stream_cases,
    strict,
    translate_client_request,
    translate_whole,
    whole_cases,
)
from strict._wire import tolerant
from strict.observed import Observed

from gateway.canonical import ChatError
from gateway.carry import GOVERNED, EventGate, Policy, Unsupported
from gateway.dialects import DIALECTS, Dialect
from gateway.dialects.base import FIELDS
from gateway.framing import encoder_for
from gateway.pipeline import (
    StreamAssembler,
    StreamTranslator,
    adapt_response,
    events_from_response,
    with_session_echo,
)

PAIRS = pairs()
IDS = [f"{u}->{c}" for u, c in PAIRS]
NAMES = list(DIALECTS)


def policies(want: Observed, cl: Dialect) -> tuple[Policy, ...]:
    return ("reject", "drop") if governed_losses(want, cl) else ("reject",)


def text_chars(up: Dialect, want: Observed) -> int:
    """The characters of answer text the upstream sent (agents' headers are the client's)."""
    if up.capabilities.multi_agent and want.agents:
        return sum(len(t) for _, t in want.agents)
    return len(want.text)


# --- the test data itself ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, d in DIALECTS.items()
                                  if hasattr(strict(d), "write_whole")])
def test_strict_writers_keep_what_the_dialect_declares(name: str) -> None:
    """The strict module's writer and reader agree on every field the dialect declares (else the
    matrix below would start from less than it thinks)."""
    d = DIALECTS[name]
    module, caps = strict(d), d.capabilities
    for case, obs in RICH.items():
        for got in (module.read_whole(module.write_whole(obs)),
                    read_upstream_stream(d, module.write_stream(obs, random.Random(case)))):
            assert got.text == obs.text, case
            assert (got.citations != []) == (caps.citations and obs.citations != []), case
            if caps.followups:
                assert got.followups == obs.followups, case
            if caps.thoughts:
                assert got.thoughts == obs.thoughts, case
            if caps.tools:
                assert got.tool_calls == obs.tool_calls, case
            if caps.reasoning:
                assert got.reasoning == obs.reasoning, case
            if caps.multi_agent and obs.agents:
                assert got.agents == obs.agents, case
            if caps.session_state == "json" or (isinstance(obs.session_state, str) and \
                    caps.session_state == "string"):
                assert got.session_state == obs.session_state, case


def test_every_capability_is_exercised() -> None:
    """Each declared field is carried by some upstream case of a dialect that declares it, so
    that the matrix checks it both where it survives and where it is reported."""
    seen: set[str] = set()
    for d in DIALECTS.values():
        caps = d.capabilities
        for stream, cases in ((False, whole_cases(d)), (True, stream_cases(d))):
            for c in cases:
                w = c.want
                found = {"citations": bool(w.citations), "followups": bool(w.followups),
                         "thoughts": w.thoughts, "session_state": w.session_state is not None,
                         "usage_stream" if stream else "usage_whole": w.usage is not None,
                         "multi_agent": len(w.agents) > 1, "tools": bool(w.tool_calls),
                         "reasoning": bool(w.reasoning)}
                seen |= {f for f, on in found.items() if on and getattr(caps, f)}
        for _, body in [*d.samples.requests.items()]:
            sent = strict(d).read_request(body)
            if caps.images and any(m.images for m in sent.messages):
                seen.add("images")
            if sent.output is not None and sent.output[0] in caps.structured_output:
                seen.add("structured_output")
    declared = {f for f in FIELDS for d in DIALECTS.values() if getattr(d.capabilities, f)}
    assert declared - seen == set()


# --- whole answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_whole(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    for case in whole_cases(u):
        for policy in policies(case.want, c):
            req, asked = client_request(c, stream=False, sent=case.sent)
            out, lost, rejected = translate_whole(case.body, u, c, req, policy=policy)
            got = None if out is None else strict(c).read_whole(out)
            if out is not None:
                assert c.parse_error(out) is None
            try:
                answer_checks(u, c, case.want, got, stream=False, sent=asked.session_state,
                              reported=lost, policy=policy, rejected=rejected, asked=asked)
            except AssertionError as e:
                raise AssertionError(f"{case.id} ({policy}): {e}") from e


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_whole_error(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    body = u.samples.error
    message = strict(u).read_error(body)
    err = u.parse_error(body)
    assert err is not None and err.message == message
    out = c.render_error(ChatError(u.samples.error_status, err.message, err.code, err.type))
    assert strict(c).read_error(out) == message
    assert c.parse_error(out) is not None
    for case in whole_cases(u):
        assert u.parse_error(case.body) is None, case.id


SHAPED = [(u, c) for u, c in PAIRS if DIALECTS[c].capabilities.answer_context is not None]


@pytest.mark.parametrize(("up", "cl"), SHAPED, ids=[f"{u}->{c}" for u, c in SHAPED])
def test_whole_answers_carry_the_context_the_client_declares(up: str, cl: str) -> None:
    """A client whose dialect declares an ``answer_context`` (its frontend reads the context of
    every answer) gets one in every whole answer: the upstream's context as it came, else the
    declared shape. Whole answers, and streams the gateway assembles into one."""
    u, c = DIALECTS[up], DIALECTS[cl]
    shape = c.capabilities.answer_context
    assert shape is not None
    answers = [(case.id, u.parse_response(case.body)) for case in whole_cases(u)]
    for case in stream_cases(u):
        assembler = StreamAssembler(u)
        assembler.feed(case.body)
        resp = assembler.finish()
        if assembler.error is None:
            answers.append((case.id, resp))
    assert answers
    for case_id, resp in answers:
        req, _ = client_request(c, stream=False)
        sent = resp.context
        adapted, _ = adapt_response(with_session_echo(resp, req), c, "drop")
        got = c.parse_response(c.render_response(adapted, req)).context
        assert got == (dict(shape) if sent is None else sent), case_id


# --- streams -------------------------------------------------------------------------------------


def check_stream(u: Dialect, c: Dialect, case: Case, pieces: list[bytes], policy: Policy,
                 ) -> None:
    req, asked = client_request(c, stream=True, sent=case.sent)
    t, out = run_stream(u, c, req, pieces, policy=policy)
    got = read_client_stream(c, out, same=u is c)
    want = case.want
    governed = governed_losses(want, c)
    if governed and policy == "reject":
        assert t.error is not None and t.error.code == "UNSUPPORTED" and not t.broken
    elif want.error is not None:
        assert t.error is not None and t.error.message == want.error and not t.broken
    else:
        assert t.error is None and t.done
        assert t.text_chars == text_chars(u, want)
    answer_checks(u, c, want, got, stream=True, sent=asked.session_state, reported=t.dropped,
                  policy=policy, asked=asked)


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_stream(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    for case in stream_cases(u):
        for policy in policies(case.want, c):
            rng = random.Random(f"{up}/{cl}/{case.id}/{policy}")
            try:
                check_stream(u, c, case, chunks(case.body, rng), policy)
            except AssertionError as e:
                raise AssertionError(f"{case.id} ({policy}): {e}") from e


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_stream_byte_by_byte(up: str, cl: str) -> None:
    """Every byte a read of its own: every split point of the body at once."""
    u, c = DIALECTS[up], DIALECTS[cl]
    for case in stream_cases(u):
        if case.id.startswith(("sample:text", "tools#", "agents#", "rag-no-state#0")):
            body = case.body
            check_stream(u, c, case, [body[i:i + 1] for i in range(len(body))], "drop")


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_stream_split_at_every_offset(up: str, cl: str) -> None:
    """The smallest stream of each upstream, cut in two at every byte, to every client (a test
    per pair: a Responses stream alone is 5,753 cuts a client)."""
    u, c = DIALECTS[up], DIALECTS[cl]
    case = min((c for c in stream_cases(u) if c.want.error is None),
               key=lambda c: len(c.body))
    for i in range(len(case.body) + 1):
        check_stream(u, c, case, [case.body[:i], case.body[i:]], "drop")


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_stream_assembled_into_a_whole_answer(up: str, cl: str) -> None:
    """An upstream that streams, a client that asked for a whole answer (the one stream driver,
    then the capability gate of whole answers)."""
    u, c = DIALECTS[up], DIALECTS[cl]
    for case in stream_cases(u):
        for policy in policies(case.want, c):
            req, asked = client_request(c, stream=False, sent=case.sent)
            asm = StreamAssembler(u)
            for piece in chunks(case.body, random.Random(case.id)):
                asm.feed(piece)
            resp = asm.finish()
            if case.want.error is not None:
                assert asm.error is not None and asm.error.message == case.want.error
                assert not asm.broken
                out = c.render_error(ChatError(502, asm.error.message, asm.error.code))
                assert strict(c).read_error(out) == case.want.error
                continue
            assert asm.error is None, (case.id, asm.error)
            rejected: Unsupported | None = None
            lost: list[str] = []
            got = None
            try:
                resp, lost = adapt_response(with_session_echo(resp, req), c, policy)
                got = strict(c).read_whole(c.render_response(resp, req))
            except Unsupported as e:
                rejected = e
            try:
                answer_checks(u, c, case.want, got, stream=False, sent=asked.session_state,
                              reported=lost, policy=policy, rejected=rejected, asked=asked,
                              late_model=True)
            except AssertionError as e:
                raise AssertionError(f"{case.id} ({policy}): {e}") from e


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_whole_answer_served_as_a_stream(up: str, cl: str) -> None:
    """An upstream that never streams, a client that asked for a stream: the whole answer as
    events, through the capability gate a route applies to every stream, then the client's
    encoder."""
    u, c = DIALECTS[up], DIALECTS[cl]
    for case in whole_cases(u):
        for policy in policies(case.want, c):
            req, asked = client_request(c, stream=True, sent=case.sent)
            resp = with_session_echo(u.parse_response(case.body), req)
            gate = EventGate(c, policy)
            encoder, frame = c.encoder(req), encoder_for(c.framing)
            events = gate.filter(events_from_response(resp))
            out = b"".join(frame(p) for e in events for p in encoder.encode(e))
            got = read_client_stream(c, out, same=False)
            try:
                answer_checks(u, c, case.want, got, stream=True, sent=asked.session_state,
                              reported=gate.dropped, policy=policy, asked=asked)
            except AssertionError as e:
                raise AssertionError(f"{case.id} ({policy}): {e}") from e


# --- streams that break --------------------------------------------------------------------------


def frame_ends(body: bytes) -> list[int]:
    """Where each frame of a body in the strict form ends (JSON lines, or SSE events)."""
    sep = b"\n\n" if body.endswith(b"\n\n") else b"\n"
    ends, i = [], 0
    while (j := body.find(sep, i)) != -1:
        ends.append(j + len(sep))
        i = j + len(sep)
    return ends


def assert_broken(t: Any, got: Observed) -> None:
    assert t.broken and t.error is not None, "a broken stream passed off as a clean finish"
    assert got.error is not None, "the client was not told the stream broke"


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_truncated_stream(up: str, cl: str) -> None:
    """Cut anywhere, an upstream's stream is never passed off as a clean finish, unless the
    upstream's own (tolerant) strict reader cannot tell the cut body from a whole one; then the
    client reads exactly what that reader read."""
    u, c = DIALECTS[up], DIALECTS[cl]
    req, _ = client_request(c, stream=True)
    for case in stream_cases(u):
        if case.want.error is not None or not case.id.startswith(("sample:", "agents#",
                                                                  "rag-string")):
            continue
        body = tolerant(case.body)
        ends = frame_ends(body)
        for end in [0, *ends[:-1]]:
            t, out = run_stream(u, c, req, [body[:end]], policy="drop")
            got = read_client_stream(c, out, same=u is c)
            try:
                want = read_upstream_stream(u, body[:end])
            except AssertionError:
                assert_broken(t, got)
                continue
            assert t.error is None and got.error is None, (case.id, end, t.error)
            assert got.text == want.text
        for start, end in zip([0, *ends], ends, strict=False):
            middle = (start + end) // 2
            if body[start:middle].strip():
                t, out = run_stream(u, c, req, [body[:middle]], policy="drop")
                assert_broken(t, read_client_stream(c, out, same=u is c))


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_aborted_stream(up: str, cl: str) -> None:
    """The upstream's connection failed mid-stream: the client is told, after what it was
    shown."""
    u, c = DIALECTS[up], DIALECTS[cl]
    req, _ = client_request(c, stream=True)
    case = next(k for k in stream_cases(u) if k.id == "sample:text")
    body = tolerant(case.body)
    half = frame_ends(body)[len(frame_ends(body)) // 2]
    t = StreamTranslator(u, c, req)
    out = t.feed(body[:half]) + t.abort("the upstream failed mid-stream: reset")
    got = read_client_stream(c, out, same=u is c)
    assert_broken(t, got)
    assert t.feed(body[half:]) == b"" and t.finish() == b""
    assert case.want.text.startswith(got.text)


# --- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cl", "up"), PAIRS, ids=[f"{c}->{u}" for c, u in PAIRS])
def test_request(cl: str, up: str) -> None:
    c, u = DIALECTS[cl], DIALECTS[up]
    for name, body in request_cases(c):
        sent = strict(c).read_request(body)
        for stream in (False, True):
            for policy in ("reject", "drop"):
                out, lost, rejected = translate_client_request(body, c, u, stream=stream,
                                                               policy=policy)
                got = None if out is None else strict(u).read_request(out)
                try:
                    request_checks(c, u, sent, got, stream=stream, lost=lost, policy=policy,
                                   rejected=rejected)
                except AssertionError as e:
                    raise AssertionError(f"{name} stream={stream} {policy}: {e}") from e


def test_governed_fields_are_known() -> None:
    """The fields the matrix expects to be refused are the ones the gate governs."""
    assert {"tools", "tool_choice", "tool_calls", "tool_results", "images",
            "reasoning"} <= set(GOVERNED)
