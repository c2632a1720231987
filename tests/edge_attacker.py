"""Slow-header clients (slowloris), run in a process of their own by tests/test_edge.py and
bench/slowloris.py so that their work does not share the gateway's event loop.

``python tests/edge_attacker.py PORT N INTERVAL``: keeps N connections to 127.0.0.1:PORT, each
sending a request head one byte every INTERVAL seconds and never finishing it; a connection the
server closes is opened again. A line ``hold`` on stdin stops the reopening (the connections
still open stay open and keep sending); end of stdin ends the process. It prints ``open K``
every second: K connections currently open.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys

HEAD = b"POST /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + \
    b"".join(b"X-Slow-%d: %s\r\n" % (i, b"a" * 40) for i in range(200))


class Attack:
    def __init__(self, port: int, n: int, interval: float) -> None:
        self.port, self.n, self.interval = port, n, interval
        self.open = 0
        self.reopen = True

    async def one(self) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            self.open += 1
            try:
                for i in range(len(HEAD)):
                    writer.write(HEAD[i:i + 1])
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):  # a close shows as EOF
                        async with asyncio.timeout(self.interval):
                            if await reader.read(1024) == b"":
                                break
            except OSError:
                pass
            finally:
                self.open -= 1
                writer.close()
            if not self.reopen:
                return


async def main(port: int, n: int, interval: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
    attack = Attack(port, n, interval)
    loop = asyncio.get_running_loop()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(attack.one()))
        if i % 100 == 99:
            await asyncio.sleep(0.02)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def report() -> None:
        while True:
            print(f"open {attack.open}", flush=True)
            await asyncio.sleep(1.0)

    reporter = asyncio.create_task(report())
    while line := await reader.readline():
        if line.strip() == b"hold":
            attack.reopen = False
    reporter.cancel()
    for t in tasks:
        t.cancel()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
