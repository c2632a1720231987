"""The translation core alone, no network: stream chunks per second for every (upstream, client)
dialect pair, against a bare ``orjson.loads`` + ``orjson.dumps`` of the same payloads.

    python bench/translate_bench.py [--chunks 20] [--seconds 0.3] [--repeat 3]
    python bench/translate_bench.py --as-served [--pairs P] [--run bench/results/run-X.json]

For each upstream dialect a stream of ``--chunks`` text chunks is rendered by that dialect's own
encoder (StreamStart, TextDelta("tok ") x N, StreamFinish), each payload framed on its own (a
line, or an SSE event), as a real upstream flushes them. A measured "stream" is one
``StreamTranslator(upstream, client, req)``, one ``feed`` per framed chunk, then ``finish``; the
baseline does, per payload, the least any JSON-rewriting proxy must: ``orjson.loads`` then
``orjson.dumps``. The ratio (translator / baseline chunks per second) is the cost of framing,
decoding to canonical events and encoding in the client's dialect, relative to JSON alone. Best
of ``--repeat`` timings of at least ``--seconds`` each.

``--as-served``: the translator as the gateway serves a stream under load instead, per
(client, upstream) pair of `bench/run.py`: the one `gateway.pipeline_fast.stream_translator`
builds (every accelerator on), fed the whole stream the benchmark's mock sends (`bench/wire/`) in
one read, as a stream answered at once arrives; microseconds per stream. With ``--run``, beside
each pair the CPU per streamed request that run measured for the gateway and the pass-through
(its first load concurrency), what the gateway spent more (the excess), and the excess the
streamed floor allows (the **budget**: the pass-through's CPU over the floor, less the
pass-through's). On an identity route the excess is about the translator's cost (the rest of
the gateway costs about what the pass-through costs), so a pair meets the floor about when its
translator fits the budget (docs/performance.md, "What is left").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.canonical import ChatRequest, Message, StreamFinish, StreamStart, TextDelta  # noqa: E402
from gateway.dialects import DIALECTS  # noqa: E402
from gateway.framing import Named, Payload, encoder_for  # noqa: E402
from gateway.pipeline import StreamTranslator  # noqa: E402
from gateway.pipeline_fast import stream_translator  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import run as bench_run  # noqa: E402
import wire  # noqa: E402


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


def served_once(client: str, upstream: str, body: bytes) -> Callable[[], int]:
    """A stream body of ``upstream`` (short names, as in `bench/run.py`) to a ``client``,
    translated as the gateway serves it: in one read. Raises unless it translates to a clean
    finish."""
    up, down = DIALECTS[wire.DIALECTS[upstream]], DIALECTS[wire.DIALECTS[client]]
    req = request()
    source = object()  # (one upstream: its streams share what it keeps, as they do served)

    def one() -> int:
        t = stream_translator(up, down, req, source=source)
        t.feed(body)
        t.finish()
        t.closing()
        return 1
    t = stream_translator(up, down, req, source=source)
    out = t.feed(body) + t.finish() + t.closing()
    if t.failed or not t.done or not out:
        raise RuntimeError(f"{client}:{upstream}: failed={t.failed} done={t.done} "
                           f"error={t.error}")
    return one


def run_cpu(results: dict[str, Any], client: str, upstream: str) -> tuple[float, float] | None:
    """The gateway's and the pass-through's CPU per streamed request (µs) in a `bench/run.py`
    result, at its first load concurrency, or ``None`` when it has no such row."""
    summary = results["summary"]
    concurrencies = sorted({int(k.split("|")[1]) for k in summary if k.startswith("load|")})
    for conc in concurrencies:
        gateway = summary.get(f"load|{conc}|stream|gateway|{client}|{upstream}")
        passthrough = summary.get(f"load|{conc}|stream|passthrough|{upstream}|{upstream}")
        if gateway and passthrough:
            return gateway["cpu_ms_per_req"] * 1000, passthrough["cpu_ms_per_req"] * 1000
    return None


def as_served(pairs: list[tuple[str, str]], chunks: int, seconds: float, repeat: int,
              results: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each pair's translator in µs per stream, and, with a run's ``results``, its excess and
    budget (see the module's docstring)."""
    rows: list[dict[str, Any]] = []
    for client, upstream in pairs:
        kind = "identity" if client == upstream else "translating"
        floor = bench_run.THROUGHPUT[(kind, "stream")]
        row: dict[str, Any] = {"client": client, "upstream": upstream,
                               "translator_us": 1e6 / best_rate(
                                   served_once(client, upstream, b"".join(
                                       wire.stream_frames(upstream, chunks))), seconds, repeat)}
        cpu = run_cpu(results, client, upstream) if results is not None else None
        if cpu is not None:
            gateway, passthrough = cpu
            row.update(gateway_us=gateway, passthrough_us=passthrough,
                       excess_us=gateway - passthrough,
                       budget_us=passthrough / floor - passthrough)
        rows.append(row)
    return rows


def print_served(rows: list[dict[str, Any]], chunks: int) -> None:
    print(f"the gateway's stream translator, {chunks} text chunks in one read; "
          "µs of CPU per stream")
    head = (f"{'client:upstream':22} {'translator':>10} {'gateway':>8} {'pass-thr':>8} "
            f"{'excess':>7} {'budget':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        pair = f"{r['client']}:{r['upstream']}"
        if "excess_us" not in r:
            print(f"{pair:22} {r['translator_us']:>10.1f}")
            continue
        print(f"{pair:22} {r['translator_us']:>10.1f} {r['gateway_us']:>8.0f} "
              f"{r['passthrough_us']:>8.0f} {r['excess_us']:>7.0f} {r['budget_us']:>7.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--as-served", action="store_true",
                   help="the gateway's own stream translator per pair of bench/run.py, the "
                        "whole stream in one read")
    p.add_argument("--pairs", type=bench_run.parse_pairs, default=None,
                   help="with --as-served: CLIENT:UPSTREAM,... as in run.py [the run's pairs, "
                        "or the --quick ring]")
    p.add_argument("--run", type=Path, default=None,
                   help="with --as-served: a bench/run.py result, for each pair's CPU per "
                        "stream, excess over the pass-through and budget")
    a = p.parse_args()
    if a.as_served:
        results = json.loads(a.run.read_text()) if a.run else None
        pairs = a.pairs or (
            [(c, u) for c, u in (results or {}).get("args", {}).get("pairs") or []]
            or bench_run.parse_pairs(bench_run.QUICK_PAIRS))
        rows = as_served(pairs, a.chunks, a.seconds, a.repeat, results)
        print_served(rows, a.chunks)
        if a.json:
            a.json.write_text(json.dumps({"run": a.run.name if a.run else None,
                                          "chunks": a.chunks, "rows": rows}, indent=1))
        return
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
