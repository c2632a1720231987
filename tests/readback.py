"""Reading a translated answer back as a client of its dialect would, with the gateway's own
decoders: framed bytes, then payloads, then canonical events, then one assembled answer.

(The server tests' readers in ``fakes`` are deliberately independent of the gateway's code; these
are for the translation tests, which check what goes in against what comes back out.)
"""

from __future__ import annotations

from typing import Any

from gateway.dialects import get
from gateway.framing import SniffingReader
from gateway.pipeline import ResponseAssembler

__all__ = ["CAN_CITE", "assemble", "payloads_of", "read_back"]

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
