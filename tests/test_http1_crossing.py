"""No client may ever read another client's answer: hundreds of concurrent streams through
:class:`~gateway.upstream.fast_transport.FastTransport`, on real loopback sockets, against an
upstream that misbehaves at random (seeded) in the ways that once crossed answers: a stream's
end that comes after its reader stopped (so the pool drains it), followed by stray bytes (glued
to it, or written a moment later), stray line ends, an early close, slow pieces.

Every request carries an id the upstream echoes in its head and in every piece of its answer; a
stray answer the upstream writes carries another request's id. Each client must get exactly its
own bytes (a prefix of them that holds its finish, or a prefix and then a clean
:class:`UpstreamError`).

Stray bytes that arrive only after the next request was written on the connection are not among
the misbehaviours: no HTTP/1.1 client can tell them from that request's answer (aiohttp's
client, reading every answer to its end, crossed 76 of 300 answers so). Bytes that arrive while
a connection is idle, or are already waiting when it is taken for a request, are; the tests of
:mod:`tests.test_http1_connection` feed each case at every byte boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
import uvloop

from gateway.errors import UpstreamError
from gateway.upstream import FastTransport, UpstreamRequest

pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\"")

REQUESTS = 300
SEED = 20240611
BEHAVIOURS = ("clean", "glued-stray", "next-stray", "crlf-stray", "partial-stray",
              "length-stray", "early-close", "slow")


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    if request.param == "uvloop":
        policy: asyncio.AbstractEventLoopPolicy = uvloop.EventLoopPolicy()
        return policy
    return asyncio.DefaultEventLoopPolicy()


def pieces_for(rid: str) -> list[bytes]:
    """The answer's pieces: the client stops reading after the ``finish`` piece, as a stream
    reader does, so the rest (``[DONE]`` and the terminating chunk) is drained by the pool."""
    return [f"data: {rid} part {k}\n\n".encode() for k in range(3)] + [
        f"data: {rid} finish\n\n".encode(), f"data: {rid} [DONE]\n\n".encode()]


def chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


def stray_answer(other: str) -> bytes:
    """What an upstream might write after an answer's end: a whole answer, for someone else."""
    body = chunk(f"data: {other} part 0\n\n".encode()) + chunk(
        f"data: {other} finish\n\n".encode())
    return (f"HTTP/1.1 200 OK\r\nX-Id: {other}\r\nContent-Type: text/event-stream\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n").encode() + body + b"0\r\n\r\n"


class MisbehavingUpstream:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.server: asyncio.Server | None = None
        self.port = 0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.behaviours: dict[str, str] = {}
        self.seen: list[str] = []

    async def __aenter__(self) -> MisbehavingUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=2)

    def behaviour(self, rid: str) -> str:
        how = self.behaviours.get(rid)
        if how is None:
            how = self.behaviours[rid] = self.rng.choice(BEHAVIOURS)
        return how

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                rid = ""
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    elif name.lower() == b"x-id":
                        rid = value.strip().decode()
                if length:
                    await reader.readexactly(length)
                self.seen.append(rid)
                if not await self._answer(rid, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # (cancelled: the test is over; asyncio's server would log it as an error)
        finally:
            self.tasks.discard(task)
            writer.close()

    async def _answer(self, rid: str, writer: asyncio.StreamWriter) -> bool:
        """Writes ``rid``'s answer as its behaviour says; ``False`` when it closed."""
        how = self.behaviour(rid)
        other = self.seen[self.rng.randrange(len(self.seen))] if self.seen else "nobody"
        if other == rid:
            other = f"{rid}-impostor"
        pieces = pieces_for(rid)
        if how == "length-stray":
            body = b"".join(pieces)
            writer.write((f"HTTP/1.1 200 OK\r\nX-Id: {rid}\r\nContent-Type: text/event-stream"
                          f"\r\nContent-Length: {len(body)}\r\n\r\n").encode())
            cut = len(b"".join(pieces[:4]))
            writer.write(body[:cut])
            await writer.drain()
            await asyncio.sleep(self.rng.random() * 0.004)  # the reader stops meanwhile
            writer.write(body[cut:] + stray_answer(other))
            await writer.drain()
            return True
        writer.write((f"HTTP/1.1 200 OK\r\nX-Id: {rid}\r\nContent-Type: text/event-stream\r\n"
                      f"Transfer-Encoding: chunked\r\n\r\n").encode())
        for k, piece in enumerate(pieces):
            if how == "early-close" and k == 2:
                writer.write(chunk(piece)[:5])
                await writer.drain()
                return False
            writer.write(chunk(piece))
            if how == "slow" or k == 3:
                # after the finish, always a pause: the reader stops, and the end comes late
                await writer.drain()
                await asyncio.sleep(self.rng.random() * 0.004)
        end = b"0\r\n\r\n"
        if how == "glued-stray":
            writer.write(end + stray_answer(other))
        elif how == "crlf-stray":
            writer.write(end + b"\r\n")
        elif how == "partial-stray":
            writer.write(end + stray_answer(other)[:self.rng.randrange(1, 40)])
        elif how == "next-stray":
            writer.write(end)
            await writer.drain()
            await asyncio.sleep(0)
            writer.write(stray_answer(other))
        else:
            writer.write(end)
        await writer.drain()
        return True


async def one(transport: FastTransport, url: str, rid: str) -> tuple[str, bytes, str | None]:
    """(own id as the head said, the bytes read, the error if one ended the read)."""
    request = UpstreamRequest(url, b'{"q":1}', {"X-Id": rid, "Content-Type": "application/json"},
                              2.0, 5.0)
    try:
        response = await transport.send(request)
    except UpstreamError as e:
        return "", b"", e.kind
    got = []
    try:
        said = response.headers.get("X-Id", "")
        while piece := await response.read():
            got.append(piece)
            if b"finish" in piece:
                break  # a stream reader stops at its finish: the rest is drained
        return said, b"".join(got), None
    except UpstreamError as e:
        return said, b"".join(got), e.kind
    finally:
        response.close()


async def test_no_client_ever_reads_another_clients_answer() -> None:
    transport = FastTransport(limit_per_host=24)  # few connections: each carries many answers
    try:
        async with MisbehavingUpstream(SEED) as upstream:
            url = f"http://127.0.0.1:{upstream.port}/chat"
            ids = [f"req{n:04d}x" for n in range(REQUESTS)]
            async with asyncio.timeout(30):
                results = await asyncio.gather(*(one(transport, url, rid) for rid in ids))
            crossed: list[tuple[str, str, bytes, str | None]] = []
            failed = 0
            for rid, (said, body, error) in zip(ids, results, strict=True):
                own = b"".join(pieces_for(rid))
                if error is not None:
                    failed += 1
                    if said not in ("", rid) or not own.startswith(body):
                        crossed.append((rid, said, body[:80], error))
                elif said != rid or not own.startswith(body) or b"finish" not in body:
                    crossed.append((rid, said, body[:80], error))
            kinds = sorted({upstream.behaviours[c[0]] for c in crossed})
            assert crossed == [], f"{len(crossed)} answers crossed ({kinds}): {crossed[:5]}"
            # the misbehaviours were exercised, and most requests got a whole answer
            assert set(upstream.behaviours.values()) == set(BEHAVIOURS)
            assert failed < REQUESTS // 2, failed
        assert transport.in_use() == 0
    finally:
        with contextlib.suppress(Exception):
            await transport.aclose()
