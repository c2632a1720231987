"""The status page's HTML, rendered on the server from the ``/api/status`` data.

Everything an operator reads is in the HTML: a browser without JavaScript shows the figures (and
refreshes every 10 s). With JavaScript, ``static/status.js`` draws the charts from the same data,
embedded in the page as JSON, and swaps in a fresh page's sections every 2 s. Every value goes
through :func:`_e` (HTML-escaped); the embedded JSON has ``<`` escaped so no string ends the
script element.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

import orjson

__all__ = ["CHARTS", "render"]

CHARTS = (("rate", "Requests/s"), ("inflight", "In flight (peak)"),
          ("whole", "Whole answers, ms"), ("stream", "Streams, ms"),
          ("ttft", "Time to first token, ms"))
"""Each route's charts: the key ``status.js`` draws by, and the caption."""

_KNOWN = {"window_seconds", "history_seconds", "step_seconds", "gateway", "worker", "workers",
          "routes", "upstreams"}
_DASH = "\u2013"  # an en dash: no value


def render(data: Mapping[str, Any]) -> str:
    embedded = orjson.dumps(data).replace(b"<", b"\\u003c").decode()
    return "\n".join([
        _HEAD,
        _summary(data),
        _routes(data),
        _latency(data),
        _charts(data),
        _upstreams(data),
        _workers(data),
        _more(data),
        f'<script type="application/json" id="status-data">{embedded}</script>',
        '<script src="static/uPlot.iife.min.js"></script>',
        '<script src="static/status.js"></script>',
        "</body>\n</html>\n",
    ])


_HEAD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>chat-gateway status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<noscript><meta http-equiv="refresh" content="10"></noscript>
<link rel="stylesheet" href="static/uPlot.min.css">
<link rel="stylesheet" href="static/status.css">
</head>
<body>"""


def _e(value: object) -> str:
    return _DASH if value is None else escape(str(value))


def _ms(value: object) -> str:
    return f"{value:,.1f}" if isinstance(value, int | float) else _DASH


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _clock(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _reload(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "none since start"
    problems = f", {r['problems']} problem(s), see the log" if r["problems"] else ""
    return f"{_e(r['result'])} at {_clock(r['at'])}{problems}"


def _td(value: object, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{value}</td>"


def _table(table_id: str, headers: Iterable[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "\n".join(rows) or '<tr><td colspan="99" class="muted">none</td></tr>'
    return (f'<table id="{table_id}">\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody>\n</table>")


def _summary(data: Mapping[str, Any]) -> str:
    gw, me, workers = data["gateway"], data["worker"], data["workers"]
    live = [w for w in workers if w["live"]]
    if len(workers) > 1:
        pids = ", ".join(str(w["pid"]) for w in workers)
        scope = (f"Traffic of all {len(workers)} workers merged (pids {pids}; "
                 f"{len(live)} serving now); this page came from pid {me['pid']}.")
    else:
        scope = f"Traffic of this worker, pid {me['pid']}, the only one."
    return f"""<header id="summary" data-live>
<h1>chat-gateway <span class="version">{_e(gw["version"])}</span></h1>
<dl class="facts">
<div><dt>worker</dt><dd id="pid">{me["pid"]}</dd></div>
<div><dt>uptime</dt><dd id="uptime">{_duration(me["uptime_seconds"])}</dd></div>
<div><dt>config</dt><dd id="config"><code>{_e(gw["config_path"])}</code></dd></div>
<div><dt>last reload</dt><dd id="last-reload">{_reload(me["last_reload"])}</dd></div>
</dl>
<p class="muted">{scope} Figures: the last {data["window_seconds"]} s; charts: the last \
{data["history_seconds"] // 60} min in {data["step_seconds"]} s steps. \
Updated <span id="updated">{_clock(gw["now"])}</span>.</p>
</header>"""


def _routes(data: Mapping[str, Any]) -> str:
    rows = []
    for r in data["routes"]:
        t = r["traffic"] or {}
        rows.append(
            f'<tr data-path="{_e(r["path"])}">' + _td(_e(r["path"])) + _td(_e(r["dialect"]))
            + _td(_e(", ".join(r["upstreams"]))) + _td(_e(r["strategy"]))
            + _td(r["inflight"], "num inflight")
            + _td(f'{t.get("rps", 0):.2f}', "num rps")
            + _td(t.get("requests", 0), "num requests")
            + _td(t.get("stream", {}).get("requests", 0), "num streams")
            + _td(t.get("errors", 0), "num errors")
            + _td(t.get("errors_5xx", 0), "num errors-5xx") + "</tr>")
    return ('<section id="routes-section" data-live>\n<h2>Routes</h2>\n'
            + _table("routes", ["path", "client dialect", "upstreams", "strategy", "in flight",
                                "req/s", "requests", "streams", "errors", "5xx"], rows)
            + "\n</section>")


def _latency(data: Mapping[str, Any]) -> str:
    kinds = (("whole", "whole answers, total"), ("stream", "streams, total"),
             ("ttft", "time to first token"))
    rows = []
    for r in data["routes"]:
        t = r["traffic"] or {}
        for key, label in kinds:
            k = t.get(key) or {}
            rows.append(
                f'<tr data-path="{_e(r["path"])}" data-kind="{key}">' + _td(_e(r["path"]))
                + _td(label) + _td(k.get("requests", 0), "num")
                + "".join(_td(_ms(k.get(p)), "num " + p.removesuffix("_ms"))
                          for p in ("p50_ms", "p95_ms", "p99_ms")) + "</tr>")
    return ('<section id="latency-section" data-live>\n<h2>Latency, ms</h2>\n'
            + _table("latency", ["route", "timing", "requests", "p50", "p95", "p99"], rows)
            + "\n</section>")


def _charts(data: Mapping[str, Any]) -> str:
    cards = []
    for r in data["routes"]:
        if r["series"] is not None:
            body = '<div class="charts">' + "".join(
                f'<figure data-chart="{key}"><figcaption>{caption}</figcaption></figure>'
                for key, caption in CHARTS) + "</div>"
        else:
            minutes = data["history_seconds"] // 60
            body = f'<p class="muted">No requests in the last {minutes} min.</p>'
        cards.append(f'<div class="route-charts" data-route="{_e(r["path"])}">'
                     f"<h3>{_e(r['path'])}</h3>{body}</div>")
    return ('<section id="charts">\n<h2>The last minutes</h2>\n'
            "<noscript><p class=\"muted\">The charts need JavaScript; the tables hold the last "
            "minute's figures.</p></noscript>\n" + "\n".join(cards) + "\n</section>")


def _upstreams(data: Mapping[str, Any]) -> str:
    rows = []
    for u in data["upstreams"]:
        health = "up" if u["healthy"] else "down"
        rows.append(
            f'<tr data-upstream="{_e(u["name"])}">' + _td(_e(u["name"])) + _td(_e(u["dialect"]))
            + _td(_e(u["url"])) + _td(health, health)
            + _td(f'{u["healthy_workers"]} of {u["workers"]}', "num")
            + _td(u["consecutive_failures"], "num") + "</tr>")
    return ('<section id="upstreams-section" data-live>\n<h2>Upstreams</h2>\n'
            + _table("upstreams", ["name", "dialect", "url", "health (this worker)",
                                   "healthy in workers", "consecutive failures"], rows)
            + "\n</section>")


def _workers(data: Mapping[str, Any]) -> str:
    rows = []
    for w in data["workers"]:
        state = "this page" if w["this"] else (
            "serving" if w["live"] else f'silent {w["seen_seconds_ago"]:.0f} s')
        rows.append(
            f'<tr data-pid="{w["pid"]}">' + _td(w["pid"], "num") + _td(_e(state))
            + _td(_duration(w["uptime_seconds"])) + _td(_reload(w["last_reload"]))
            + _td(w["inflight"], "num") + _td(w["requests_last_minute"], "num") + "</tr>")
    return ('<section id="workers-section" data-live>\n<h2>Workers</h2>\n'
            + _table("workers", ["pid", "state", "uptime", "last reload", "in flight",
                                 "requests, last minute"], rows)
            + "\n</section>")


def _more(data: Mapping[str, Any]) -> str:
    """Sections this page does not know yet (added to the data by other features), shown as
    tables of their simple values."""
    parts = []
    for key, value in data.items():
        if key in _KNOWN:
            continue
        records = value if isinstance(value, list) else [value]
        records = [r if isinstance(r, dict) else {"value": r} for r in records]
        columns = list(dict.fromkeys(c for r in records for c in r))
        rows = ["<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in records]
        parts.append(f'<h2>{_e(key.replace("_", " ").capitalize())}</h2>\n'
                     + _table(f"more-{_e(key)}", [_e(c) for c in columns], rows))
    return '<section id="more" data-live>\n' + "\n".join(parts) + "\n</section>"


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return _td("yes" if value else "no", "up" if value else "down")
    if isinstance(value, int | float):
        return _td(value, "num")
    if isinstance(value, dict | list):
        return _td(_e(orjson.dumps(value).decode()))
    return _td(_e(value))
