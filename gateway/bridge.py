"""A whole answer assembled from an upstream stream (for upstreams that only stream)."""

from __future__ import annotations

from gateway.canonical import ChatResponse, StreamError
from gateway.dialects import Dialect
from gateway.errors import ParseError
from gateway.framing import SniffingReader
from gateway.pipeline import ResponseAssembler

__all__ = ["StreamAssembler"]


class StreamAssembler:
    """``feed(bytes)`` then ``finish() -> ChatResponse``; never raises for bad upstream bytes:
    :attr:`error` tells, and :attr:`broken` says whether the gateway found the fault (malformed or
    truncated) rather than the upstream declaring an error."""

    __slots__ = ("_assembler", "_decoder", "_reader", "broken")

    def __init__(self, upstream: Dialect, max_size: int) -> None:
        self._reader = SniffingReader(max_size)
        self._decoder = upstream.decoder()
        self._assembler = ResponseAssembler()
        self.broken = False

    @property
    def error(self) -> StreamError | None:
        return self._assembler.error

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            for payload in self._reader.feed(data):
                for event in self._decoder.decode(payload):
                    self._assembler.add(event)
        except ParseError as e:
            self._broke(e)

    def finish(self) -> ChatResponse:
        if self.error is None:
            try:
                for payload in self._reader.finish():
                    for event in self._decoder.decode(payload):
                        self._assembler.add(event)
                if self.error is None:
                    for event in self._decoder.end():
                        if isinstance(event, StreamError):
                            self.broken = True
                        self._assembler.add(event)
            except ParseError as e:
                self._broke(e)
        return self._assembler.response()

    def _broke(self, e: ParseError) -> None:
        self.broken = True
        self._assembler.add(StreamError(f"the upstream sent a malformed stream: {e.message}"))
