"""Reading a translated answer back as a client of its dialect would, with the gateway's own
decoders: framed bytes, then payloads, then canonical events, then one assembled answer.

(The server tests' readers in ``fakes`` are deliberately independent of the gateway's code; these
are for the translation tests, which check what goes in against what comes back out.)
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects import get
from gateway.framing import SniffingReader
from gateway.pipeline import ResponseAssembler

__all__ = ["CAN_CITE", "assemble", "check_framing", "payloads_of", "read_back"]

CAN_CITE = {"protocol-2024-01-28", "protocol-2024-05-29", "chatui"}
"""The dialects that carry citations (openai has no place for them)."""


def payloads_of(data: bytes) -> list[Any]:
    reader = SniffingReader()
    return reader.feed(data) + reader.finish()


def assemble(dialect: str, payloads: list[Any]) -> ResponseAssembler:
    dec, asm = get(dialect).decoder(), ResponseAssembler()
    for p in payloads:
        for e in dec.decode(p):
            asm.add(e)
    for e in dec.end():
        asm.add(e)
    return asm


def read_back(dialect: str, data: bytes) -> ResponseAssembler:
    return assemble(dialect, payloads_of(data))


def check_framing(dialect: str, data: bytes) -> None:
    """The client's bytes are well formed: newline-terminated JSON lines, or SSE events of one
    ``data:`` line each."""
    if get(dialect).framing == "jsonlines":
        assert data.endswith(b"\n")
        for line in data.split(b"\n")[:-1]:
            assert isinstance(orjson.loads(line), dict)
    else:
        assert data.endswith(b"\n\n")
        for event in data.split(b"\n\n")[:-1]:
            assert event.startswith(b"data: ") and b"\n" not in event
