"""The verdicts of bench/explain.py: which misses of a `bench/run.py` run it takes, and what it
concludes from the figures it measures again, as tables. No I/O and no import of the bench's
servers, so that its logic is tested on made-up figures (tests/test_bench_explain.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

OWN_WORK = ("translation", "accounting")
"""Stages the pass-through has no counterpart of: what the gateway does beyond proxying."""


@dataclass(frozen=True, slots=True)
class Miss:
    """One missed target of a run, as `bench/run.py` recorded it."""

    kind: str
    """identity, translating or ttfb."""
    mode: str
    """whole or stream (ttfb: stream)."""
    client: str
    upstream: str
    concurrency: int
    limit: float
    """The target's ratio (throughput) or milliseconds (ttfb)."""
    quantile: str = ""
    """ttfb: 50 or 99."""
    measured: str = ""
    """What the run measured, as it printed it."""
    cpu_estimate: str = ""

    @property
    def subject(self) -> str:
        what = f"p{self.quantile} TTFB" if self.kind == "ttfb" else f"{self.kind} {self.mode}"
        return f"{self.client}/{self.upstream} c{self.concurrency} {what}"


_THROUGHPUT = re.compile(r"^(?P<kind>identity|translating) (?P<mode>whole|stream) >= "
                         r"(?P<limit>[\d.]+)x pass-through$")
_TTFB = re.compile(r"^TTFB added at p(?P<q>\d+) <= (?P<limit>[\d.]+) ms$")
_SUBJECT = re.compile(r"^(?P<client>\w+)/(?P<upstream>\w+) c(?P<conc>\d+)$")


def misses(results: dict[str, Any]) -> list[Miss]:
    """The run's missed targets that this script explains, in the run's order."""
    out = []
    for row in results.get("targets", []):
        if row.get("result") != "MISS":
            continue
        subject = _SUBJECT.match(row.get("subject", ""))
        if subject is None:
            continue  # RSS and --workers rows name no pair
        client, upstream = subject["client"], subject["upstream"]
        conc = int(subject["conc"])
        if t := _THROUGHPUT.match(row["target"]):
            out.append(Miss(t["kind"], t["mode"], client, upstream, conc, float(t["limit"]),
                            measured=row.get("measured", ""),
                            cpu_estimate=row.get("cpu_estimate", "")))
        elif t := _TTFB.match(row["target"]):
            out.append(Miss("ttfb", "stream", client, upstream, conc, float(t["limit"]),
                            quantile=t["q"], measured=row.get("measured", "")))
    return out


@dataclass(slots=True)
class Explained:
    miss: Miss
    pt_cpu_us: float | None = None
    """The pass-through's CPU per request (throughput: in the median round; ttfb: the median of
    the rounds at the run's concurrency)."""
    gw_cpu_us: float | None = None
    ratio_rps: float | None = None
    """Gateway over pass-through req/s, median of the rounds' ratios."""
    ratio_cpu: float | None = None
    """Pass-through over gateway CPU per request: the median round's (whose two terms are
    ``pt_cpu_us`` and ``gw_cpu_us``)."""
    rounds_cpu: list[float] = field(default_factory=list)
    """Every round's CPU ratio, lowest first."""
    stages_us: dict[str, float] = field(default_factory=dict)
    """The gateway's CPU per request by stage (share of the sampled window x gw_cpu_us)."""
    added_ms: float | None = None
    """ttfb: gateway minus pass-through at the run's concurrency (median of the rounds)."""
    added_unscraped_ms: float | None = None
    """ttfb: the same without the scrape of ``/metrics`` at the window's start."""
    added_alone_ms: float | None = None
    """ttfb: the same with one stream at a time (unscraped)."""
    pt_ttfb_ms: float | None = None
    pt_ttfb_alone_ms: float | None = None
    errors: int = 0
    verdict: str = ""
    why: str = ""


def budget_us(pt_cpu_us: float, limit: float) -> float:
    """The gateway CPU per request that meets a throughput target of ``limit`` x."""
    return pt_cpu_us / limit


def judge(e: Explained) -> None:
    """Sets ``e.verdict`` and ``e.why`` from the measured figures."""
    m = e.miss
    if e.errors:
        e.verdict, e.why = "errors", f"{e.errors} errors when measured again"
        return
    if m.kind == "ttfb":
        if e.added_ms is None or e.added_alone_ms is None:
            e.verdict, e.why = "unmeasured", "no first byte measured"
            return
        if e.added_ms <= m.limit:
            e.verdict = "scatter"
            e.why = (f"{e.added_ms:+.2f} ms when measured again (limit {m.limit:g} ms)")
        elif e.added_unscraped_ms is not None and e.added_unscraped_ms <= m.limit:
            e.verdict = "scrape"
            e.why = (f"{e.added_ms:+.2f} ms with the scrape of /metrics at the window's start, "
                     f"{e.added_unscraped_ms:+.2f} ms without: the rendering holds the loop")
        elif e.added_alone_ms <= m.limit:
            e.verdict = "burst"
            e.why = (f"alone the gateway adds {e.added_alone_ms:+.2f} ms; with "
                     f"{m.concurrency} streams whose frames arrive together, "
                     f"{e.added_ms:+.2f} ms: each first frame waits behind the others' work "
                     f"on one core")
        else:
            e.verdict = "first-byte path"
            e.why = (f"the gateway adds {e.added_alone_ms:+.2f} ms even to a stream alone "
                     f"({e.added_ms:+.2f} ms at c{m.concurrency})")
        return
    if e.pt_cpu_us is None or e.gw_cpu_us is None or e.ratio_cpu is None:
        e.verdict, e.why = "unmeasured", "no CPU per request measured"
        return
    budget = budget_us(e.pt_cpu_us, m.limit)
    own = sum(e.stages_us.get(s, 0.0) for s in OWN_WORK)
    proxying = e.gw_cpu_us - own
    over = e.gw_cpu_us - budget
    if e.ratio_cpu >= m.limit:
        e.verdict = "scatter"
        e.why = (f"{e.ratio_cpu:.2f}x by CPU when measured again (target {m.limit:g}x)")
    elif not e.stages_us:
        e.verdict, e.why = "unprofiled", f"{over:.0f} us over the budget; no samples"
    elif proxying <= budget:
        e.verdict = "own work"
        e.why = (f"the proxying alone ({proxying:.0f} us) fits the budget ({budget:.0f} us); "
                 f"translation and accounting ({own:.0f} us) take it {over:.0f} us over")
    else:
        biggest = max((s for s in e.stages_us if s not in OWN_WORK),
                      key=lambda s: e.stages_us[s])
        e.verdict = "proxying"
        e.why = (f"the proxying alone ({proxying:.0f} us) is {proxying - budget:.0f} us over "
                 f"the budget ({budget:.0f} us), most in {biggest} "
                 f"({e.stages_us[biggest]:.0f} us)")


# --- reporting -----------------------------------------------------------------------------------

STAGE_COLUMNS = ("server", "upstream hop", "exchange glue", "event loop", "translation",
                 "accounting")


def _f(v: float | None, digits: int = 0, sign: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def table(rows: list[Explained]) -> list[str]:
    """Markdown: one table for the throughput misses, one for the first-byte ones."""
    out: list[str] = []
    put = [r for r in rows if r.miss.kind != "ttfb"]
    first = [r for r in rows if r.miss.kind == "ttfb"]
    stages = " | ".join(STAGE_COLUMNS)
    if put:
        out += ["| miss | run | again: req/s, CPU (rounds) | pt us | budget | gateway us | "
                f"{stages} | verdict |",
                "|---|---|---|---|---|---|" + "---|" * len(STAGE_COLUMNS) + "---|"]
        for r in put:
            m = r.miss
            budget = budget_us(r.pt_cpu_us, m.limit) if r.pt_cpu_us else None
            cells = " | ".join(_f(r.stages_us.get(s)) if r.stages_us else "-"
                               for s in STAGE_COLUMNS)
            again = f"{_f(r.ratio_rps, 2)}x, {_f(r.ratio_cpu, 2)}x"
            if len(r.rounds_cpu) > 1:
                again += f" ({_f(r.rounds_cpu[0], 2)}-{_f(r.rounds_cpu[-1], 2)})"
            out.append(f"| {m.subject} (>= {m.limit:g}x) | {m.measured} | {again} | "
                       f"{_f(r.pt_cpu_us)} | {_f(budget)} | {_f(r.gw_cpu_us)} | {cells} | "
                       f"**{r.verdict}**: {r.why} |")
    if first:
        if out:
            out.append("")
        out += ["| miss | run | added again | no scrape | added alone | pt TTFB (c, alone) ms | "
                f"CPU/stream pt, gateway us | {stages} | verdict |",
                "|---|---|---|---|---|---|---|" + "---|" * len(STAGE_COLUMNS) + "---|"]
        for r in first:
            m = r.miss
            cells = " | ".join(_f(r.stages_us.get(s)) if r.stages_us else "-"
                               for s in STAGE_COLUMNS)
            out.append(f"| {m.subject} (<= {m.limit:g} ms) | {m.measured} | "
                       f"{_f(r.added_ms, 2, True)} ms | {_f(r.added_unscraped_ms, 2, True)} ms | "
                       f"{_f(r.added_alone_ms, 2, True)} ms | "
                       f"{_f(r.pt_ttfb_ms, 2)}, {_f(r.pt_ttfb_alone_ms, 2)} | "
                       f"{_f(r.pt_cpu_us)}, {_f(r.gw_cpu_us)} | {cells} | "
                       f"**{r.verdict}**: {r.why} |")
    return out


def tally(rows: list[Explained]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: -x[1]))
