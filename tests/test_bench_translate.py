"""bench/translate_bench.py --as-served: the gateway's own stream translator timed on the mock's
streams, and what a `bench/run.py` result says it may cost (the excess over the pass-through
and the budget the streamed floor leaves). Functional only: the timings are never part of the
verdict, and the run's figures here are made up."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import shipped_dialects_only

with shipped_dialects_only():
    import run
    import translate_bench
    import wire

QUICK = wire.default_pairs(quick=True)
IDENTITY = next(p for p in QUICK if p[0] == p[1])
TRANSLATING = next(p for p in QUICK if p[0] != p[1])


def _results(client: str, upstream: str, gateway_ms: float, passthrough_ms: float,
             conc: int = 32) -> dict[str, Any]:
    return {"summary": {
        f"load|{conc}|stream|gateway|{client}|{upstream}": {"cpu_ms_per_req": gateway_ms},
        f"load|{conc}|stream|passthrough|{upstream}|{upstream}": {"cpu_ms_per_req": passthrough_ms},
        f"load|{conc}|whole|gateway|{client}|{upstream}": {"cpu_ms_per_req": 9.0},
    }}


def test_each_pair_is_timed_and_set_against_the_runs_excess_and_budget() -> None:
    client, upstream = TRANSLATING
    floor = run.THROUGHPUT[("translating", "stream")]
    with shipped_dialects_only():
        rows = translate_bench.as_served([TRANSLATING, IDENTITY], 2, 0.001, 1,
                                         _results(client, upstream, 0.3, 0.2))
    translated, identity = rows
    assert translated["translator_us"] > 0 and identity["translator_us"] > 0
    assert translated["gateway_us"] == pytest.approx(300)
    assert translated["passthrough_us"] == pytest.approx(200)
    assert translated["excess_us"] == pytest.approx(100)
    assert translated["budget_us"] == pytest.approx(200 / floor - 200)
    assert "excess_us" not in identity  # the run has no row of it: timed, nothing to compare


def test_the_runs_first_load_concurrency_is_the_one_compared() -> None:
    client, upstream = IDENTITY
    results = _results(client, upstream, 0.5, 0.4, conc=128)
    results["summary"].update(_results(client, upstream, 0.25, 0.2, conc=32)["summary"])
    assert translate_bench.run_cpu(results, client, upstream) == pytest.approx((250, 200))
    assert translate_bench.run_cpu(results, upstream + "-none", upstream) is None


def test_a_stream_the_translator_cannot_finish_is_an_error_not_a_timing() -> None:
    client, upstream = TRANSLATING
    body = b"".join(wire.stream_frames(upstream, 3))
    with shipped_dialects_only():
        assert translate_bench.served_once(client, upstream, body)() == 1
        with pytest.raises(RuntimeError, match="failed=True"):
            translate_bench.served_once(client, upstream, b"{not json}\n" + body)
