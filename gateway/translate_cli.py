"""``chat-gateway translate``: the translation core on stdin/stdout, no server involved."""

from __future__ import annotations

import sys
from typing import BinaryIO

import orjson

from gateway.canonical import ChatError, ChatRequest, Message
from gateway.dialects import get
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
    stdin: BinaryIO, stdout: BinaryIO,
) -> str | None:
    """Translate one body; returns ``None`` on success, else the one-line reason."""
    src, dst = get(source), get(target)
    if request:
        try:
            _, out = translate_request(parse_body(stdin.read()), src, dst,
                                       stream=stream or None, model=model)
        except ParseError as e:
            return f"bad {source} request: {e}"
        stdout.write(orjson.dumps(out) + b"\n")
        return None
    req = ChatRequest(messages=[Message("user", "")])
    if not stream:
        try:
            body = parse_body(stdin.read())
            err = src.parse_error(body)
            if err is not None:
                out = dst.render_error(ChatError(500, err.message, err.code, err.type))
            else:
                out = translate_response(body, src, dst, req)
        except ParseError as e:
            return f"bad {source} response: {e}"
        stdout.write(orjson.dumps(out) + b"\n")
        return None
    translator = StreamTranslator(src, dst, req)
    while chunk := stdin.read(65536):
        stdout.write(translator.feed(chunk))
    stdout.write(translator.finish())
    stdout.flush()
    if translator.broken and translator.error is not None:
        return f"bad {source} stream: {translator.error.message}"
    return None


def main_translate(source: str, target: str, request: bool, stream: bool,
                   model: str | None) -> int:
    reason = run_translate(source, target, request=request, stream=stream, model=model,
                           stdin=sys.stdin.buffer, stdout=sys.stdout.buffer)
    if reason is not None:
        print(reason.replace("\n", " "), file=sys.stderr)
        return 1
    return 0
