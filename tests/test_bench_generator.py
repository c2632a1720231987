"""The benchmark's lean load generator (bench/h1load.py, bench/mock.py ``--server lean``) answers
and reads as the aiohttp one does: the same bodies for every dialect, whole and streamed, every
answer checked. Functional only: the benchmark's figures are never part of the tests' verdict."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest
from bench_modules import BENCH as _BENCH
from bench_modules import mock_server, shipped_dialects_only

with shipped_dialects_only():
    import driver
    import h1load
    import wire

CHUNKS = 5


def _mock(lean: bool, delay: float = 0.0) -> contextlib.AbstractAsyncContextManager[int]:
    """A mock of every dialect on a free port, with the lean server or aiohttp's."""
    return mock_server(CHUNKS, lean, delay)


async def _ask(port: int, dialect: str, stream: bool) -> h1load.Answer:
    body, headers = wire.request(dialect, stream)
    path = wire.stream_path(dialect, wire.MOCK_PATHS[dialect]) if stream else \
        wire.whole_path(dialect, wire.MOCK_PATHS[dialect])
    conn = await h1load.H1Connection.open("127.0.0.1", port)
    try:
        async with asyncio.timeout(5):
            return await conn.request(h1load.request_bytes("127.0.0.1", port, path, body,
                                                           headers))
    finally:
        conn.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", list(wire.DIALECTS))
async def test_both_mock_servers_answer_the_same_body(dialect: str, stream: bool) -> None:
    answers = []
    for lean in (True, False):
        async with _mock(lean) as port:
            answers.append(await _ask(port, dialect, stream))
    lean_answer, aiohttp_answer = answers
    assert lean_answer.status == aiohttp_answer.status == 200
    assert lean_answer.body == aiohttp_answer.body
    text = (wire.stream_text if stream else wire.whole_text)(dialect, lean_answer.body)
    assert text == wire.answer_text(CHUNKS)
    assert (lean_answer.first is not None) and lean_answer.body


@pytest.mark.parametrize("dialect", [d for d in wire.DIALECTS if wire.streams_only(d)])
async def test_a_protocol_without_a_whole_answer_streams_when_asked_for_one(dialect: str) -> None:
    """As its agents do (their encoders stream whatever the request's ``Accept``), so that the
    yardstick relays what such an upstream really sends, the stream the gateway reads."""
    async with _mock(lean=True) as port:
        answer = await _ask(port, dialect, stream=False)
    assert answer.status == 200
    assert answer.body == b"".join(wire.stream_frames(dialect, CHUNKS))
    assert wire.whole_text(dialect, answer.body) == wire.answer_text(CHUNKS)


@pytest.mark.parametrize("client", driver.GENERATORS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_driver_counts_checked_answers_with_either_client(client: str,
                                                                   stream: bool) -> None:
    dialect = next(iter(wire.DIALECTS))
    async with _mock(lean=True, delay=0.001 if stream else 0.0) as port:
        path = wire.stream_path(dialect, wire.MOCK_PATHS[dialect]) if stream else \
            wire.whole_path(dialect, wire.MOCK_PATHS[dialect])
        target = driver.Target(f"http://127.0.0.1:{port}{path}", dialect, stream,
                               wire.answer_text(CHUNKS))
        result = await driver.run_load(target, concurrency=3, warmup=0.1, duration=0.3,
                                       request_timeout=5, client=client)
    assert result.errors == 0, result.error_samples
    assert result.requests > 0 and len(result.latencies) == result.requests
    assert (len(result.ttfbs) == result.requests) if stream else not result.ttfbs


async def test_a_wrong_text_is_an_error_not_a_request() -> None:
    dialect = next(iter(wire.DIALECTS))
    async with _mock(lean=True) as port:
        target = driver.Target(f"http://127.0.0.1:{port}{wire.MOCK_PATHS[dialect]}", dialect,
                               False, "not what the mock says")
        result = await driver.run_load(target, concurrency=2, warmup=0.0, duration=0.2,
                                       request_timeout=5)
    assert result.requests == 0 and result.errors > 0
    assert "text mismatch" in result.error_samples[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_same_answers_are_reassembled_whether_a_server_repeats_its_bytes_or_not(
        stream: bool) -> None:
    """The text is checked for the first answer and every :data:`driver.CHECK_EVERY`-th after
    it, the same ones for a server that sends the same bytes each time (the pass-through) and one
    whose answers carry ids of their own (a translating gateway): the check costs the
    generator's core alike for both. The others are checked for their status and length."""
    dialect = next(iter(wire.DIALECTS))
    right = b"".join(wire.stream_frames(dialect, CHUNKS)) if stream else \
        wire.whole_body(dialect, CHUNKS)
    wrong = right.replace(wire.WORD.encode(), b"bad ", 1)
    assert len(wrong) == len(right)
    pad = b"\n" if stream else b" "  # bytes of its own, the same text
    caught: dict[bool, list[int]] = {}
    for repeats in (True, False):
        target = driver.Target("http://127.0.0.1:1/", dialect, stream, wire.answer_text(CHUNKS))
        assert driver._check(target, 200, right) is None
        caught[repeats] = [n for n in range(1, 3 * driver.CHECK_EVERY)
                           if driver._check(target, 200, wrong if repeats else wrong + pad)]
        assert driver._check(target, 200, right if repeats else right + pad) is None
    every = driver.CHECK_EVERY
    assert caught[True] == caught[False] == [every, 2 * every]

    target = driver.Target("http://127.0.0.1:1/", dialect, stream, wire.answer_text(CHUNKS))
    assert "text mismatch" in (driver._check(target, 200, wrong) or "")
    assert driver._check(target, 200, right) is None  # until one is right, each is reassembled
    assert target.right_length == len(right)
    assert "HTTP 500" in (driver._check(target, 500, right) or "")
    cut = right[:len(right) - driver.LENGTH_SLACK - 1]
    assert "length" in (driver._check(target, 200, cut) or "")  # an answer not reassembled
    assert driver._check(target, 200, right + pad * driver.LENGTH_SLACK) is None


async def test_a_server_that_closes_gets_a_new_connection() -> None:
    """``Connection: close`` after each answer: every request still answered, none an error."""
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await reader.readuntil(b"\r\n\r\n")
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for _ in range(3):
            answer = await _ask_raw(port)
            assert (answer.status, answer.body) == (200, b"ok")
    finally:
        server.close()
    assert served == 3


async def _ask_raw(port: int) -> h1load.Answer:
    conn = await h1load.H1Connection.open("127.0.0.1", port)
    async with asyncio.timeout(5):
        answer = await conn.request(h1load.request_bytes("127.0.0.1", port, "/", b"{}", {}))
    assert not conn.usable, "a connection the server closes is not used again"
    conn.close()
    return answer


_TERMINATED_RUN = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import driver, procs

async def main() -> int:
    child = procs.Proc("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], None,
                       Path({log!r}))
    try:
        print(child.pid, flush=True)
        await asyncio.sleep(60)
        return 0
    finally:
        child.stop()

sys.exit(driver.run(main(), {client!r}))
"""


@pytest.mark.parametrize("client", driver.GENERATORS)
async def test_a_terminated_benchmark_stops_the_servers_it_started(client: str,
                                                                   tmp_path: Path) -> None:
    """The benchmark's servers run in sessions of their own, so a SIGTERM to the benchmark must
    reach them through its cleanup: none is left running, and the exit says it was terminated."""
    script = _TERMINATED_RUN.format(bench=str(_BENCH), log=str(tmp_path / "sleeper.log"),
                                    client=client)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(20):
        assert proc.stdout is not None
        child = int(await proc.stdout.readline())
        os.kill(child, 0)  # running
        proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
    try:
        assert proc.returncode == 128 + signal.SIGTERM, err.decode()
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
        assert b"Traceback" not in err
    finally:  # a failed run must not leave its sleeper behind either
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
