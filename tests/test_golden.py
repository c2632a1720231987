"""Golden tests: every sample a dialect ships and every example and capture in tests/golden (see its
README) parses, renders back unchanged in its own dialect, decodes the same whatever the reads,
and translates into every registered dialect in a form that dialect's strict reader accepts,
carrying what both sides declare.

Files are found by dialect, never named: ``tests/golden/<dialect name>/<case>.<kind>`` with the
samples' kinds (``request.json``, ``response.json``, ``stream``, ``error.json``); ``fragments/``
holds pieces of context the specs show alone, ``history/`` and ``quirks/`` what only a
dialect's own tests read (tests/dialects).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from fakes import SeededIds
from observe import (
    Case,
    answer_checks,
    chunks,
    client_request,
    read_client_stream,
    read_upstream_stream,
    request_checks,
    run_stream,
    strict,
    translate_client_request,
    translate_whole,
)
from strict._rag import read_context
from strict._wire import tolerant
from strict.observed import Observed

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatResponse,
    StreamEvent,
    citations_of,
    followups_of,
    use_id_source,
)
from gateway.carry import Policy
from gateway.dialects import DIALECTS, Dialect
from gateway.pipeline import (
    ResponseAssembler,
    StreamDecoding,
    adapt_response,
    optional,
    render_body,
    translate_response,
)

GOLDEN = Path(__file__).parent / "golden"
KINDS = ("request.json", "response.json", "stream", "error.json")
NAMES = list(DIALECTS)


def kind_of(path: Path) -> str | None:
    return next((k for k in KINDS if path.name.endswith("." + k)), None)


def golden(d: Dialect, kind: str) -> dict[str, Path]:
    """The golden files of ``d`` of one kind, by case name."""
    folder = GOLDEN / d.name
    if not folder.is_dir():
        return {}
    return {f"golden:{p.name.removesuffix('.' + kind)}": p
            for p in sorted(folder.iterdir()) if p.is_file() and kind_of(p) == kind}


def bodies(d: Dialect, kind: str) -> dict[str, Any]:
    """Samples and golden files of one kind: parsed JSON, or stream bytes."""
    samples = d.samples
    out: dict[str, Any] = {
        "request.json": {f"sample:{k}": v for k, v in samples.requests.items()},
        "response.json": {f"sample:{k}": v for k, v in samples.responses.items()},
        "stream": {f"sample:{k}": v for k, v in samples.streams.items()},
        "error.json": {"sample:error": samples.error} if samples.error is not None else {},
    }[kind]
    for name, path in golden(d, kind).items():
        out[name] = path.read_bytes() if kind == "stream" else orjson.loads(path.read_bytes())
    return out


def fragments(name: str) -> list[Path]:
    return sorted(GOLDEN.glob(f"*/fragments/{name}*.json"))


def fragment_ids(paths: list[Path]) -> list[str]:
    return [p.relative_to(GOLDEN).as_posix() for p in paths]


# --- the data itself -----------------------------------------------------------------------------


def test_golden_folders_are_dialects_and_files_have_kinds() -> None:
    folders = [p for p in GOLDEN.iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        assert folder.name in DIALECTS, f"{folder.name} is no registered dialect"
        for p in folder.iterdir():
            if p.is_dir():
                assert p.name in ("fragments", "history", "quirks"), p
                assert all(q.suffix in (".json", ".stream") for q in p.iterdir()), p
            else:
                assert kind_of(p) is not None, p
                if p.name.endswith(".json"):
                    orjson.loads(p.read_bytes())


@pytest.mark.parametrize("name", NAMES)
def test_every_dialect_ships_the_text_case(name: str) -> None:
    samples = DIALECTS[name].samples
    assert "text" in samples.requests and "text" in samples.responses
    assert "text" in samples.streams and samples.error is not None
    assert 400 <= samples.error_status <= 599


# --- same dialect: parse then render is an identity ----------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_requests_round_trip(name: str) -> None:
    d = DIALECTS[name]
    for case, body in bodies(d, "request.json").items():
        req = d.parse_request(body)
        assert orjson.loads(orjson.dumps(d.render_request(req, stream=req.stream, model=None))) \
            == body, case
        strict(d).read_request(body)  # the test data is what the dialect's clients send


@pytest.mark.parametrize("name", NAMES)
def test_responses_round_trip(name: str) -> None:
    d = DIALECTS[name]
    req = d.parse_request(d.samples.requests["text"])
    for case, body in bodies(d, "response.json").items():
        resp = d.parse_response(body)
        assert d.parse_error(body) is None, case
        out = orjson.loads(orjson.dumps(d.render_response(resp, req)))
        assert out == body or strict(d).read_whole(out) == strict(d).read_whole(body), case
        if isinstance(out, dict) and isinstance(body, dict):
            # what a dialect adds for another reader of the same answer, never a change
            assert {k: v for k, v in out.items() if k in body} == body, case


def test_a_whole_answer_written_as_bytes_is_its_render_serialised() -> None:
    """A dialect that has its whole answer as bytes already (``render_response_body``, what the
    exchange writes) gives the bytes of ``orjson.dumps`` of its ``render_response``: every
    sample answer of every dialect through it."""
    own = [d for d in DIALECTS.values() if optional(d, "render_response_body") is not None]
    assert own  # (else this tests nothing)
    for d in own:
        req = d.parse_request(d.samples.requests["text"])
        for up in DIALECTS.values():
            for case, body in bodies(up, "response.json").items():
                resp, _ = adapt_response(up.parse_response(body), d, "drop")
                with use_id_source(SeededIds()):
                    want = orjson.dumps(d.render_response(resp, req))
                with use_id_source(SeededIds()):
                    got = render_body(d, resp, req)
                assert got == want, f"{up.name}/{case} -> {d.name}"


@pytest.mark.parametrize("name", NAMES)
def test_errors_round_trip(name: str) -> None:
    d = DIALECTS[name]
    for case, body in bodies(d, "error.json").items():
        message = strict(d).read_error(body)
        err = d.parse_error(body)
        assert err is not None and err.message == message, case
        again = d.render_error(ChatError(d.samples.error_status, err.message, err.code, err.type))
        assert strict(d).read_error(again) == message, case
        assert d.parse_error(again) is not None, case


@pytest.mark.parametrize("name", NAMES)
def test_streams_pass_through_same_dialect(name: str) -> None:
    """A same-dialect route shows its client what the upstream sent."""
    d = DIALECTS[name]
    req, _ = client_request(d, stream=True)
    for case, data in bodies(d, "stream").items():
        want = read_upstream_stream(d, data)
        t, out = run_stream(d, d, req, chunks(data, random.Random(case)))
        assert read_client_stream(d, out, same=True) == want, case
        assert (t.error is not None) == (want.error is not None), case


@pytest.mark.parametrize("name", NAMES)
def test_streams_without_their_last_terminator(name: str) -> None:
    """A body whose last event or line has no terminator (the chatui spec's example, the
    reference backend's error capture) is read whole, on a same-dialect route too (where its
    last payload is the client's finish) and into every other dialect."""
    d = DIALECTS[name]
    for case, data in bodies(d, "stream").items():
        cut = data.rstrip(b"\r\n")
        want = read_upstream_stream(d, data)
        assert read_upstream_stream(d, cut) == want, case
        for c in DIALECTS.values():
            req, _ = client_request(c, stream=True)
            _, out = run_stream(d, c, req, [cut], policy="drop")
            got = read_client_stream(c, out, same=d is c)
            assert (got.text, got.error) == (want.text, want.error), (case, c.name)
            if d is c:
                assert got == want, case


# --- decoding, whatever the reads ----------------------------------------------------------------


def decode(d: Dialect, pieces: list[bytes]) -> list[StreamEvent]:
    dec = StreamDecoding(d)
    events: list[StreamEvent] = []
    for piece in pieces:
        events += dec.feed(piece)
    return events + dec.finish()


def assembled(events: list[StreamEvent]) -> ResponseAssembler:
    asm = ResponseAssembler()
    for e in events:
        asm.add(e)
    return asm


@pytest.mark.parametrize("name", NAMES)
def test_streams_decode_the_same_split_at_every_byte(name: str) -> None:
    """One read, a read per byte, and (for the smaller bodies) two reads cut at every offset
    give the same events; and they say what the dialect's strict reader read."""
    d = DIALECTS[name]
    for case, data in bodies(d, "stream").items():
        whole = decode(d, [data])
        assert decode(d, [data[i:i + 1] for i in range(len(data))]) == whole, case
        if len(data) <= 2048:
            for i in range(len(data) + 1):
                assert decode(d, [data[:i], data[i:]]) == whole, (case, i)
        want = read_upstream_stream(d, data)
        asm = assembled(whole)
        assert asm.response().text == want.text, case
        assert (asm.error.message if asm.error else None) == want.error, case


JSON_LINES = [(n, case) for n, d in DIALECTS.items() for case, data in bodies(d, "stream").items()
              if tolerant(data).startswith(b"{")]


@pytest.mark.parametrize(("name", "case"), JSON_LINES, ids=[f"{n}/{c}" for n, c in JSON_LINES])
def test_json_lines_printed_back_to_back_decode_the_same(name: str, case: str) -> None:
    """The spec documents print stream objects back to back (``}{``); a reader copes."""
    d = DIALECTS[name]
    body = tolerant(bodies(d, "stream")[case])
    glued = b"".join(orjson.dumps(orjson.loads(line)) for line in body.splitlines())
    assert decode(d, [glued]) == decode(d, [body])


# --- into every dialect --------------------------------------------------------------------------


def golden_pairs() -> list[tuple[str, str]]:
    return [(u, c) for u in NAMES for c in NAMES if (GOLDEN / u).is_dir()]


PAIRS = golden_pairs()
IDS = [f"{u}->{c}" for u, c in PAIRS]


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_golden_answers_translate(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    for name, path in golden(u, "response.json").items():
        body = orjson.loads(path.read_bytes())
        case = Case(name, body, strict(u).read_whole(body))
        for sent in (None, "conv-client"):
            req, asked = client_request(c, stream=False, sent=sent)
            policy: Policy = "drop"
            out, lost, rejected = translate_whole(body, u, c, req, policy=policy)
            got = strict(c).read_whole(out)
            answer_checks(u, c, case.want, got, stream=False, sent=asked.session_state,
                          reported=lost, policy=policy, rejected=rejected, asked=asked)
    for name, path in golden(u, "stream").items():
        data = path.read_bytes()
        want = read_upstream_stream(u, data)
        for sent in (None, "conv-client"):
            req, asked = client_request(c, stream=True, sent=sent)
            t, out = run_stream(u, c, req, chunks(data, random.Random(name)), policy="drop")
            got = read_client_stream(c, out, same=u is c)
            try:
                answer_checks(u, c, want, got, stream=True, sent=asked.session_state,
                              reported=t.dropped, policy="drop", asked=asked)
            except AssertionError as e:
                raise AssertionError(f"{name} sent={sent}: {e}") from e


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_golden_requests_and_errors_translate(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    for path in golden(u, "request.json").values():
        body = orjson.loads(path.read_bytes())
        for stream in (False, True):
            out, lost, rejected = translate_client_request(body, u, c, stream=stream,
                                                           policy="drop")
            request_checks(u, c, strict(u).read_request(body), strict(c).read_request(out),
                           stream=stream, lost=lost, policy="drop", rejected=rejected)
    for name, path in golden(u, "error.json").items():
        body = orjson.loads(path.read_bytes())
        err = u.parse_error(body)
        assert err is not None, name
        out = c.render_error(ChatError(502, err.message, err.code, err.type))
        assert strict(c).read_error(out) == strict(u).read_error(body), name


# --- fragments of context ------------------------------------------------------------------------


@pytest.mark.parametrize("path", fragments("data_points"),
                         ids=fragment_ids(fragments("data_points")))
def test_data_points_fragments_name_their_sources(path: Path) -> None:
    """The canonical reading of ``data_points`` names the sources the protocol's reading does."""
    ctx = orjson.loads(path.read_bytes())
    theirs = Observed()
    read_context(ctx, theirs)
    assert [c.id for c in citations_of(ctx)] == theirs.citations
    assert [(c.id, c.snippet) for c in citations_of(ctx)][:len(ctx["data_points"]["text"])] == [
        tuple(e.split(": ", 1)) for e in ctx["data_points"]["text"]]


@pytest.mark.parametrize("path", fragments("followup_questions"),
                         ids=fragment_ids(fragments("followup_questions")))
def test_followup_fragments(path: Path) -> None:
    ctx = orjson.loads(path.read_bytes())
    assert followups_of(ctx) == ctx["followup_questions"]
    assert followups_of({"context": ctx}) == ctx["followup_questions"]  # the backend's nesting


@pytest.mark.parametrize("path", fragments("thoughts"), ids=fragment_ids(fragments("thoughts")))
def test_thoughts_travel_verbatim_where_both_sides_carry_them(path: Path) -> None:
    ctx = orjson.loads(path.read_bytes())
    carriers = [d for d in DIALECTS.values() if d.capabilities.thoughts]
    assert carriers
    for u in carriers:
        req = u.parse_request(u.samples.requests["text"])
        body = u.render_response(ChatResponse([AssistantMessage("x")], context=ctx), req)
        for c in DIALECTS.values():
            creq, _ = client_request(c, stream=False)
            out, lost = translate_response(body, u, c, creq, policy="drop")
            if c.capabilities.thoughts:
                assert c.parse_response(out).context["thoughts"] == ctx["thoughts"]
                assert strict(c).read_whole(out).thoughts
            else:
                assert "thoughts" in lost
