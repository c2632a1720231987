"""One upstream call over a :class:`~gateway.upstream.transport.Transport`: the body read with
the gateway's own bounds (a whole answer by ``timeout``, a stream's silences by
``idle_timeout``, sizes by limits), and the time spent waiting on the upstream measured.

Callers see :class:`~gateway.errors.UpstreamError` with a ``kind`` (connect, timeout, status,
malformed) and never a foreign exception; :meth:`UpstreamCall.close` runs on every path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.upstream.deadlines import Deadline, deadlines
from gateway.upstream.transport import Transport, UpstreamRequest, UpstreamResponse

__all__ = ["UpstreamCall", "has_userinfo", "parse_retry_after", "start_call", "upstream_request"]

_ERROR_BODY_LIMIT = 64 * 1024
_WHOLE_BODY_LIMIT = 16 * 1024 * 1024


async def start_call(transport: Transport, config: UpstreamConfig, body: bytes,
                     headers: Mapping[str, str], *, stream: bool,
                     url: str | None = None) -> UpstreamCall:
    """Send ``body`` to the upstream (its stream URL when ``stream``, or ``url``: another
    endpoint of it, such as its token count) and return once the response headers arrived,
    bounded by the first-byte timeout. The caller closes the call.

    (A chat attempt takes these steps itself, with :func:`upstream_request`, so that the wait
    for the head resumes one coroutine less.)"""
    started = time.perf_counter()
    response = await transport.send(upstream_request(config, body, headers, stream=stream,
                                                     url=url))
    return UpstreamCall(response, config, started, time.perf_counter() - started)


def upstream_request(config: UpstreamConfig, body: bytes, headers: Mapping[str, str], *,
                     stream: bool, url: str | None = None,
                     batched: bool = False) -> UpstreamRequest:
    """The request :func:`start_call` sends: to ``url``, else the upstream's stream URL when
    ``stream``, else its URL; bounded by its connect and first-byte timeouts (``batched``:
    :attr:`UpstreamRequest.batched`)."""
    if url is None:
        url = config.effective_stream_url if stream else config.url
    return UpstreamRequest(url, body, headers, config.connect_timeout,
                           config.first_byte_timeout or config.timeout, batched=batched)


class UpstreamCall:
    """An upstream response whose headers arrived; its body is read through this object so that
    the time spent waiting on the upstream is known (:attr:`waited`, seconds)."""

    __slots__ = ("_watch", "config", "response", "started", "waited")

    def __init__(self, response: UpstreamResponse, config: UpstreamConfig, started: float,
                 waited: float) -> None:
        self.response = response
        self.config = config
        self.started = started
        self.waited = waited
        self._watch: _StreamWatch | None = None
        """The stream's timer, once :meth:`chunks` was called: the call holds the timer, not
        the chunks, which hold the call (a cycle per stream, left to the collector, grows a
        long soak's RSS with every stream)."""

    @property
    def status(self) -> int:
        return self.response.status

    def retry_after(self) -> float | None:
        return parse_retry_after(self.response.headers.get("Retry-After"))

    def close(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        self.response.close()

    async def read_whole(self, limit: int = _WHOLE_BODY_LIMIT) -> bytes:
        """The whole body, bounded in size and by the upstream's ``timeout``: one timer, which
        fails the pending read (no timeout context, no task cancellation)."""
        t0 = time.perf_counter()
        remaining = self.config.timeout - (t0 - self.started)
        self.response.fail_after(max(remaining, 0.001), _Late)
        try:
            first = await self.response.read()
            second = await self.response.read() if first else b""
            if not second:  # most bodies: all in one read, kept as it is
                if len(first) > limit:
                    raise UpstreamError("malformed", f"the upstream body is over {limit} bytes")
                return first
            buf = bytearray(first)
            buf += second
            while chunk := await self.response.read():
                buf += chunk
                if len(buf) > limit:
                    raise UpstreamError("malformed", f"the upstream body is over {limit} bytes")
            if len(buf) > limit:
                raise UpstreamError("malformed", f"the upstream body is over {limit} bytes")
            return bytes(buf)
        except _Late as e:
            raise UpstreamError("timeout", NOT_IN_TIME) from e
        finally:
            self.response.stop_timer()
            self.waited += time.perf_counter() - t0

    async def read_error(self) -> bytes:
        try:
            return await self.read_whole(_ERROR_BODY_LIMIT)
        except UpstreamError:
            return b""

    def chunks(self, events: Callable[[], int] | None = None, *,
               whole: bool = False) -> StreamChunks:
        """Body chunks as they arrive, bounded by :class:`_StreamWatch` (its timer stops when
        the body ends, or at :meth:`close`, whichever comes first).

        ``events``: how many events the caller has read from the chunks so far (a parsed
        payload that carries something of the answer). Only events count as progress: keep-alive
        comments, blank lines, heartbeat payloads and bytes trickled in without completing an
        event do not hold a stream open. Without it, every chunk counts.

        ``whole``: the chunks are assembled into a whole answer, which ``timeout`` bounds as it
        bounds any whole answer (from the request): an upstream stream that drips, or sends only
        keep-alive comments, cannot hold one forever, as its silences alone would not."""
        watch = self._watch = _StreamWatch(self.response, self.started, self.config, events,
                                           whole)
        return StreamChunks(self, watch)


class StreamChunks:
    """The async iterator :meth:`UpstreamCall.chunks` returns.

    A class, not an async generator: a caller that stops early (``break`` once the stream's
    end was read, as nearly every stream does) leaves an async generator to the event loop's
    finalizer hook, which costs each stream a weak-set entry, a thread-safe wake-up of the loop
    and a task to run its ``aclose()``. Here the call's :meth:`~UpstreamCall.close` stops the
    timer instead, on every path."""

    __slots__ = ("_call", "_watch")

    def __init__(self, call: UpstreamCall, watch: _StreamWatch) -> None:
        self._call = call
        self._watch = watch

    def __aiter__(self) -> StreamChunks:
        return self

    async def __anext__(self) -> bytes:
        call = self._call
        watch = self._watch
        t0 = time.perf_counter()
        watch.reading_since(t0)
        try:
            chunk = await call.response.read()
        except _Late as e:
            watch.stop()
            raise UpstreamError("timeout", e.message) from e
        except BaseException:
            watch.stop()
            raise
        finally:
            watch.reading = False
            call.waited += time.perf_counter() - t0
        if not chunk:
            watch.stop()
            raise StopAsyncIteration
        return chunk


NOT_IN_TIME = "the upstream did not finish its answer in time"


class _Late(Exception):
    """A bound on the body passed (``timeout``, ``idle_timeout``, ``max_stream_seconds``)."""

    def __init__(self, message: str = NOT_IN_TIME) -> None:
        super().__init__(message)
        self.message = message


NOT_STARTED = "the upstream stream did not start in time"
SILENT = "the upstream stream went silent"
TOO_LONG = "the upstream stream ran past max_stream_seconds"


class _StreamWatch:
    """Bounds a stream body with one timer for the whole stream:

    - its first event within ``first_byte_timeout`` (default ``timeout``) of the request;
    - no wait for the next event longer than ``idle_timeout`` (default ``timeout``), counted
      only while the gateway waits on the upstream (time spent writing to the client is not);
    - all of it within ``max_stream_seconds`` of the request, when set, and within ``timeout``
      when it is assembled into a whole answer (``whole``).

    ``asyncio.timeout()`` around each read pushes a timer on the loop's heap and cancels it: about
    4 µs a chunk, a fifth of what the gateway spends on a 20-chunk stream. Here a read only stamps
    when it began; the deadline (on the loop's wheel, :mod:`gateway.upstream.deadlines`), when it
    fires, re-arms itself for the nearest bound still ahead, and when one has passed it fails the
    body, which wakes the pending (or the next) read with :class:`_Late`.
    """

    __slots__ = ("_done", "_end_by", "_events", "_first_by", "_handle", "_idle", "_response",
                 "_seen", "_started", "_too_long", "_wheel", "reading", "since")

    def __init__(self, response: UpstreamResponse, started: float, config: UpstreamConfig,
                 events: Callable[[], int] | None, whole: bool = False) -> None:
        self._wheel = deadlines()
        self._response = response
        self._idle = config.idle_timeout or config.timeout
        self._events = events
        self._started = events is None  # with no count of events, bytes are progress
        self._seen = 0
        self._first_by = started + (config.first_byte_timeout or config.timeout)
        self._end_by = (None if config.max_stream_seconds is None
                        else started + config.max_stream_seconds)
        self._too_long = TOO_LONG
        """Why the stream failed when it ran past :attr:`_end_by`."""
        if whole and (self._end_by is None or started + config.timeout < self._end_by):
            self._end_by, self._too_long = started + config.timeout, NOT_IN_TIME
        self._done = False
        self.reading = False
        self.since = time.perf_counter()
        """Since when the stream has been waited on without an event."""
        self._handle: Deadline | None = None
        self._arm(self.since)

    def reading_since(self, t0: float) -> None:
        self.reading = True
        events = self._events
        if events is None:
            self.since = t0
            return
        seen = events()
        if seen != self._seen:
            self._seen = seen
            self._started = True
            self.since = t0

    def _arm(self, now: float) -> None:
        due = self.since + self._idle if self.reading else now + self._idle
        if not self._started:
            due = min(due, self._first_by)
        if self._end_by is not None:
            due = min(due, self._end_by)
        self._handle = self._wheel.after(max(due - now, 0.0), self._check)

    def _check(self) -> None:
        self._handle = None
        if self._done:
            return
        now = time.perf_counter()
        if not self._started and self._events is not None and self._events() > 0:
            self._started = True  # (its first event is being written to the client)
        if self._end_by is not None and now >= self._end_by:
            self._response.fail(_Late(self._too_long))
        elif not self._started and now >= self._first_by:
            self._response.fail(_Late(NOT_STARTED))
        elif self.reading and now - self.since >= self._idle:
            self._response.fail(_Late(SILENT))
        else:
            self._arm(now)

    def stop(self) -> None:
        self._done = True
        if self._handle is not None:
            self._wheel.cancel(self._handle)
            self._handle = None


def has_userinfo(config: UpstreamConfig) -> bool:
    """Whether the upstream's URLs carry credentials (``https://user:password@host/…``)."""
    return any(u is not None and "@" in u.split("/", 3)[2]
               for u in (config.url, config.stream_url))


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not worth honouring for a chat answer
