"""bench/explain.py's reading of a run and its verdicts (bench/misses.py): which misses it takes
from a run's JSON, and what it concludes from the figures it measures. Functional only: the
benchmark's figures are never part of the tests' verdict, so the figures here are made up."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import misses as explain


def _row(target: str, subject: str, measured: str, result: str = "MISS") -> dict[str, Any]:
    return {"target": target, "subject": subject, "measured": measured, "limit": "",
            "result": result, "note": "", "cpu_estimate": "0.90x"}


RUN = {"targets": [
    _row("identity whole >= 1.1x pass-through", "alpha/alpha c32", "1.00x"),
    _row("translating stream >= 0.8x pass-through", "alpha/beta c128", "0.70x"),
    _row("translating whole >= 1.0x pass-through", "beta/alpha c32", "1.20x", "PASS"),
    _row("like-for-like whole >= 0.7x (aim)", "alpha/beta c32", "0.60x"),
    _row("TTFB added at p50 <= 0.5 ms", "beta/alpha c32", "+0.90 ms"),
    _row("TTFB added at p99 <= 5 ms", "beta/alpha c32", "+7.00 ms"),
    _row("RSS under 128 streams < 80 MiB (1 worker)", "peak of 36 runs (alpha/beta)",
         "90.0 MiB"),
    _row("--workers 2 (2 cores) >= 1.7x one worker", "alpha/beta stream c128", "0.80x"),
]}


def test_it_takes_the_missed_throughput_and_first_byte_targets_only() -> None:
    got = explain.misses(RUN)
    assert [(m.kind, m.mode, m.client, m.upstream, m.concurrency, m.limit, m.quantile)
            for m in got] == [
        ("identity", "whole", "alpha", "alpha", 32, 1.1, ""),
        ("translating", "stream", "alpha", "beta", 128, 0.8, ""),
        ("ttfb", "stream", "beta", "alpha", 32, 0.5, "50"),
        ("ttfb", "stream", "beta", "alpha", 32, 5.0, "99"),
    ]
    assert got[0].measured == "1.00x" and got[0].cpu_estimate == "0.90x"
    assert got[2].subject == "beta/alpha c32 p50 TTFB"


STAGES = {"server": 80.0, "upstream hop": 60.0, "exchange glue": 70.0, "event loop": 30.0,
          "translation": 60.0, "accounting": 30.0}


def _throughput(pt: float, gw: float, stages: dict[str, float]) -> explain.Explained:
    miss = explain.misses(RUN)[1]  # translating stream, >= 0.8x
    e = explain.Explained(miss, pt_cpu_us=pt, gw_cpu_us=gw, ratio_rps=pt / gw,
                          ratio_cpu=pt / gw, stages_us=stages)
    explain.judge(e)
    return e


def test_a_miss_whose_proxying_fits_the_budget_is_the_gateways_own_work() -> None:
    # budget 264/0.8 = 330 us; the proxying 240 fits, with translation and accounting 360 > 330
    e = _throughput(264.0, 360.0, {**STAGES, "server": 110.0})
    assert e.verdict == "own work"
    assert "(270 us) fits the budget (330 us)" in e.why
    assert "30 us over" in e.why


def test_a_miss_whose_proxying_alone_exceeds_the_budget_names_its_biggest_stage() -> None:
    stages = {**STAGES, "upstream hop": 200.0}
    e = _throughput(240.0, sum(stages.values()), stages)
    assert e.verdict == "proxying"
    assert "most in upstream hop (200 us)" in e.why
    assert "over the budget (300 us)" in e.why


def test_a_miss_that_meets_its_target_measured_again_is_scatter() -> None:
    e = _throughput(300.0, 330.0, STAGES)  # 0.91x >= 0.8x
    assert e.verdict == "scatter"
    assert "0.91x" in e.why


def test_errors_measured_again_win_over_any_ratio() -> None:
    miss = explain.misses(RUN)[0]
    e = explain.Explained(miss, pt_cpu_us=300.0, gw_cpu_us=100.0, ratio_cpu=3.0, errors=2)
    explain.judge(e)
    assert e.verdict == "errors"


@pytest.mark.parametrize(("added", "unscraped", "alone", "verdict"), [
    (0.4, 0.9, 0.1, "scatter"),
    (0.9, 0.3, 0.7, "scrape"),
    (0.9, 0.8, 0.1, "burst"),
    (0.9, None, 0.1, "burst"),
    (0.9, 0.8, 0.7, "first-byte path"),
])
def test_first_byte_verdicts(added: float, unscraped: float | None, alone: float,
                             verdict: str) -> None:
    e = explain.Explained(explain.misses(RUN)[2], added_ms=added, added_unscraped_ms=unscraped,
                          added_alone_ms=alone)
    explain.judge(e)
    assert e.verdict == verdict


def test_the_tables_carry_every_stage_and_the_verdict() -> None:
    e = _throughput(264.0, 360.0, {**STAGES, "server": 110.0})
    e.rounds_cpu = [0.61, 0.73, 0.79]
    t = explain.Explained(explain.misses(RUN)[2], added_ms=0.9, added_alone_ms=0.1,
                          added_unscraped_ms=0.7,
                          pt_cpu_us=500.0, gw_cpu_us=450.0, stages_us=STAGES)
    explain.judge(t)
    lines = explain.table([e, t])
    rows = [ln for ln in lines if ln.startswith("| alpha/beta") or ln.startswith("| beta/")]
    assert len(rows) == 2
    blank = lines.index("")
    for block in (lines[:blank], lines[blank + 1:]):  # header, separator and row: as many cells
        assert len(block) == 3 and len({ln.count("|") for ln in block}) == 1
    assert "| 110 | 60 | 70 | 30 | 60 | 30 |" in rows[0] and "**own work**" in rows[0]
    assert "0.73x, 0.73x (0.61-0.79)" in rows[0]
    assert "+0.90 ms | +0.70 ms | +0.10 ms" in rows[1] and "**burst**" in rows[1]
    assert explain.tally([e, t]) in ("1 own work, 1 burst", "1 burst, 1 own work")
