"""What one side carries that the other side's dialect cannot: found, then rejected or dropped.

Two kinds of field, by what a user loses:

- **Governed** (``tools``, ``hosted_tools``, ``tool_choice``, ``tool_calls``, ``tool_results``,
  ``images``, ``content_parts``, ``reasoning``, ``reasoning_effort``, ``structured_output``,
  ``options``): the route's ``on_unsupported`` policy decides, per field (:data:`Policies`).
  ``reject`` answers the client (400 for its request, 502 for an upstream answer or event)
  naming the field and the dialect that cannot carry it; ``drop`` takes the field out and
  reports it. A route that says nothing
  follows :data:`DEFAULT_POLICIES`: what the client *offers* the model (tool definitions, a
  provider's built-in tools, ``tool_choice``) and how hard it asks it to think are dropped,
  because the model answers without them and the client reads the answer as it would any other;
  what the conversation *says* (calls, results, images, reasoning, a schema the answer must
  match) and settings the upstream's dialect has no place for (``options``) are rejected,
  because without them the model answers something else than was asked.
- **Reported** (``session_state``, ``citations``, ``followups``, ``thoughts``, ``usage``): RAG
  context and accounting that dialects have always translated as far as the other side can hold
  them; what it cannot hold is reported, whatever the policy.

- **Documented fields** of each dialect's request (:mod:`gateway.dialects.fields`): a field
  the upstream's dialect has no place for (``logit_bias``, ``top_k``, a block's
  ``cache_control``...) is lost under its path, reported, or under ``lost: policy`` in its
  dialect's table governed like the fields above.

Reported means: the field's name is in the exchange's outcome, counted once per request in
``gateway_dropped_fields_total{route,field}`` and listed in the access log. Nothing is lost
without that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Literal

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    ImagePart,
    Message,
    OtherPart,
    Part,
    Reasoning,
    ReasoningDelta,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDef,
    citations_of,
    followups_of,
)
from gateway.dialects import Dialect, fields
from gateway.dialects.base import Capabilities, SessionKind

__all__ = ["DEFAULT_POLICIES", "GOVERNED", "REPORTED", "EventGate", "Policies", "Policy",
           "Unsupported", "carries_state", "context_losses", "dropped_label", "governed_losses",
           "policy_for", "policy_of", "request_losses", "response_losses", "strip_request",
           "strip_response", "takes_back"]

Policy = Literal["reject", "drop"]
GOVERNED = ("tools", "hosted_tools", "tool_choice", "tool_calls", "tool_results", "images",
            "content_parts", "reasoning", "reasoning_effort", "structured_output", "options",
            "request_fields")
"""``hosted_tools``: a provider's built-in tools (Responses ``web_search``, ``tool_search``,
Anthropic's server tools…) sent to an upstream of another dialect, which cannot run them.
``reasoning_effort``: how hard the client asked the model to think (an effort, a budget), to an
upstream whose dialect has no reasoning; ``reasoning`` is reasoning in the conversation.
``options``: a dialect's request settings that have no canonical place (Ollama's ``options``
such as ``num_ctx``), to an upstream of another dialect. ``request_fields``: the policy of the
documented request fields a dialect's field table leaves to it (``lost: policy``: ``n``,
``logprobs``, ``mcp_servers``…, :mod:`gateway.dialects.fields`), each lost under its own
path."""
REPORTED = ("session_state", "citations", "followups", "thoughts", "usage")

Policies = Policy | Mapping[str, Policy]
"""One policy for every governed field, or one per field (a field not named: ``reject``)."""
DEFAULT_POLICIES: Mapping[str, Policy] = MappingProxyType({
    **dict.fromkeys(GOVERNED, "reject"), "tools": "drop", "hosted_tools": "drop",
    "tool_choice": "drop", "reasoning_effort": "drop"})
"""A route's policies when its config says none (see the module's docstring)."""


def policy_for(policies: Policies, field: str) -> Policy:
    if isinstance(policies, str):
        return policies
    return policies.get(field, "reject")


def policy_of(policies: Policies, lost: str) -> Policy:
    """The policy of a governed loss: a governed field's own, or for a documented request field
    (named by its path) that of ``request_fields``."""
    return policy_for(policies, lost if lost in GOVERNED else "request_fields")


_NAMES = frozenset(GOVERNED + REPORTED)


def dropped_label(name: str) -> str:
    """A lost field's ``field`` label in ``gateway_dropped_fields_total``: its name, or
    ``undocumented`` for a key no dialect's table documents (the label's values stay a known,
    bounded set; the access log names the key)."""
    return fields.metric_label(name, _NAMES)


class Unsupported(Exception):
    """Something a dialect cannot carry, under the ``reject`` policy."""

    def __init__(self, fields: list[str], dialect: str, *, answer: bool) -> None:
        what = ", ".join(fields)
        side = "the upstream's answer carries" if answer else "the request carries"
        super().__init__(f"{side} {what}, which the {dialect} dialect cannot carry "
                         "(route option on_unsupported: reject)")
        self.fields = fields
        self.dialect = dialect


def carries_state(kind: SessionKind, state: JSON) -> bool:
    return kind == "json" or (kind == "string" and isinstance(state, str))


# --- requests ------------------------------------------------------------------------------------


def request_losses(req: ChatRequest, target: Dialect) -> list[str]:
    """The fields of ``req`` that ``target`` cannot carry (governed first, then reported)."""
    caps = target.capabilities
    lost: list[str] = []
    # what the messages hold, in one pass over them (every request of every route comes here)
    calls = results = False
    parts: list[Part] = []
    replayed: list[Reasoning] = []
    for m in req.messages:
        if m.tool_calls:
            calls = True
        if m.tool_call_id is not None:
            results = True
        if not isinstance(m.content, str):
            parts.extend(m.content)
        if m.reasoning:
            replayed.extend(r for r in m.reasoning if r.text or r.redacted)
    if not caps.tools:
        if req.tools:
            lost.append("tools")
        if req.tool_choice is not None:
            lost.append("tool_choice")
        if calls:
            lost.append("tool_calls")
        if results:
            lost.append("tool_results")
    else:
        if req.tools and any(_hosted(t, target) for t in req.tools):
            lost.append("hosted_tools")
        if not _choice_carried(req.tool_choice, caps):
            lost.append("tool_choice")
    if parts:
        if any(isinstance(p, ImagePart) and not _image_carried(p, target) for p in parts):
            lost.append("images")
        if any(isinstance(p, OtherPart) and p.dialect != target.name for p in parts):
            lost.append("content_parts")
    if not caps.reasoning:
        if replayed:
            lost.append("reasoning")
        elif req.reasoning is not None:
            lost.append("reasoning_effort")
    elif replayed and not all(takes_back(r, target) for r in replayed):
        lost.append("reasoning")
    if req.output is not None and req.output.kind not in caps.structured_output:
        lost.append("structured_output")
    if req.unmapped and req.extras_dialect != target.name:
        lost.append("options")
    if req.session_state is not None and not req.session_minted \
            and not carries_state(caps.session_state, req.session_state):
        lost.append("session_state")
    own = fields.losses(req, target)
    if own:
        lost.extend(u.path for u in own if u.path not in lost)
    return lost


def _choice_carried(choice: ToolChoice | None, caps: Capabilities) -> bool:
    if choice is None:
        return True
    if choice.parallel is False and "parallel" not in caps.tool_choices:
        return False
    return choice.mode in caps.tool_choices


def _hosted(t: ToolDef, target: Dialect) -> bool:
    """A provider's built-in tool that ``target`` cannot be sent (another provider's)."""
    return t.kind not in ("function", "custom") and t.dialect != target.name


def governed_losses(req: ChatRequest, target: Dialect, lost: list[str]) -> list[str]:
    """The fields among ``lost`` (:func:`request_losses`) whose fate the route's policy
    decides: the governed capabilities, and the documented fields whose table says
    ``lost: policy``."""
    if not lost:
        return []
    own = set(fields.governed(fields.losses(req, target)))
    return [f for f in lost if f in GOVERNED or f in own]


def takes_back(r: Reasoning, target: Dialect) -> bool:
    """Whether ``target`` (which carries reasoning) can be sent ``r`` in a replayed assistant
    turn: its own, or another dialect's text when it takes any (:attr:`Capabilities.
    reasoning_replay`)."""
    if r.dialect == target.name:
        return True
    return target.capabilities.reasoning_replay == "any" and bool(r.text)


def strip_request(req: ChatRequest, fields: list[str], target: Dialect) -> ChatRequest:
    """A copy of ``req`` without ``fields`` (the ``drop`` policy), for ``target``. Messages left
    with nothing to say (a tool result, an assistant turn that only called tools) are left
    out."""
    drop = set(fields)
    messages: list[Message] = []
    for m in req.messages:
        if "tool_results" in drop and m.tool_call_id is not None:
            continue
        content = m.content
        if not isinstance(content, str):
            content = [p for p in content
                       if not ("images" in drop and isinstance(p, ImagePart)
                               and not _image_carried(p, target))
                       and not ("content_parts" in drop and isinstance(p, OtherPart))]
        calls = [] if "tool_calls" in drop else m.tool_calls
        reasoning = m.reasoning
        if "reasoning" in drop:  # all of it, or what the target cannot be sent back
            reasoning = [r for r in reasoning if takes_back(r, target)] \
                if target.capabilities.reasoning else []
        if m.tool_calls and not calls and not (content if isinstance(content, list)
                                               else content.strip()):
            continue
        messages.append(replace(m, content=content, tool_calls=calls, reasoning=reasoning))
    tools = req.tools
    if "tools" in drop:
        tools = []
    elif "hosted_tools" in drop:
        tools = [t for t in tools if not _hosted(t, target)]
    return replace(
        req, messages=messages, tools=tools,
        tool_choice=None if "tool_choice" in drop else req.tool_choice,
        output=None if "structured_output" in drop else req.output,
        unmapped=[] if "options" in drop else req.unmapped,
        reasoning=None if ("reasoning" in drop or "reasoning_effort" in drop)
        and not target.capabilities.reasoning else req.reasoning)


def _image_carried(p: ImagePart, target: Dialect) -> bool:
    """Whether ``target`` carries the image ``p`` (the ``drop`` policy keeps those it does)."""
    caps = target.capabilities
    return caps.images and (not caps.inline_images_only or p.inline() is not None)


# --- whole answers -------------------------------------------------------------------------------


def context_losses(context: JSON, caps: Capabilities) -> list[str]:
    """The RAG context fields of a response context that ``caps`` cannot carry."""
    if context is None:
        return []
    lost: list[str] = []
    if not caps.citations and citations_of(context):
        lost.append("citations")
    if not caps.followups and followups_of(context):
        lost.append("followups")
    if not caps.thoughts and isinstance(context, dict) and context.get("thoughts"):
        lost.append("thoughts")
    return lost


def response_losses(resp: ChatResponse, client: Dialect) -> list[str]:
    caps = client.capabilities
    lost: list[str] = []
    if not caps.tools and resp.tool_calls:
        lost.append("tool_calls")
    if not caps.reasoning and any(r.text or r.redacted for r in resp.reasoning):
        lost.append("reasoning")
    lost.extend(context_losses(resp.context, caps))
    if resp.session_state is not None and not carries_state(caps.session_state,
                                                            resp.session_state):
        lost.append("session_state")
    if resp.usage is not None and not caps.usage_whole:
        lost.append("usage")
    return lost


def strip_response(resp: ChatResponse, fields: list[str]) -> ChatResponse:
    if "tool_calls" not in fields and "reasoning" not in fields:
        return resp
    messages = [AssistantMessage(
        m.content, m.role, m.agent, m.content_type, m.id,
        tool_calls=[] if "tool_calls" in fields else m.tool_calls,
        reasoning=[] if "reasoning" in fields else m.reasoning, extras=m.extras)
        for m in resp.messages]
    return replace(resp, messages=messages)


# --- streams -------------------------------------------------------------------------------------


_GATES: dict[tuple[int, int], tuple[Capabilities, Capabilities, bool]] = {}
""":func:`_gate_needed` by the ids of the two capabilities, which the entry keeps alive (so
that an id is not reused while it is a key). Not ``functools.cache``: it would hash the frozen
dataclasses, field by field, with the __hash__ @dataclass writes, at the start of every
stream."""


def _gate_needed(up: Capabilities, cl: Capabilities) -> bool:
    known = _GATES.get((id(up), id(cl)))
    if known is not None and known[0] is up and known[1] is cl:
        return known[2]
    needed = any(getattr(up, f) and not getattr(cl, f) for f in (
        "tools", "reasoning", "citations", "followups", "thoughts", "usage_stream")) or \
        up.session_state != cl.session_state
    if len(_GATES) >= 256:  # a few dialects in a gateway; built ones (tests) come and go
        _GATES.clear()
    _GATES[(id(up), id(cl))] = (up, cl, needed)
    return needed


class EventGate:
    """Stream events an upstream sends that the client's dialect cannot carry: dropped and
    reported, or (``reject``, for governed fields) turned into the stream's error.

    :meth:`needed` says whether a pair needs a gate at all, so that a client that carries all its
    upstream does pays nothing per chunk.
    """

    __slots__ = ("_caps", "_dialect", "_policy", "dropped")

    def __init__(self, client: Dialect, policy: Policies) -> None:
        self._caps = client.capabilities
        self._dialect = client.name
        self._policy = policy
        self.dropped: list[str] = []

    @staticmethod
    def needed(upstream: Dialect, client: Dialect) -> bool:
        return _gate_needed(upstream.capabilities, client.capabilities)

    def filter(self, events: list[StreamEvent]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for e in events:
            if type(e) is TextDelta:  # nearly every event, and every client carries text
                out.append(e)
                continue
            match e:
                case ToolCallStart() | ToolCallDelta() | ToolCallEnd() if not self._caps.tools:
                    if not self._lose("tool_calls", out):
                        return out
                case ReasoningDelta() if not self._caps.reasoning:
                    if (e.text or e.redacted) and not self._lose("reasoning", out):
                        return out
                case StreamStart() | ContextUpdate():
                    for f in context_losses(e.context, self._caps):
                        self._report(f)
                    if e.session_state is not None and not carries_state(
                            self._caps.session_state, e.session_state):
                        self._report("session_state")
                    out.append(e)
                case StreamFinish() if e.usage is not None and not self._caps.usage_stream:
                    self._report("usage")
                    out.append(e)
                case _:
                    out.append(e)
        return out

    def _lose(self, field: str, out: list[StreamEvent]) -> bool:
        """Drop (and report) a governed event; ``False`` when the policy rejects it, after
        putting the stream's error in ``out``."""
        if policy_for(self._policy, field) == "reject":
            out.append(StreamError(str(Unsupported([field], self._dialect, answer=True)),
                                   code="UNSUPPORTED", status=502))
            return False
        self._report(field)
        return True

    def _report(self, field: str) -> None:
        if field not in self.dropped:
            self.dropped.append(field)
