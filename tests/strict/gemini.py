"""Strict reader (and writer) of Google's Gemini API (``generateContent``,
``streamGenerateContent?alt=sse``), from the API reference (ai.google.dev/api/generate-content)
and the ``google-genai`` SDK's ``types`` (camelCase on the wire), not from the gateway's code.

Checked as the SDK needs it: every stream event is one ``data:`` line holding a whole
``GenerateContentResponse`` (one candidate, index 0, ``content.role`` ``model``, ``parts`` each
with exactly one of text / functionCall / …), all with the same ``responseId`` and
``modelVersion``; one event carries a ``finishReason`` and it is the last, or an event
``{"error": {"code", "message", "status"}}`` is last; a function call comes whole (``args`` an
object). ``candidatesTokenCount`` excludes ``thoughtsTokenCount``: the output the observation
reports is their sum, as the canonical count is.
"""

from __future__ import annotations

import random
from typing import Any

from strict._wire import frame_sse, loads, pieces, sse_events
from strict.observed import Observed, ObservedCall, ObservedMessage

_CALLED = "STOP+functionCall"
"""How a client reads ``STOP`` on a turn that called functions: Gemini has no finish reason of
its own for it (the SDK's automatic function calling looks for the calls)."""

__all__ = ["FINISH", "SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

FINISH: dict[str, str | None] = {
          # STOP alone says nothing of a turn whose calls its dialect dropped (Gemini has no
          # reason for a tool call): read as no word either way
          "STOP": None, _CALLED: "tool_calls", "MAX_TOKENS": "length", "SAFETY": "content_filter",
          "RECITATION": "content_filter", "PROHIBITED_CONTENT": "content_filter",
          "BLOCKLIST": "content_filter", "SPII": "content_filter"}
_FINISH_REASONS = {*FINISH, "LANGUAGE", "OTHER", "MALFORMED_FUNCTION_CALL", "IMAGE_SAFETY",
                   "UNEXPECTED_TOOL_CALL", "FINISH_REASON_UNSPECIFIED",
                   "IMAGE_PROHIBITED_CONTENT"}
_WRITE_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP",
                 "content_filter": "SAFETY", _CALLED: "STOP"}
SAMPLING = ("temperature", "max_tokens")
"""(The model is in the URL, not the body.)"""
_PART_KINDS = ("text", "inlineData", "fileData", "functionCall", "functionResponse",
               "executableCode", "codeExecutionResult")
_STATUSES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE", "UNAUTHENTICATED",
             "PERMISSION_DENIED", "NOT_FOUND", "ABORTED", "ALREADY_EXISTS", "RESOURCE_EXHAUSTED",
             "CANCELLED", "DATA_LOSS", "UNKNOWN", "INTERNAL", "UNIMPLEMENTED", "UNAVAILABLE",
             "DEADLINE_EXCEEDED"}


def _part_kind(p: Any, where: str) -> str:
    assert isinstance(p, dict), f"{where}: a part must be an object: {p!r}"
    kinds = [k for k in _PART_KINDS if k in p]
    assert len(kinds) == 1, f"{where}: a part holds exactly one kind of data: {p!r}"
    assert set(p) <= {*_PART_KINDS, "thought", "thoughtSignature", "videoMetadata",
                      "partMetadata"}, f"{where}: unknown keys in {p!r}"
    if "thought" in p:
        assert isinstance(p["thought"], bool), f"{where}.thought must be a boolean"
    if "thoughtSignature" in p:
        assert isinstance(p["thoughtSignature"], str) and p["thoughtSignature"], \
            f"{where}.thoughtSignature must be a non-empty (base64) string"
    return kinds[0]


def _call_of(fc: Any, where: str) -> ObservedCall:
    assert isinstance(fc, dict) and isinstance(fc.get("name"), str) and fc["name"], \
        f"{where}: a functionCall needs a name: {fc!r}"
    assert isinstance(fc.get("args", {}), dict), f"{where}.args must be an object"
    assert set(fc) <= {"id", "name", "args"}, f"{where}: unknown keys {fc!r}"
    return ObservedCall(str(fc.get("id", "")), fc["name"], fc.get("args", {}))


# --- requests ------------------------------------------------------------------------------------


def _text_response(response: dict[str, Any]) -> str:
    """The text a tool result carries, as the writer below and Google's samples put it."""
    if set(response) == {"output"} and isinstance(response["output"], str):
        return str(response["output"])
    if set(response) == {"error"} and isinstance(response["error"], str):
        return str(response["error"])
    import json

    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert "model" not in body and "stream" not in body, \
        "model and stream are in the URL, not the body"
    contents = body.get("contents")
    assert isinstance(contents, list) and contents, "contents must be a non-empty list"
    obs = Observed()
    system = body.get("systemInstruction")
    if system is not None:
        assert isinstance(system, dict) and isinstance(system.get("parts"), list), system
        obs.messages.append(ObservedMessage(
            "system", "".join(p["text"] for p in system["parts"])))
    for i, c in enumerate(contents):
        where = f"contents[{i}]"
        assert isinstance(c, dict), where
        role = c.get("role", "user")
        assert role in ("user", "model"), f"{where}.role must be user or model: {role!r}"
        parts = c.get("parts")
        assert isinstance(parts, list) and parts, f"{where}.parts must be a non-empty list"
        here = ObservedMessage("assistant" if role == "model" else "user", "")
        for j, p in enumerate(parts):
            at = f"{where}.parts[{j}]"
            kind = _part_kind(p, at)
            if kind == "functionResponse":
                assert role == "user", f"{at}: a functionResponse outside a user turn"
                fr = p["functionResponse"]
                assert isinstance(fr.get("name"), str) and isinstance(fr.get("response"), dict), \
                    f"{at}: a functionResponse needs a name and a response object: {fr!r}"
                obs.messages.append(ObservedMessage(
                    "tool", _text_response(fr["response"]), tool_result_for=fr.get("id"),
                    tool_result_error=set(fr["response"]) == {"error"}))
                continue
            if kind == "functionCall":
                assert role == "model", f"{at}: a functionCall outside a model turn"
                here.tool_calls.append(_call_of(p["functionCall"], at))
            elif kind == "text":
                assert isinstance(p["text"], str), at
                if p.get("thought"):
                    here.reasoning += p["text"]
                else:
                    here.text += p["text"]
            elif kind == "inlineData":
                data = p["inlineData"]
                assert isinstance(data.get("mimeType"), str) and isinstance(data.get("data"), str)
                here.images.append(f"data:{data['mimeType']};base64,{data['data']}")
            elif kind == "fileData":
                here.images.append(str(p["fileData"]["fileUri"]))
        if here.text or here.images or here.tool_calls or here.reasoning:
            obs.messages.append(here)
    for t in body.get("tools") or []:
        assert isinstance(t, dict), t
        for d in t.get("functionDeclarations") or []:
            assert isinstance(d.get("name"), str), d
            assert not ("parameters" in d and "parametersJsonSchema" in d), \
                f"both parameters and parametersJsonSchema: {d}"
            obs.tools.append(d["name"])
    config = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if config is not None:
        mode = config.get("mode", "AUTO")
        assert mode in ("AUTO", "ANY", "NONE", "VALIDATED"), mode
        allowed = config.get("allowedFunctionNames")
        if mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1:
            obs.tool_choice = f"tool:{allowed[0]}"
        else:
            obs.tool_choice = {"AUTO": "auto", "ANY": "required", "NONE": "none",
                               "VALIDATED": "auto"}[mode]
    gen = body.get("generationConfig") or {}
    assert isinstance(gen, dict), gen
    for key, name in (("temperature", "temperature"), ("topP", "top_p"),
                      ("maxOutputTokens", "max_tokens")):
        if gen.get(key) is not None:
            assert isinstance(gen[key], int | float) and not isinstance(gen[key], bool), key
            obs.extra[name] = gen[key]
    assert not ("responseSchema" in gen and "responseJsonSchema" in gen), gen
    schema = gen.get("responseJsonSchema", gen.get("responseSchema"))
    if gen.get("responseMimeType") == "application/json":
        obs.output = ("json_schema", schema) if schema is not None else ("json_object", None)
    else:
        assert schema is None, "a response schema without responseMimeType application/json"
    thinking = gen.get("thinkingConfig")
    if thinking is not None:
        assert isinstance(thinking, dict) and set(thinking) <= {
            "includeThoughts", "thinkingBudget", "thinkingLevel"}, thinking
        obs.extra["reasoning"] = thinking
    return obs


def write_request(obs: Observed) -> Any:
    contents: list[dict[str, Any]] = []
    system: list[str] = []
    for m in obs.messages:
        if m.role in ("system", "developer"):
            system.append(m.text)
            continue
        if m.tool_result_for is not None:
            name = next((c.name for x in obs.messages for c in x.tool_calls
                         if c.id == m.tool_result_for), "tool")
            part: dict[str, Any] = {"functionResponse": {
                "id": m.tool_result_for, "name": name,
                "response": {"error" if m.tool_result_error else "output": m.text}}}
            if contents and contents[-1]["role"] == "user":
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
            continue
        role = "model" if m.role == "assistant" else "user"
        parts: list[dict[str, Any]] = []
        if m.text:
            parts.append({"text": m.text})
        for url in m.images:
            if url.startswith("data:"):
                head, _, data = url[5:].partition(";base64,")
                parts.append({"inlineData": {"mimeType": head, "data": data}})
            else:
                parts.append({"fileData": {"mimeType": "image/jpeg", "fileUri": url}})
        parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}}
                  for c in m.tool_calls]
        if not parts:
            parts.append({"text": ""})
        contents.append({"role": role, "parts": parts})
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    if obs.tools:
        body["tools"] = [{"functionDeclarations": [
            {"name": n, "parametersJsonSchema": {"type": "object", "properties": {}}}
            for n in obs.tools]}]
    gen: dict[str, Any] = {}
    for name, key in (("temperature", "temperature"), ("max_tokens", "maxOutputTokens")):
        if name in obs.extra:
            gen[key] = obs.extra[name]
    if gen:
        body["generationConfig"] = gen
    return body


# --- answers -------------------------------------------------------------------------------------


def _usage(u: Any, where: str) -> tuple[int | None, int]:
    assert isinstance(u, dict), f"{where}: usageMetadata must be an object: {u!r}"
    for key in ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
                "totalTokenCount", "cachedContentTokenCount"):
        if key in u:
            assert isinstance(u[key], int) and u[key] >= 0, f"{where}: usageMetadata.{key}"
    return u.get("promptTokenCount"), u.get("candidatesTokenCount", 0) + u.get(
        "thoughtsTokenCount", 0)


def _read_response(body: Any, obs: Observed, calls: list[ObservedCall], where: str) -> str | None:
    """One ``GenerateContentResponse`` into ``obs``; its finish reason, if it has one."""
    assert isinstance(body, dict), f"{where}: not an object: {body!r}"
    assert set(body) <= {"candidates", "promptFeedback", "usageMetadata", "modelVersion",
                         "responseId", "createTime"}, f"{where}: unknown keys {sorted(body)}"
    if "usageMetadata" in body:
        obs.usage = _usage(body["usageMetadata"], where)
    candidates = body.get("candidates")
    if candidates is None:
        feedback = body.get("promptFeedback")
        assert isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str), \
            f"{where}: no candidate and no blocked prompt"
        return "SAFETY"
    assert isinstance(candidates, list) and len(candidates) == 1, \
        f"{where}: exactly one candidate: {candidates!r}"
    cand = candidates[0]
    assert isinstance(cand, dict) and cand.get("index", 0) == 0, cand
    content = cand.get("content")
    reason = cand.get("finishReason")
    if content is not None:
        assert isinstance(content, dict) and content.get("role") == "model", \
            f"{where}: content.role must be model: {content!r}"
        parts = content.get("parts", [])
        assert isinstance(parts, list), where
        for j, p in enumerate(parts):
            at = f"{where}.parts[{j}]"
            kind = _part_kind(p, at)
            if kind == "text":
                assert isinstance(p["text"], str), at
                if p.get("thought"):
                    obs.reasoning += p["text"]
                else:
                    obs.text += p["text"]
            elif kind == "functionCall":
                calls.append(_call_of(p["functionCall"], at))
            else:
                obs.extra.setdefault("other_parts", []).append(kind)
    else:
        assert reason is not None, f"{where}: a candidate with neither content nor finishReason"
    if reason is not None:
        assert reason in _FINISH_REASONS, f"{where}: finishReason {reason!r}"
    return reason if isinstance(reason, str) else None


def read_whole(body: Any) -> Observed:
    obs = Observed()
    assert isinstance(body, dict), body
    assert body.get("modelVersion") is None or isinstance(body["modelVersion"], str), body
    obs.model = body.get("modelVersion")
    calls: list[ObservedCall] = []
    reason = _read_response(body, obs, calls, "answer")
    assert reason is not None, "a whole answer has a finishReason"
    obs.finish = _CALLED if reason == "STOP" and calls else reason
    obs.tool_calls = calls
    return obs


def write_whole(obs: Observed) -> Any:
    return _response(_answer_parts(obs.reasoning, obs.text, obs.tool_calls),
                     obs, _WRITE_FINISH.get(obs.finish or "stop", "STOP"), obs.usage)


def _answer_parts(reasoning: str, text: str, calls: list[ObservedCall]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reasoning:
        parts.append({"text": reasoning, "thought": True})
    if text:
        parts.append({"text": text})
    parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}}
              for c in calls]
    return parts


def _response(parts: list[dict[str, Any]], obs: Observed, finish: str | None,
              usage: tuple[int | None, int | None] | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        cand["finishReason"] = finish
    cand["index"] = 0
    body: dict[str, Any] = {"candidates": [cand]}
    if usage is not None:
        body["usageMetadata"] = {"promptTokenCount": usage[0] or 0,
                                 "candidatesTokenCount": usage[1] or 0,
                                 "totalTokenCount": (usage[0] or 0) + (usage[1] or 0)}
    body["modelVersion"] = obs.model or "gemini-2.5-flash"
    body["responseId"] = "written"
    return body


# --- streams -------------------------------------------------------------------------------------


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    events = sse_events(data)
    assert events, "no event"
    obs = Observed()
    calls: list[ObservedCall] = []
    ident: tuple[Any, Any] | None = None
    for i, (_, raw) in enumerate(events):
        last = i == len(events) - 1
        body = loads(raw)
        assert isinstance(body, dict), f"event {i} is not an object"
        if "error" in body:
            obs.error = read_error(body)
            assert last, "events after the error"
            break
        here = (body.get("responseId"), body.get("modelVersion"))
        assert here[1] is None or isinstance(here[1], str), f"event {i}: modelVersion"
        assert ident is None or here == ident, f"event {i}: {here} != {ident}"
        ident = here
        obs.model = here[1]
        reason = _read_response(body, obs, calls, f"event {i}")
        if reason is not None:
            assert last, f"event {i} has the finishReason, events follow it"
            obs.finish = _CALLED if reason == "STOP" and calls else reason
    else:
        assert obs.finish is not None or obs.error is not None, \
            "the stream ended without a finishReason or an error"
    obs.tool_calls = calls
    if obs.error is not None:
        obs.usage = None
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    events: list[Any] = []
    events += [_response([{"text": p, "thought": True}], obs, None, None)
               for p in pieces(obs.reasoning, rng)]
    events += [_response([{"text": p}], obs, None, None) for p in pieces(obs.text, rng)]
    if obs.error is not None:
        return frame_sse([*events, {"error": {"code": 500, "message": obs.error,
                                              "status": "INTERNAL"}}])
    events += [_response(_answer_parts("", "", [c]), obs, None, None) for c in obs.tool_calls]
    events.append(_response([{"text": ""}], obs,
                            _WRITE_FINISH.get(obs.finish or "stop", "STOP"), obs.usage))
    return frame_sse(events)


# --- errors --------------------------------------------------------------------------------------


def read_error(body: Any) -> str:
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert isinstance(err.get("code"), int) and 400 <= err["code"] <= 599, err
    assert isinstance(err.get("message"), str), err
    assert err.get("status") in _STATUSES, f"status {err.get('status')!r}"
    assert set(err) <= {"code", "message", "status", "details"}, err
    return str(err["message"])
