"""Reading a translated answer back with the gateway's own decoders: framed bytes, then payloads,
then canonical events, then one assembled answer.

The translation tests read what the gateway emits with the strict readers of tests/strict
instead (a bug shared by the gateway's writer and reader cannot hide from those); this module is
for tests that want the canonical view of a stream, such as the server tests.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects import DIALECTS, get
from gateway.framing import SniffingReader
from gateway.pipeline import ResponseAssembler

__all__ = ["CAN_CITE", "assemble", "check_framing", "payloads_of", "read_back"]

CAN_CITE = frozenset(n for n, d in DIALECTS.items() if d.capabilities.citations)
"""The dialects that declare citations (as registered when this module was first imported;
ask ``get(name).capabilities.citations`` for one registered later)."""


def payloads_of(data: bytes, *, named: bool = False) -> list[Any]:
    reader = SniffingReader(named=named)
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
    return assemble(dialect, payloads_of(data, named=get(dialect).named_events))


def check_framing(dialect: str, data: bytes) -> None:
    """The client's bytes are well formed: newline-terminated JSON lines, or SSE events of one
    ``data:`` line each (after one ``event:`` line in a dialect whose events are named)."""
    d = get(dialect)
    if d.framing == "jsonlines":
        assert data.endswith(b"\n")
        for line in data.split(b"\n")[:-1]:
            assert isinstance(orjson.loads(line), dict)
    else:
        assert data.endswith(b"\n\n")
        for event in data.split(b"\n\n")[:-1]:
            if d.named_events and event.startswith(b"event: "):
                event = event.split(b"\n", 1)[1]
            assert event.startswith(b"data: ") and b"\n" not in event
