"""The stream accelerators (gateway.pipeline_fast) change nothing but speed: for every ordered
pair of registered dialects, every stream of the upstream's (its samples, the rich cases its
strict writer writes, text streams its own encoder writes, each also spaced and escaped as other
servers write JSON, with CRLF line ends, cut short, with a malformed frame, and cut off by the
transport), read in several ways (at once, frame by frame, byte by byte when short, at seeded
random places), the client gets the same bytes from each read, and the translator ends in the
same state (error, broken, usage, dropped fields, counts), with the accelerators on and off.

No dialect is named: pairs, cases and what each can do come from the registry and the dialects'
declarations.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from fakes import SeededIds
from hypothesis import given, settings
from hypothesis import strategies as st
from observe import chunks, client_request, pairs, stream_cases

from gateway.canonical import (
    ChatRequest,
    Message,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    Usage,
    use_id_source,
)
from gateway.dialects import DIALECTS, Dialect
from gateway.framing import Slot, TextRun, encoder_for
from gateway.pipeline import StreamDecoding, StreamTranslator, optional
from gateway.pipeline_fast import (
    ACCELERATORS,
    Accelerate,
    FastStreamAssembler,
    FastStreamTranslator,
    TemplateDecoding,
    accelerators,
    stream_assembler,
    stream_translator,
)

PAIRS = pairs()
IDS = [f"{u}->{c}" for u, c in PAIRS]

TEXTS = ["Hello", ", ", "wörld", " 😀", " plain", " text", " «quoted»", " ü", " more", " 日本語",
         " again", " and", " again", " —", " end", " of", " the", " run", " of", " text", "."]
"""Pieces of text, ASCII and not, enough in a row for runs of text frames."""

_WHEN = re.compile(rb"\d{4}-\d\d-\d\dT[\d:.]+Z|(?<=\"created\":)\d+|(?<=\"created_at\":)\d+"
                   rb"|(?<=_duration\":)\d+")
"""What an encoder writes of the clock (times, and durations it measured): no part of what is
compared (its ids are: see :class:`fakes.SeededIds`)."""

LONG = 700
"""Bodies up to this long are also read byte by byte."""


@pytest.fixture(autouse=True)
def _drawn_ids() -> Iterator[None]:
    with use_id_source(SeededIds()):
        yield


# --- the upstream's streams ----------------------------------------------------------------------


def _separator(d: Dialect) -> bytes:
    return b"\n\n" if d.framing == "sse" else b"\n"


def _encoded(d: Dialect, events: list[StreamEvent]) -> bytes:
    encoder, frame = d.encoder(ChatRequest(messages=[Message("user", "hi")], stream=True)), \
        encoder_for(d.framing)
    return b"".join(frame(p) for e in events for p in encoder.encode(e))


def _spaced(d: Dialect, body: bytes) -> bytes:
    """Each JSON payload written as Python's json module writes it (spaces after separators,
    non-ASCII escaped), as some servers do and the gateway's own writer never would."""
    prefix = b"data:" if d.framing == "sse" else b""
    out = []
    for line in body.split(b"\n"):
        if line.startswith(prefix):
            rest = line[len(prefix):]
            try:
                value = json.loads(rest)
            except ValueError:
                pass
            else:
                line = prefix + (b" " if prefix else b"") + json.dumps(value).encode()
        out.append(line)
    return b"\n".join(out)


def _frames(d: Dialect, body: bytes) -> list[bytes]:
    """The body cut after each frame's end."""
    sep = _separator(d)
    parts = body.split(sep)
    out = [p + sep for p in parts[:-1]]
    return out + ([parts[-1]] if parts[-1] else [])


@cache
def upstream_streams(up: str) -> list[tuple[str, bytes, Any]]:
    """``(name, body, session state the client sends)`` for every stream of the upstream's."""
    u = DIALECTS[up]
    base: list[tuple[str, bytes, Any]] = [(c.id, c.body, c.sent) for c in stream_cases(u)]
    usage = Usage(input_tokens=3, output_tokens=len(TEXTS)) if u.capabilities.usage_stream \
        else None
    text: list[StreamEvent] = [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS)]
    base.append(("texts", _encoded(u, [*text, StreamFinish("stop", usage)]), None))
    base.append(("texts-error", _encoded(u, [*text, StreamError("it broke: ü 💥", code="x")]),
                 None))
    out = list(base)
    sep = _separator(u)
    for name, body, sent in base:
        out.append((f"{name}/spaced", _spaced(u, body), sent))
        out.append((f"{name}/crlf", body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"), sent))
        frames = _frames(u, body)
        middle = sum(map(len, frames[:len(frames) // 2]))
        out.append((f"{name}/cut", body[:middle + len(frames[len(frames) // 2]) // 2], sent))
        bad = b"data: {not json" + sep if u.framing == "sse" else b"{not json" + sep
        out.append((f"{name}/malformed", body[:middle] + bad + body[middle:], sent))
    return out


def readings(d: Dialect, name: str, body: bytes) -> Iterator[tuple[str, list[bytes], bool]]:
    """``(how, reads, aborted)``: the ways the body is read, the last one cut off by the
    transport halfway."""
    yield "whole", [body], False
    yield "frames", _frames(d, body), False
    if len(body) <= LONG:
        yield "bytes", [body[i:i + 1] for i in range(len(body))], False
    for k in range(2):
        yield f"random{k}", chunks(body, random.Random(f"{name}/{k}")), False
    reads = chunks(body, random.Random(f"{name}/aborted"))
    yield "aborted", reads[:max(1, len(reads) // 2)], True


# --- running -------------------------------------------------------------------------------------


def run(tr: StreamTranslator, reads: list[bytes], aborted: bool) -> tuple[Any, ...]:
    out = [_WHEN.sub(b"<when>", tr.feed(r)) for r in reads]
    last = tr.abort("the upstream reset the connection") if aborted else tr.finish()
    out.append(_WHEN.sub(b"<when>", last))
    return (out, tr.error, tr.broken, tr.failed, tr.done, tr.usage, list(tr.dropped), tr.chunks,
            tr.text_chars, tr.content_started, tr.model, tr.finish_reason, tr.events_read(),
            tr.feed(reads[0]) if reads else b"")


def translated(u: Dialect, c: Dialect, req: ChatRequest, reads: list[bytes], aborted: bool,
               accelerate: Accelerate, policy: str) -> tuple[Any, ...]:
    with use_id_source(SeededIds()):  # (the ids minted in here: the same each run)
        tr = stream_translator(u, c, req, policy=policy,  # type: ignore[arg-type]
                               accelerate=accelerate)
        assert isinstance(tr, FastStreamTranslator) == bool(accelerators(accelerate))
        return run(tr, reads, aborted)


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=IDS)
def test_the_accelerators_change_no_byte(up: str, cl: str) -> None:
    u, c = DIALECTS[up], DIALECTS[cl]
    singles: list[Accelerate] = [{"forward"}, {"templates"}, {"templates", "runs"}]
    for k, (name, body, sent) in enumerate(upstream_streams(up)):
        req, _ = client_request(c, stream=True, sent=sent)
        policy = ("reject", "drop")[k % 2]  # (both, over the cases)
        for how, reads, aborted in readings(u, name, body):
            plain = translated(u, c, req, reads, aborted, False, policy)
            fast = translated(u, c, req, reads, aborted, True, policy)
            assert fast == plain, (name, how)
            if how in ("whole", "frames"):
                for chosen in singles:
                    got = translated(u, c, req, reads, aborted, chosen, policy)
                    assert got == plain, (name, how, chosen)


@settings(max_examples=300, deadline=None)
@given(pair=st.sampled_from(PAIRS), data=st.data(),
       junk=st.lists(st.tuples(st.integers(0, 1 << 16), st.binary(min_size=1, max_size=3)),
                     max_size=2),
       cuts=st.lists(st.integers(1, 1 << 16), max_size=4))
def test_damaged_streams_are_the_same_with_accelerators(
        pair: tuple[str, str], data: st.DataObject, junk: list[tuple[int, bytes]],
        cuts: list[int]) -> None:
    """Any of the streams above with stray bytes written over it, read at any places."""
    up, cl = pair
    u, c = DIALECTS[up], DIALECTS[cl]
    name, body, sent = data.draw(st.sampled_from(upstream_streams(up)), label="stream")
    for at, bad in junk:
        at %= len(body) + 1
        body = body[:at] + bad + body[at + len(bad):]
    edges = sorted({k % len(body) for k in cuts if k % len(body)}) if body else []
    reads = [body[a:b] for a, b in zip([0, *edges], [*edges, len(body)], strict=True)]
    req, _ = client_request(c, stream=True, sent=sent)
    for policy in ("reject", "drop"):
        assert translated(u, c, req, reads, False, True, policy) == \
            translated(u, c, req, reads, False, False, policy), name


def grouped(d: Dialect, body: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """``(how, reads)``: reads of several whole frames each (runs of text frames, cut where one
    read ends), and the body cut in two or three inside frames."""
    frames = _frames(d, body)
    for k in (2, 3, 7):
        yield f"by{k}", [b"".join(frames[i:i + k]) for i in range(0, len(frames), k)]
    for n in (2, 3):
        edges = [len(body) * i // n for i in range(n + 1)]
        yield f"cut{n}", [body[a:b] for a, b in itertools.pairwise(edges)]


def assembled(u: Dialect, reads: list[bytes], accelerate: Accelerate) -> tuple[Any, ...]:
    asm = stream_assembler(u, accelerate=accelerate)
    assert isinstance(asm, FastStreamAssembler) == (
        "runs" in accelerators(accelerate) and optional(u, "text_path") is not None)
    read = []
    for r in reads:
        asm.feed(r)
        read.append((asm.events_read(), asm.error, asm.broken))
    resp = asm.finish()
    return resp, asm.error, asm.broken, asm.events_read(), read


@pytest.mark.parametrize("up", list(DIALECTS), ids=list(DIALECTS))
def test_an_assembled_answer_is_the_same_with_templates_and_runs(up: str) -> None:
    """The same answer, error and counts (after each read too) with templates, with templates
    and runs, and with neither."""
    u = DIALECTS[up]
    for name, body, _ in upstream_streams(up):
        ways = [(how, reads) for how, reads, _aborted in readings(u, name, body)]
        for how, reads in [*ways, *grouped(u, body)]:
            plain = assembled(u, reads, False)
            for accelerate in ({"templates"}, {"templates", "runs"}, True):
                assert assembled(u, reads, accelerate) == plain, (name, how, accelerate)


def test_an_assembled_answer_holds_each_text_of_a_run_once() -> None:
    """(What the test above compares is not two ways that never differ.) A stream of texts, read
    whole and in reads of a few frames, is answered with those texts, each once, whatever runs
    were taken; and some upstreams' are taken."""
    ran: set[str] = set()
    for name, u in DIALECTS.items():
        body = _encoded(u, [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS),
                            StreamFinish("stop")])
        frames = _frames(u, body)
        for reads in ([body], [b"".join(frames[i:i + 5]) for i in range(0, len(frames), 5)]):
            asm = stream_assembler(u)
            for r in reads:
                asm.feed(r)
            resp = asm.finish()
            assert asm.error is None, name
            assert [m.content for m in resp.messages] == ["".join(TEXTS)], name
            if isinstance(asm, FastStreamAssembler) and asm.frames_in_runs:
                ran.add(name)
                assert asm.frames_in_runs < len(TEXTS), name
    assert ran


def test_a_translated_stream_takes_the_run_after_a_message_s_first_text() -> None:
    """(What the tests above compare is not two ways that never differ.) A stream of texts read
    at once gives the same bytes and counts with the accelerators on and off, and, on every
    route whose upstream's text frames come in a run, every frame but two is taken in runs: the
    first, learned, and at most one read to confirm it is text alone (an upstream whose first
    text names its message, as some do, confirms nothing by it). A run refused once is not read
    frame by frame to its end."""
    named: set[str] = set()
    """Upstreams whose first text is given with its message's id."""
    ran: set[str] = set()
    """Upstreams whose text frames came in a run."""
    for up, cl in PAIRS:
        u, c = DIALECTS[up], DIALECTS[cl]
        body = _encoded(u, [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS),
                            StreamFinish("stop")])
        decoding = StreamDecoding(u)
        payloads = decoding.payloads(body)
        assert isinstance(payloads, list)
        texts = [e for p in payloads for e in decoding.decode(p) if isinstance(e, TextDelta)]
        if texts[0].message_id is not None:
            named.add(up)
        req, _ = client_request(c, stream=True)
        tr = stream_translator(u, c, req)
        assert isinstance(tr, FastStreamTranslator)
        read = tr._in.payloads(body)
        assert isinstance(read, list)
        tr = stream_translator(u, c, req)
        assert isinstance(tr, FastStreamTranslator)
        tr.feed(body)
        fast = translated(u, c, req, [body], False, True, "reject")
        assert fast == translated(u, c, req, [body], False, False, "reject"), (up, cl)
        if tr._runs is not None and any(type(p) is TextRun for p in read):
            # all but the first text frame, and the one that confirms a message's first text
            assert tr.frames_in_runs == len(TEXTS) - 1 - (up in named), (up, cl)
            ran.add(up)
        else:
            assert not tr.frames_in_runs, (up, cl)
    assert named & ran


def test_a_translated_stream_writes_the_texts_of_parsed_frames_at_once() -> None:
    """(What the tests above compare is not two ways that never differ.) On a translating route
    from an upstream whose frames are all parsed (no template) to a client whose encoder takes
    plain texts, the texts of a read's text frames are written at once, all but the first
    (which opens the message) where the encoder would not take it; a text that is no plain
    string body (a quote, a line end) is written as the plain path writes it, and those on
    either side of it still at once. The same bytes and counts as with the accelerators off."""
    quoted = [*TEXTS[:9], ' "quoted"', " two\nlines", *TEXTS[9:]]
    batched: set[str] = set()
    for up, cl in PAIRS:
        u, c = DIALECTS[up], DIALECTS[cl]
        req, _ = client_request(c, stream=True)
        if u is c or optional(u, "text_path") is not None \
                or optional(c.encoder(req), "plain_texts") is None:
            continue
        for texts in (TEXTS, quoted):
            body = _encoded(u, [StreamStart(model="m"), *(TextDelta(t) for t in texts),
                                StreamFinish("stop")])
            fast = translated(u, c, req, [body], False, True, "reject")
            assert fast == translated(u, c, req, [body], False, False, "reject"), (up, cl)
            tr = stream_translator(u, c, req)
            assert isinstance(tr, FastStreamTranslator)
            tr.feed(body)
            plain = len(texts) - (texts is quoted) * 2
            # (at most the first text of the message, and of each side of the quoted pair)
            assert plain - 1 - (texts is quoted) * 2 <= tr.batched <= plain, (up, cl)
            off = stream_translator(u, c, req, accelerate={"templates"})
            assert isinstance(off, FastStreamTranslator)
            off.feed(body)
            assert off.batched == 0, (up, cl)  # (an accelerator of "runs")
        batched.add(up)
    assert len(batched) >= 2


# --- the accelerators are used, and switched ---------------------------------------------------


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_an_identity_route_forwards_a_read_of_whole_frames_as_it_came(d: Dialect) -> None:
    """(What the test above compares is not two ways that never differ.)"""
    body = _encoded(d, [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS)])
    req = ChatRequest(messages=[Message("user", "hi")], stream=True)
    assert stream_translator(d, d, req).feed(body) is body
    assert stream_translator(d, d, req, accelerate=False).feed(body) == body


def test_every_accelerator_is_used_by_some_pair() -> None:
    used: set[str] = set()
    req = ChatRequest(messages=[Message("user", "hi")], stream=True)
    for up, cl in PAIRS:
        u, c = DIALECTS[up], DIALECTS[cl]
        body = _encoded(u, [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS)])
        tr = stream_translator(u, c, req)
        assert isinstance(tr, FastStreamTranslator)
        payloads = tr._in.payloads(body)
        assert isinstance(payloads, list)
        kinds = {type(p).__name__ for p in payloads}
        if "Slot" in kinds:
            used.add("templates")
        if "TextRun" in kinds:
            used.add("runs")
        if u is c:
            used.add("forward")
    assert used == ACCELERATORS


def test_unknown_accelerators_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown stream accelerators: warp"):
        accelerators({"warp", "runs"})
    assert accelerators(True) == ACCELERATORS and accelerators(False) == frozenset()


TEMPLATED = [name for name, d in DIALECTS.items() if optional(d, "text_path") is not None]


@pytest.mark.parametrize("up", TEMPLATED)
def test_a_frame_learned_as_a_new_template_is_decoded_in_full(up: str) -> None:
    """A text frame of another shape than the stream's template (a byte of it other than its
    text changed, as a damaged or unusual upstream sends) is parsed, and a template may be
    learned from it: what it means is then its decoder's to say again, not the promise of
    the text frames before it."""
    u = DIALECTS[up]
    body = _encoded(u, [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS),
                        StreamFinish("stop", None)])
    frames = _frames(u, body)
    k = next(i for i, f in enumerate(frames) if b'" and"' in f)  # (a text frame, mid-run)
    frame = frames[k]
    learned = 0
    opens = frame.index(b"{") + 1
    changed = [frame[:at] + b" " + frame[at + 1:] for at in range(len(frame))
               if frame[at:at + 1].isalpha()]
    for damaged in [*changed, frame[:opens] + b'"x":1,' + frame[opens:]]:  # (or a member more)
        reads = [b"".join(frames[:k]), damaged, b"".join(frames[k + 1:])]
        got = []
        for decoding in (StreamDecoding(u, 1 << 20), TemplateDecoding.of(u, 1 << 20, None)):
            assert decoding is not None
            events: list[StreamEvent] = []
            for r in reads:
                payloads = decoding.payloads(r)
                if isinstance(payloads, StreamError):  # (not JSON any more)
                    events.append(payloads)
                    break
                if r is damaged:
                    learned += sum(type(p) is Slot and p.value is not None for p in payloads)
                for p in payloads:
                    events.extend(decoding.decode(p))
            events.extend(decoding.finish())
            got.append(events)
        assert got[0] == got[1], (up, damaged)
    assert learned  # (the case this test is for: a Slot of a template learned from this frame)
