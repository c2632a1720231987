"""The translation core alone, no network: stream chunks per second for every (upstream, client)
dialect pair, against a bare ``orjson.loads`` + ``orjson.dumps`` of the same payloads.

    python bench/translate_bench.py [--chunks 20] [--seconds 0.3] [--repeat 3]

For each upstream dialect a stream of ``--chunks`` text chunks is rendered by that dialect's own
encoder (StreamStart, TextDelta("tok ") x N, StreamFinish), each payload framed on its own (a
line, or an SSE event), as a real upstream flushes them. A measured "stream" is one
``StreamTranslator(upstream, client, req)``, one ``feed`` per framed chunk, then ``finish``; the
baseline does, per payload, the least any JSON-rewriting proxy must: ``orjson.loads`` then
``orjson.dumps``. The ratio (translator / baseline chunks per second) is the cost of framing,
decoding to canonical events and encoding in the client's dialect, relative to JSON alone. Best
of ``--repeat`` timings of at least ``--seconds`` each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.canonical import ChatRequest, Message, StreamFinish, StreamStart, TextDelta  # noqa: E402
from gateway.dialects import DIALECTS  # noqa: E402
from gateway.framing import Named, Payload, encoder_for  # noqa: E402
from gateway.pipeline import StreamTranslator  # noqa: E402


def request() -> ChatRequest:
    return ChatRequest(messages=[Message("user", "hi")], stream=True)


def upstream_stream(name: str, chunks: int) -> tuple[list[bytes], list[Payload]]:
    """(framed chunks as sent on the wire, their bare payloads)."""
    dialect = DIALECTS[name]
    encoder = dialect.encoder(request())
    frame = encoder_for(dialect.framing)
    payloads: list[Payload] = []
    for event in [StreamStart(), *(TextDelta("tok ") for _ in range(chunks)), StreamFinish()]:
        payloads.extend(encoder.encode(event))
    return [frame(p) for p in payloads], payloads


def best_rate(fn: Callable[[], int], seconds: float, repeat: int) -> float:
    """Chunks per second: the best of ``repeat`` timings, each of at least ``seconds``."""
    best = 0.0
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        deadline = start + seconds
        while True:
            n += fn()
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best


def translate_once(up: str, client: str, framed: list[bytes]) -> Callable[[], int]:
    upstream, downstream = DIALECTS[up], DIALECTS[client]

    def run() -> int:
        t = StreamTranslator(upstream, downstream, request())
        for chunk in framed:
            t.feed(chunk)
        t.finish()
        return len(framed)
    return run


def baseline_once(payloads: list[Payload]) -> Callable[[], int]:
    loads, dumps = orjson.loads, orjson.dumps
    json_payloads = []
    for p in payloads:
        if isinstance(p, Named):  # a named SSE event: its data is the JSON
            p = p.data
        try:
            loads(p)
            json_payloads.append(p)
        except orjson.JSONDecodeError:  # e.g. OpenAI's [DONE]: nothing to decode
            pass
    n = len(payloads)

    def run() -> int:
        for p in json_payloads:
            dumps(loads(p))
        return n
    return run


def check(up: str, client: str, framed: list[bytes]) -> str | None:
    t = StreamTranslator(DIALECTS[up], DIALECTS[client], request())
    out = b"".join(t.feed(c) for c in framed) + t.finish()
    if t.failed or not t.done or not out:
        return f"{up} -> {client}: failed={t.failed} done={t.done} error={t.error}"
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args()
    names = list(DIALECTS)
    streams = {n: upstream_stream(n, a.chunks) for n in names}
    rows = []
    print(f"{a.chunks} text chunks per stream; chunks/s = upstream frames fed per second "
          f"(best of {a.repeat} x {a.seconds}s)")
    head = (f"{'upstream':20} {'client':20} {'frames':>6} {'translator/s':>12} "
            f"{'orjson/s':>10} {'ratio':>6} {'us/frame':>8}")
    print(head)
    print("-" * len(head))
    for up in names:
        framed, payloads = streams[up]
        base = best_rate(baseline_once(payloads), a.seconds, a.repeat)
        for client in names:
            problem = check(up, client, framed)
            if problem:
                print(f"  !! {problem}")
            rate = best_rate(translate_once(up, client, framed), a.seconds, a.repeat)
            rows.append({"upstream": up, "client": client, "frames": len(framed),
                         "translator_chunks_per_s": rate, "orjson_chunks_per_s": base,
                         "ratio": rate / base, "us_per_frame": 1e6 / rate,
                         "problem": problem})
            print(f"{up:20} {client:20} {len(framed):>6} {rate:>12,.0f} {base:>10,.0f} "
                  f"{rate / base:>6.2f} {1e6 / rate:>8.2f}")
    ratios = sorted(r["ratio"] for r in rows)
    print(f"ratio translator/orjson: min {ratios[0]:.2f}, median "
          f"{ratios[len(ratios) // 2]:.2f}, max {ratios[-1]:.2f}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
