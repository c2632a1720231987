"""Both ends of a translation, read with the strict readers (tests/strict), and what must have
arrived, decided from the two dialects' declared capabilities only.

The upstream's bodies are its dialect's shipped samples (``dialect.samples``), and richer cases
(:data:`RICH`) written by the strict module's own writer where it has one; what the upstream said
is what its strict reader observes in that body, never what the gateway parsed. The rules, for
every field a dialect may declare (:data:`gateway.dialects.base.FIELDS`):

- it arrives unchanged when both sides declare it;
- otherwise it is reported (``lost`` of ``translate_request``/``translate_response``,
  ``StreamTranslator.dropped``), and for a governed field (tools, images, reasoning…) rejected
  under ``policy="reject"`` (:class:`gateway.carry.Unsupported`, or the stream's error);
- nothing is reported that arrived.

No dialect is named here: a dialect registered later (a plugin, the fixture dialect) is covered
by bringing its samples and its strict reader.
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from types import ModuleType
from typing import Any

from strict import reader_for
from strict._wire import tolerant
from strict.observed import Observed, ObservedCall, ObservedMessage, agents_text

from gateway.carry import GOVERNED, Policy, Unsupported
from gateway.dialects import DIALECTS, Dialect
from gateway.dialects.base import SessionKind
from gateway.dialects.fields import table_of
from gateway.pipeline import StreamTranslator, translate_request, translate_response
from gateway.tool_shapes import flat_name

__all__ = [
    "AGENTS", "CITATIONS", "DEFAULT_MODEL", "ERROR", "RICH", "SNIPPETS", "Case", "answer_checks",
    "carries", "chunks", "client_request", "governed_losses", "pairs", "read_client_stream",
    "read_upstream_stream", "request_cases", "request_checks", "run_stream", "stream_cases",
    "strict", "translate_client_request", "translate_whole", "whole_cases",
]

DEFAULT_MODEL = "route-default-model"
"""The model a route names for its upstream (``translate_request(model=…)``)."""


def pairs() -> list[tuple[str, str]]:
    """Every ordered (upstream, client) pair of registered dialects."""
    return [(u, c) for u in DIALECTS for c in DIALECTS]


@cache
def strict(d: Dialect) -> ModuleType:
    """The strict reader module of ``d`` (tests/strict)."""
    return reader_for(d)


@cache
def _takes_lenient(module: ModuleType) -> bool:
    return "lenient" in inspect.signature(module.read_stream).parameters


def read_upstream_stream(d: Dialect, data: bytes) -> Observed:
    """What a tolerant client of ``d`` reads in a real server's body (quirks undone first)."""
    module = strict(d)
    body = tolerant(data, d.framing)
    return module.read_stream(body, lenient=True) if _takes_lenient(module) else \
        module.read_stream(body)


def read_client_stream(d: Dialect, data: bytes, *, same: bool) -> Observed:
    """What a client of ``d`` reads in the gateway's output. A same-dialect route passes the
    upstream's own payloads on, so it is read as the upstream's body was (leniently)."""
    module = strict(d)
    if same and _takes_lenient(module):
        return module.read_stream(data, lenient=True)
    return module.read_stream(data)


def carries(kind: SessionKind, state: Any) -> bool:
    """Whether a dialect whose session state is ``kind`` can hold ``state``."""
    return state is not None and (kind == "json" or (kind == "string" and isinstance(state, str)))


# --- the cases -----------------------------------------------------------------------------------

TEXT = ("Héllo wörld 👋🏽 — «quotes» \"double\" \\ back\\slash\n"
        "line two\r\nline three\n\n日本語のテキスト 🇫🇷👨‍👩‍👧 end \u2028 [DONE] }{")
CITATIONS = ["Benefit_Options.pdf#page=3", "https://example.com/a?b=1", "notes ü.txt"]
SNIPPETS = {"Benefit_Options.pdf#page=3": "Both plans: cover 🏥 care\nand more",
            "https://example.com/a?b=1": "web snippet ü", "notes ü.txt": None}
FOLLOWUPS = ["What about dental? 🦷", "And vision?"]
AGENTS = [("Research", "Found 3 papers 📚."), ("Code", "Here is the code:\n```py\nx = 1\n```")]
CALLS = [ObservedCall("call_1", "get_weather", {"city": "Paris ü", "unit": "°C", "days": [1, 2]}),
         ObservedCall("call_2", "get_time", {})]
ERROR = "upstream exploded: ü 💥\nsecond line"


def _rag(state: Any) -> Observed:
    return Observed(text=TEXT, citations=list(CITATIONS), followups=list(FOLLOWUPS), thoughts=True,
                    session_state=state, usage=(9, 12), finish="stop", model="up-model",
                    extra={"snippets": SNIPPETS})


RICH: dict[str, Observed] = {
    "rag-string-state": _rag("sess-up-ü-🙂"),
    "rag-object-state": _rag({"conversation_id": 1234, "ü": ["x", None, True, 1.5]}),
    "rag-no-state": _rag(None),
    "agents": Observed(text=agents_text(AGENTS), agents=list(AGENTS), finish="stop"),
    "agents-first-unnamed": Observed(text=agents_text([(None, "Plain first."), AGENTS[1]]),
                                     agents=[(None, "Plain first."), AGENTS[1]], finish="stop"),
    "tools": Observed(text="Let me check 🔧.", tool_calls=list(CALLS), finish="tool_calls",
                      usage=(20, 7)),
    "reasoning": Observed(text="9.9 is larger.", reasoning="Compare 9.11 and 9.9: tenths ✓",
                          usage=(5, 30), finish="stop"),
    "length": Observed(text="cut sh", finish="length"),
    "empty": Observed(text="", finish="stop"),
}
"""Neutral answers for the writers: what the samples lack (every session-state kind, unicode-heavy
text, agents, tool calls, reasoning, every finish)."""

SENT: dict[str, list[Any]] = {
    "rag-string-state": [{"conversation_id": 1}],
    "rag-object-state": ["sess-req-1", {"conversation_id": 1}],
    "rag-no-state": [{"conversation_id": 1}, "sess-req-1"],
}
"""The session states a client sends with a case (once with none, when not listed): both kinds
where the kind decides what a client gets back."""

BROKEN = ("rag-string-state", "agents", "tools", "empty")
"""The cases also streamed with an error after their text."""


@dataclass
class Case:
    """One upstream answer: its body (JSON, or stream bytes), what its strict reader saw, and
    the session state the client sent."""

    id: str
    body: Any
    want: Observed
    sent: Any = None


def _rich(d: Dialect, *, stream: bool) -> Iterator[tuple[str, Observed, list[Any]]]:
    if not hasattr(strict(d), "write_stream" if stream else "write_whole"):
        return
    for name, obs in RICH.items():
        yield name, obs, SENT.get(name, [None])
        if stream and name in BROKEN:
            yield f"{name}-error", replace(obs, error=ERROR, finish=None), SENT.get(name, [None])


@cache
def whole_cases(d: Dialect) -> list[Case]:
    """The whole answers of ``d``: its samples, then the rich cases its writer writes."""
    module = strict(d)
    out = [Case(f"sample:{n}", body, module.read_whole(body))
           for n, body in d.samples.responses.items()]
    for name, obs, sents in _rich(d, stream=False):
        body = module.write_whole(obs)
        out += [Case(f"{name}#{n}", body, module.read_whole(body), s) for n, s in enumerate(sents)]
    return out


@cache
def stream_cases(d: Dialect) -> list[Case]:
    """The streams of ``d``: its samples, then the rich cases its writer writes (with a
    mid-stream error too)."""
    out = [Case(f"sample:{n}", data, read_upstream_stream(d, data))
           for n, data in d.samples.streams.items()]
    for name, obs, sents in _rich(d, stream=True):
        data = strict(d).write_stream(obs, random.Random(f"{d.name}/{name}"))
        want = read_upstream_stream(d, data)
        out += [Case(f"{name}#{n}", data, want, s) for n, s in enumerate(sents)]
    return out


RICH_REQUEST = Observed(
    messages=[
        ObservedMessage("system", "Be brief, ü."),
        ObservedMessage("user", "What is on this postcard? 🤔",
                        images=["https://example.com/postcard.png",
                                "data:image/png;base64,iVBORw0KGgo="]),
        ObservedMessage("assistant", "", tool_calls=[CALLS[0]]),
        ObservedMessage("tool", '{"temp": 22}', tool_result_for="call_1"),
        ObservedMessage("assistant", "It is 22 °C.", reasoning="The tool said 22."),
        ObservedMessage("user", "And tomorrow?"),
    ],
    tools=["get_weather", "get_time"], tool_choice="auto", model="client-model",
    extra={"temperature": 0.3, "max_tokens": 300, "reasoning": "low"})
"""The fullest request a client may send; each writer keeps what its dialect carries."""

TEXT_REQUEST = Observed(messages=[ObservedMessage("system", "Be brief."),
                                  ObservedMessage("user", "Hi ü"),
                                  ObservedMessage("assistant", "Hello!"),
                                  ObservedMessage("user", "What is covered? 🤔")],
                        extra={"temperature": 0.3})


def request_cases(d: Dialect) -> list[tuple[str, Any]]:
    """Request bodies a client of ``d`` sends: its samples, and written ones."""
    out = list(d.samples.requests.items())
    module = strict(d)
    if hasattr(module, "write_request"):
        for state in (None, "conv-ü-1", {"user": "ü", "turn": 2}):
            out.append((f"text/{type(state).__name__}",
                        module.write_request(replace(TEXT_REQUEST, session_state=state))))
        out.append(("rich", module.write_request(RICH_REQUEST)))
    return out


def client_request(d: Dialect, *, stream: bool, sent: Any = None) -> tuple[Any, Observed]:
    """A client of ``d``'s request for an answer (the parsed request, and what it said)."""
    module = strict(d)
    if hasattr(module, "write_request"):
        body = module.write_request(replace(TEXT_REQUEST, session_state=sent, stream=stream))
    else:
        body = d.samples.requests["text"]
    req = d.parse_request(body)
    req.stream = stream  # the path or the Accept header says so too
    return req, module.read_request(body)


# --- running -------------------------------------------------------------------------------------


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` in reads of awkward sizes (single bytes, splits inside UTF-8, whole events)."""
    out, i = [], 0
    while i < len(data):
        n = rng.choice((1, 2, 3, 5, 8, 13, 64, 512))
        out.append(data[i:i + n])
        i += n
    return out


def run_stream(up: Dialect, cl: Dialect, req: Any, pieces: list[bytes], *,
               policy: Policy = "reject") -> tuple[StreamTranslator, bytes]:
    t = StreamTranslator(up, cl, req, policy=policy)
    out = []
    for piece in pieces:
        done = t.done
        out.append(t.feed(piece))
        assert not done or out[-1] == b"", "output after the stream ended"
    done = t.done
    out.append(t.finish())
    assert not done or out[-1] == b"", "output after the stream ended"
    return t, b"".join(out)


def translate_whole(body: Any, up: Dialect, cl: Dialect, req: Any, *, policy: Policy,
                    ) -> tuple[Any, list[str], Unsupported | None]:
    try:
        out, lost = translate_response(body, up, cl, req, policy=policy)
    except Unsupported as e:
        return None, [], e
    return out, lost, None


def translate_client_request(body: Any, cl: Dialect, up: Dialect, *, stream: bool,
                             policy: Policy) -> tuple[Any, list[str], Unsupported | None]:
    try:
        _, out, lost = translate_request(body, cl, up, stream=stream, model=DEFAULT_MODEL,
                                         policy=policy)
    except Unsupported as e:
        return None, [], e
    return out, lost, None


# --- what must have arrived ---------------------------------------------------------------------


def _contained(small: list[str], big: list[str]) -> bool:
    """Every source of ``small`` is named in ``big`` (as often). The recommended context lists
    the sources with a snippet first (``data_points.text``), then the others, and names a
    source's url apart from its title: order and extra names are what the mapping gives."""
    return not Counter(small) - Counter(big)


def _agents(obs: Observed) -> list[tuple[str | None, str]]:
    return [a for a in obs.agents if a != (None, "")]


def _neutral(module: ModuleType, reason: str | None) -> str | None:
    table = getattr(module, "FINISH", None)
    return None if table is None or reason is None else table.get(reason, reason)


def governed_losses(want: Observed, cl: Dialect) -> set[str]:
    caps = cl.capabilities
    lost = set()
    if want.tool_calls and not caps.tools:
        lost.add("tool_calls")
    if want.reasoning and not caps.reasoning:
        lost.add("reasoning")
    return lost


def answer_checks(up: Dialect, cl: Dialect, want: Observed, got: Observed | None, *,
                  stream: bool, sent: Any, reported: list[str], policy: Policy,
                  rejected: Unsupported | None = None, asked: Observed | None = None,
                  late_model: bool = False) -> None:
    """``got`` (the client's strict reading, ``None`` when the translation was refused) against
    ``want`` (the upstream's); ``asked``: the client's request as its strict reader saw it;
    ``late_model``: the answer was streamed, so a model named after the start may be missed."""
    uc, cc = up.capabilities, cl.capabilities
    governed = governed_losses(want, cl)
    if governed and policy == "reject":
        if stream:
            assert got is not None and got.error is not None, "a governed field was not refused"
            assert want.text.startswith(got.text), (got.text, want.text)
            assert not got.tool_calls or cc.tools
        else:
            assert rejected is not None, f"{governed} not refused"
            assert governed <= set(rejected.fields) <= set(GOVERNED), rejected.fields
            assert cl.name in str(rejected)
        return
    assert rejected is None, f"refused though nothing governed is lost: {rejected}"
    assert got is not None
    expect = set(governed)

    assert got.text == want.text, f"text {got.text!r} != {want.text!r}"
    assert got.error == want.error, f"error {got.error!r} != {want.error!r}"
    if uc.multi_agent and cc.multi_agent:
        assert _agents(got) == _agents(want), (got.agents, want.agents)

    if uc.citations and cc.citations:
        assert _contained(want.citations, got.citations), (want.citations, got.citations)
        assert bool(got.citations) == bool(want.citations), (want.citations, got.citations)
    elif want.citations:
        expect.add("citations")
    for name, value in (("followups", "followups"), ("thoughts", "thoughts")):
        mine, theirs = getattr(got, value), getattr(want, value)
        if getattr(uc, name) and getattr(cc, name):
            assert mine == theirs, f"{name}: {mine!r} != {theirs!r}"
        elif theirs:
            expect.add(name)

    if want.session_state is not None and carries(cc.session_state, want.session_state):
        state = want.session_state
    else:
        state = sent if carries(cc.session_state, sent) else None
        if want.session_state is not None:
            expect.add("session_state")
    if not got.extra.get("no_session_state"):
        assert got.session_state == state, f"session state {got.session_state!r} != {state!r}"

    if want.usage is not None:
        if getattr(cc, "usage_stream" if stream else "usage_whole"):
            assert got.usage == want.usage, f"usage {got.usage} != {want.usage}"
        else:
            expect.add("usage")

    if uc.tools and cc.tools:
        assert got.tool_calls == want.tool_calls, (got.tool_calls, want.tool_calls)
    if uc.reasoning and cc.reasoning:
        assert got.reasoning == want.reasoning, (got.reasoning, want.reasoning)
    if got.model is not None:
        # the model that answered; a stream whose start does not name one names the one asked
        named = {want.model} if want.model is not None and not (stream or late_model) else \
            {want.model, asked.model if asked is not None else None} - {None}
        assert not named or got.model in named, f"model {got.model!r}, expected {named}"
    if want.error is None and not governed:
        theirs = _neutral(strict(up), want.finish) or ("tool_calls" if want.tool_calls
                                                        else "stop")
        mine = _neutral(strict(cl), got.finish)
        if mine is not None:
            # a dialect with fewer reasons says one for several (``COVERS``)
            covers = getattr(strict(cl), "COVERS", {}).get(mine, {mine})
            assert theirs in covers, f"finish {got.finish!r} for {want.finish!r}"
    assert set(reported) == expect, f"reported {sorted(reported)}, expected {sorted(expect)}"


def _role(m: ObservedMessage) -> str | None:
    if m.tool_result_for is not None:
        return None
    return "system" if m.role == "developer" else m.role


def _merged(messages: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Messages as a dialect that alternates roles holds them (Anthropic's): a message with
    nothing in it left out, consecutive messages of one role (tool results apart) as one."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        role, text, images, calls, result_for, reasoning = m
        if result_for is None and not (text or images or calls or reasoning):
            continue
        if out and result_for is None and out[-1][4] is None and out[-1][0] == role:
            last = out[-1]
            out[-1] = (role, last[1] + text, last[2] + images, last[3] + calls, None,
                       last[5] + reasoning)
        else:
            out.append((role, text, list(images), list(calls), result_for, reasoning))
    return out


def _choice_mode(choice: str) -> str:
    """An observed ``tool_choice`` (``auto``, ``tool:<name>``…) as a canonical mode."""
    return "tool" if choice.startswith("tool:") else choice


class _ToolShapes:
    """The client's tools and calls as an upstream with capabilities ``uc`` is sent them: a
    freeform tool it has no shape for is a function of one string argument ``input``, a
    namespace it has none for is flattened (docs/translation.md#tools-of-other-shapes)."""

    def __init__(self, sent: Observed, uc: Any) -> None:
        self._freeform = getattr(uc, "custom_tools", False)
        self._grouped = getattr(uc, "tool_namespaces", False)
        self._taken = frozenset(n for n in sent.tools if "/" not in n)
        self.tools = [self._name(n) for n in sent.tools]
        self.freeform = [self._name(n) for n in sent.freeform_tools] if self._freeform else []

    def _name(self, name: str) -> str:
        namespace, slash, member = name.partition("/")
        return flat_name(namespace, member, self._taken) if slash and not self._grouped \
            else name

    def call(self, c: ObservedCall) -> ObservedCall:
        name, namespace = c.name, c.namespace
        if namespace is not None and not self._grouped:
            name, namespace = flat_name(namespace, name, self._taken), None
        if c.freeform and not self._freeform:
            return ObservedCall(c.id, name, {"input": c.arguments}, False, namespace)
        return replace(c, name=name, namespace=namespace)


def _documented(d: Dialect) -> set[str]:
    """The paths of ``d``'s field table."""
    table = table_of(d)
    return set(table.fields) if table is not None else set()


def _reads_as_absent(up: Dialect, state: Any) -> bool:
    """Whether a request carrying ``state`` reads, to the upstream's strict reader, as one with
    no state (AG-UI's clients always send ``state: {}``, so ``{}`` is no state there)."""
    from gateway.canonical import ChatRequest, Message

    body = up.render_request(ChatRequest([Message("user", "x")], session_state=state),
                             stream=False, model="m")
    return strict(up).read_request(body).session_state is None


def request_checks(cl: Dialect, up: Dialect, sent: Observed, got: Observed | None, *,
                   stream: bool, lost: list[str], policy: Policy,
                   rejected: Unsupported | None) -> None:
    """The upstream's strict reading of the request the gateway sent, against the client's."""
    uc = up.capabilities
    governed: set[str] = set()
    if not uc.tools:
        if sent.tools:
            governed.add("tools")
        if sent.tool_choice is not None:
            governed.add("tool_choice")
        if any(m.tool_calls for m in sent.messages):
            governed.add("tool_calls")
        if any(m.tool_result_for is not None for m in sent.messages):
            governed.add("tool_results")
    else:
        if sent.tool_choice is not None and _choice_mode(sent.tool_choice) not in getattr(
                uc, "tool_choices", {"auto", "none", "required", "tool"}):
            governed.add("tool_choice")
        if sent.hosted_tools and cl is not up:
            governed.add("hosted_tools")  # a provider's built-in tools run only on its own API
    inline_only = getattr(uc, "inline_images_only", False)
    kept_images = [u for m in sent.messages for u in m.images
                   if uc.images and (u.startswith("data:") or not inline_only)]
    if len(kept_images) < sum(len(m.images) for m in sent.messages):
        governed.add("images")
    if sent.extra.get("unmapped") and cl is not up:
        governed.add("options")
    replayed = any(m.reasoning for m in sent.messages)
    # reasoning a dialect takes back only from itself (Anthropic's signatures) is lost elsewhere
    own_only = getattr(uc, "reasoning_replay", "any") == "own" and cl is not up
    if not uc.reasoning and not replayed and sent.extra.get("reasoning"):
        governed.add("reasoning_effort")  # only how hard to think: no reasoning is lost
    elif replayed if not uc.reasoning else (own_only and replayed):
        governed.add("reasoning")
    carried = getattr(uc, "structured_output", frozenset())
    if sent.output is not None and sent.output[0] not in carried:
        governed.add("structured_output")
    # Fields of the client's own table (not capabilities) are the field walk's to check
    # (tests/test_field_walk.py); here they are only told apart from the capabilities.
    # (a path of the client's table may spell a capability's name: reasoning_effort)
    own = _documented(cl)
    if governed and policy == "reject":
        assert rejected is not None, f"{governed} not refused"
        refused = set(rejected.fields)
        assert governed <= refused and refused - governed <= own, (rejected.fields, governed)
        assert up.name in str(rejected)
        return
    assert rejected is None or set(rejected.fields) <= own, rejected
    if rejected is not None:
        return
    assert got is not None
    expect = set(governed)
    if sent.session_state is not None and not carries(uc.session_state, sent.session_state):
        expect.add("session_state")
    assert expect <= set(lost) and set(lost) - expect <= own, \
        f"reported {sorted(lost)}, expected {sorted(expect)}"
    assert cl is not up or not lost, f"{lost} lost on its own dialect"

    shaped = _ToolShapes(sent, uc)
    want = []
    for m in sent.messages:
        if m.tool_result_for is not None and not uc.tools:
            continue
        calls = [shaped.call(c) for c in m.tool_calls] if uc.tools else []
        if m.tool_calls and not calls and not m.text.strip() and not m.images:
            continue
        images = [u for u in m.images if u.startswith("data:") or not inline_only] \
            if uc.images else []
        want.append((_role(m), m.text, images, calls,
                     m.tool_result_for, m.reasoning if uc.reasoning and not own_only else ""))
    have = [(_role(m), m.text, m.images, m.tool_calls, m.tool_result_for, m.reasoning)
            for m in got.messages]
    assert _merged(have) == _merged(want), f"messages:\n{have}\n!=\n{want}"
    state = sent.session_state if carries(uc.session_state, sent.session_state) else None
    if state is not None and _reads_as_absent(up, state):
        state = None  # carried, as the wire the upstream's clients send when they have none
    assert got.session_state == state, (got.session_state, state)
    if uc.tools:
        # with tools, no choice is the choice ``auto`` (every dialect's default)
        choice = None if "tool_choice" in governed else sent.tool_choice
        assert got.tools == shaped.tools and (got.tool_choice or "auto") == (choice or "auto"), \
            (got.tools, got.tool_choice)
        assert got.freeform_tools == shaped.freeform, (got.freeform_tools, shaped.freeform)
    want_output = sent.output if sent.output is not None and sent.output[0] in carried else None
    assert got.output == want_output, f"output {got.output}, expected {want_output}"
    if got.stream is not None:
        assert got.stream is stream, f"stream {got.stream} for {stream}"
    ups, cls = strict(up), strict(cl)
    up_keys, cl_keys = getattr(ups, "SAMPLING", ()), getattr(cls, "SAMPLING", ())
    if "model" in up_keys:  # the client's model, else the route's
        chosen = sent.model or DEFAULT_MODEL
        assert got.model == chosen, f"model {got.model!r}, expected {chosen!r}"
    for key in set(up_keys) & set(cl_keys) - {"model"}:
        if key in sent.extra:
            assert got.extra.get(key) == sent.extra[key], (key, got.extra, sent.extra)
