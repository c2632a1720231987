"""``chat-gateway translate``: the translation core on stdin/stdout, no server involved."""

from __future__ import annotations

import sys
from typing import BinaryIO

import orjson

from gateway.canonical import ChatError, ChatRequest, Message
from gateway.carry import Policy, Unsupported
from gateway.dialects import get
from gateway.dialects.stored import stored_responses_of
from gateway.errors import ParseError
from gateway.pipeline import (
    StreamTranslator,
    parse_body,
    translate_request,
    translate_response,
)

__all__ = ["run_translate"]


def run_translate(
    source: str, target: str, *, request: bool, stream: bool, model: str | None,
    stdin: BinaryIO, stdout: BinaryIO, policy: Policy = "reject",
    dropped: list[str] | None = None,
) -> str | None:
    """Translate one body; returns ``None`` on success, else the one-line reason. The fields
    the target cannot carry and the ``drop`` policy left out are appended to ``dropped``."""
    src, dst = get(source), get(target)
    lost: list[str] = []
    try:
        if request:
            body = parse_body(stdin.read())
            stored = stored_responses_of(src)
            if stored is not None and dst is not src and stored.references(body).previous:
                # what it stands for is kept by a gateway or an upstream, never here
                return ("previous_response_id: refers to a stored response, which translate "
                        "cannot read; send the whole conversation in input")
            _, out, lost = translate_request(body, src, dst,
                                             stream=stream or None, model=model, policy=policy)
            stdout.write(orjson.dumps(out) + b"\n")
            return None
        req = ChatRequest(messages=[Message("user", "")])
        if not stream:
            body = parse_body(stdin.read())
            err = src.parse_error(body)
            if err is not None:
                out = dst.render_error(ChatError(500, err.message, err.code, err.type))
            else:
                out, lost = translate_response(body, src, dst, req, policy=policy)
            stdout.write(orjson.dumps(out) + b"\n")
            return None
    except ParseError as e:
        return f"bad {source} {'request' if request else 'response'}: {e}"
    except Unsupported as e:
        return str(e)
    finally:
        if dropped is not None:
            dropped.extend(lost)
    translator = StreamTranslator(src, dst, req, policy=policy)
    while chunk := stdin.read(65536):
        stdout.write(translator.feed(chunk))
    stdout.write(translator.finish())
    stdout.flush()
    if dropped is not None:
        dropped.extend(translator.dropped)
    if translator.broken and translator.error is not None:
        return f"bad {source} stream: {translator.error.message}"
    if translator.error is not None and translator.error.code == "UNSUPPORTED":
        return translator.error.message
    return None


def main_translate(source: str, target: str, request: bool, stream: bool,
                   model: str | None, policy: Policy = "reject") -> int:
    dropped: list[str] = []
    reason = run_translate(source, target, request=request, stream=stream, model=model,
                           stdin=sys.stdin.buffer, stdout=sys.stdout.buffer, policy=policy,
                           dropped=dropped)
    if dropped:
        print(f"{target} cannot carry: {', '.join(dropped)} (left out)", file=sys.stderr)
    if reason is not None:
        print(reason.replace("\n", " "), file=sys.stderr)
        return 1
    return 0
