"""The status page: its data (``/api/status``), its server-rendered HTML, its charts drawn by
headless Chromium (Debian's ``chromium``, which ``.ci/run`` installs; missing is a failure), and
every worker's traffic merged under ``--workers 2``."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from cdp import Browser, Page
from fakes import Fakes, Script, client_request, eventually, free_port, known_to_a_new_process

from gateway import status_page, worker_status
from gateway.app import create_app
from gateway.clock import Clock
from gateway.config import load_config, parse_config
from gateway.keys import RELOADER
from gateway.traffic import STEP_SECONDS, RecentTraffic
from gateway.worker_status import WorkerFacts, read_others, write_own

ROOT = Path(__file__).resolve().parent.parent
_KNOWN = known_to_a_new_process()  # one test serves from a process of its own
CLIENT, UPSTREAM = _KNOWN[1 % len(_KNOWN)], _KNOWN[3 % len(_KNOWN)]
"""The route's dialect and its upstream's, by registry position (any two would do)."""
STATIC = ROOT / "gateway/static"


def _config(upstream_url: str, port: int = 0) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "logging": {"level": "warning"},
        # A long silence bound: the Chromium test holds a stream open while the page draws,
        # which took over 15 s on a loaded 2-vCPU machine (the fake lets go at HOLD_MAX, 45 s)
        "upstreams": {"llm": {"dialect": UPSTREAM, "model": "m", "url": upstream_url,
                              "timeout": 60}},
        "routes": [{"path": "/chat", "dialect": CLIENT, "upstream": "llm"},
                   {"path": "/idle", "dialect": CLIENT, "upstream": "llm"}],
    }


def _write_config(path: Path, upstream_url: str, port: int = 0) -> Path:
    path.write_bytes(orjson.dumps(_config(upstream_url, port)))  # JSON is YAML
    return path


async def _send(s: aiohttp.ClientSession, base: str, *, stream: bool, ok: bool = True) -> int:
    path, body, headers = client_request(CLIENT, "/chat", stream=stream)
    data = orjson.dumps(body) if ok else b"{not json"
    async with s.post(base + path, data=data,
                      headers={"Content-Type": "application/json", **headers}) as r:
        await r.read()
        return r.status


async def _status(s: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with s.get(base + "/api/status") as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


def _route(data: dict[str, Any], path: str = "/chat") -> dict[str, Any]:
    route: dict[str, Any] = next(r for r in data["routes"] if r["path"] == path)
    return route


# --- the data -------------------------------------------------------------------------------


async def test_api_status_keeps_its_keys_and_adds_the_pages(
        fakes: Fakes, aiohttp_client: Any, tmp_path: Path) -> None:
    up = await fakes.start(UPSTREAM, Script(scripted=True, pieces=3))
    cfg = _write_config(tmp_path / "gw.yaml", up.url)
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(load_config(cfg), config_path=cfg))
    for stream in (False, True, True):
        path, body, headers = client_request(CLIENT, "/chat", stream=stream)
        assert (await client.post(path, json=body, headers=headers)).status == 200
    data = await (await client.get("/api/status")).json()
    # The keys of before, unchanged.
    assert data["window_seconds"] == 60
    chat = _route(data)
    assert {k: chat[k] for k in ("path", "dialect", "strategy", "upstreams")} == {
        "path": "/chat", "dialect": CLIENT, "strategy": "failover", "upstreams": ["llm"]}
    t = chat["traffic"]
    assert t["requests"] == 3 and t["errors"] == 0 and t["rps"] > 0
    assert 0 < t["p50_ms"] <= t["p95_ms"] <= t["p99_ms"]
    assert {k: data["upstreams"][0][k] for k in ("name", "dialect", "url", "healthy",
                                                 "consecutive_failures")} == {
        "name": "llm", "dialect": UPSTREAM, "url": up.url, "healthy": True,
        "consecutive_failures": 0}
    assert _route(data, "/idle")["traffic"] is None
    # What the page shows besides.
    assert t["whole"]["requests"] == 1 and t["stream"]["requests"] == 2
    assert t["ttft"]["requests"] == 2 and t["ttft"]["p50_ms"] <= t["stream"]["p50_ms"]
    assert chat["inflight"] == 0
    assert len(chat["series"]["t"]) == data["history_seconds"] // data["step_seconds"]
    assert _route(data, "/idle")["series"] is None
    assert data["gateway"]["config_path"] == str(cfg.resolve())
    assert data["gateway"]["version"] == "0.1.0"
    assert data["worker"]["pid"] == os.getpid() and data["worker"]["last_reload"] is None
    assert [(w["pid"], w["this"], w["requests_last_minute"]) for w in data["workers"]] == [
        (os.getpid(), True, 3)]


async def test_reloads_are_noted_with_their_result(
        fakes: Fakes, aiohttp_client: Any, tmp_path: Path) -> None:
    up = await fakes.start(UPSTREAM)
    cfg = _write_config(tmp_path / "gw.yaml", up.url)
    app = create_app(load_config(cfg), config_path=cfg)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    before = time.time()
    assert await app[RELOADER]() == []
    reload = (await (await client.get("/api/status")).json())["worker"]["last_reload"]
    assert reload["result"] == "ok" and reload["problems"] == 0 and reload["at"] >= before
    cfg.write_text("routes: [{path: /chat}]\n")
    assert await app[RELOADER]()
    reload = (await (await client.get("/api/status")).json())["worker"]["last_reload"]
    assert reload["result"] == "invalid" and reload["problems"] >= 1
    html = await (await client.get("/")).text()
    assert time.strftime("invalid at %Y-%m-%d %H:%M:%S UTC", time.gmtime(reload["at"])) in html


async def test_assets_are_served_from_the_package(aiohttp_client: Any, fakes: Fakes) -> None:
    up = await fakes.start(UPSTREAM)
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(_config(up.url))))
    r = await client.get("/static/uPlot.iife.min.js")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/javascript")
    assert await r.read() == (STATIC / "uPlot.iife.min.js").read_bytes()
    assert (await client.get("/static/status.css")).headers["Content-Type"].startswith("text/css")
    assert (await client.get("/static/uPlot.LICENSE.txt")).status == 200
    for name in ("nope.js", "..%2Fstatus.py", "%2E%2E%2Fkeys.py", "status.py"):
        assert (await client.get("/static/" + name)).status == 404, name


def test_page_needs_no_other_host() -> None:
    for text in (Path(status_page.__file__).read_text(), (STATIC / "status.js").read_text(),
                 (STATIC / "status.css").read_text()):
        assert "http://" not in text and "https://" not in text
    assert "(v1.6.32)" in (STATIC / "uPlot.iife.min.js").read_text()[:80]
    assert "MIT License" in (STATIC / "uPlot.LICENSE.txt").read_text()


# --- the HTML -------------------------------------------------------------------------------


def _data(**extra: Any) -> dict[str, Any]:
    t = RecentTraffic()
    t.add("/a<b>", 0.25, 200)
    series = t.merged()["/a<b>"]
    return {
        "window_seconds": 60, "history_seconds": 300, "step_seconds": 5,
        "gateway": {"version": "9.9", "config_path": "/etc/x.yaml", "now": time.time()},
        "worker": {"pid": 7, "started": 0, "uptime_seconds": 3725.0, "last_reload": None},
        "workers": [{"pid": 7, "this": True, "live": True, "seen_seconds_ago": 0,
                     "uptime_seconds": 3725.0, "last_reload": None, "inflight": 0,
                     "requests_last_minute": 1}],
        "routes": [{"path": "/a<b>", "dialect": "d", "strategy": "failover",
                    "upstreams": ["u"], "traffic": series["summary"], "inflight": 2,
                    "series": series["series"]}],
        "upstreams": [{"name": "u", "dialect": "d", "url": "http://u/</script>",
                       "healthy": False, "consecutive_failures": 3, "healthy_workers": 0,
                       "workers": 1}],
        **extra,
    }


def test_html_escapes_every_value_and_the_embedded_json() -> None:
    html = status_page.render(_data())
    assert "/a<b>" not in html.split('id="status-data"')[0]
    assert 'data-path="/a&lt;b&gt;"' in html
    assert html.count("</script>") == 3  # the data's own "</script>" does not end its element
    embedded = html.split('<script type="application/json" id="status-data">')[1]
    data = orjson.loads(embedded.split("</script>")[0])
    assert data["upstreams"][0]["url"] == "http://u/</script>"
    assert "1 h 02 min" in html and '<td class="down">down</td>' in html
    assert '<td class="num inflight">2</td>' in html and "250.0" in html


def test_sections_the_page_does_not_know_are_shown() -> None:
    html = status_page.render(_data(
        history={"store": "postgresql://db/gateway", "healthy": True},
        queues=[{"name": "q1", "depth": 3, "tags": ["a"]}]))
    history = html.split("<h2>History</h2>")[1].split("</table>")[0]
    assert "<th>store</th><th>healthy</th>" in history
    assert '<td>postgresql://db/gateway</td><td class="up">yes</td>' in history
    queues = html.split("<h2>Queues</h2>")[1].split("</table>")[0]
    assert '<td>q1</td><td class="num">3</td><td>[&quot;a&quot;]</td>' in queues


# --- workers --------------------------------------------------------------------------------


def test_worker_files_are_read_checked_and_pruned(tmp_path: Path) -> None:
    facts = WorkerFacts.start(None)
    window = RecentTraffic().export()
    info = {"pid": 11, "started": 1.0, "updated": 2.0, "config_path": None,
            "last_reload": None, "inflight": {"/chat": 1}, "upstreams_healthy": {}}
    write_own(tmp_path, 11, orjson.dumps({"worker": info, "window": window}))
    write_own(tmp_path, facts.pid, orjson.dumps({"worker": info, "window": window}))
    (tmp_path / "12.json").write_text('{"worker": {"pid": "x"}}')  # not ours: skipped
    stale = tmp_path / "13.json"
    stale.write_bytes((tmp_path / "11.json").read_bytes())
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    got = read_others(tmp_path, facts.pid, time.time())
    assert [f["worker"]["pid"] for f in got] == [11]
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        "11.json", "12.json", f"{facts.pid}.json"])


@pytest.mark.timeout(120)
async def test_two_workers_merged_on_every_answer(fakes: Fakes, tmp_path: Path) -> None:
    up = await fakes.start(UPSTREAM, Script(scripted=True, pieces=2))
    port = free_port()
    cfg = _write_config(tmp_path / "gw.yaml", up.url, port)
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--workers", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async def up_and_both_workers() -> bool:
                try:
                    return len((await _status(s, base))["workers"]) == 2
                except aiohttp.ClientError:
                    assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                    return False

            await eventually(up_and_both_workers, within=30)
            for i in range(20):
                assert await _send(s, base, stream=i % 2 == 1) == 200
            proc.send_signal(signal.SIGHUP)  # each worker reloads, and says so

            served_by: set[int] = set()

            async def every_answer_has_all() -> bool:
                # A new connection each time, so the kernel spreads them over both workers.
                async with aiohttp.ClientSession() as fresh:
                    data = await _status(fresh, base)
                served_by.add(data["worker"]["pid"])
                chat = _route(data)
                return (chat["traffic"] is not None and chat["traffic"]["requests"] == 20
                        and chat["traffic"]["stream"]["requests"] == 10
                        and all(w["last_reload"] and w["last_reload"]["result"] == "ok"
                                for w in data["workers"]) and len(served_by) == 2)

            await eventually(every_answer_has_all, within=30)
            data = await _status(s, base)
            assert sum(w["requests_last_minute"] for w in data["workers"]) == 20
            assert [u["workers"] for u in data["upstreams"]] == [2]
            async with s.get(base + "/") as r:
                html = await r.text()
            assert "Traffic of all 2 workers merged" in html
            row = html.split('<tr data-path="/chat">')[1].split("</tr>")[0]
            assert '<td class="num requests">20</td>' in row
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


# --- in a browser ---------------------------------------------------------------------------

_COLOURED_PIXELS = """Object.fromEntries([...document.querySelectorAll(
  '#charts .route-charts[data-route="/chat"] figure')].map((f) => {
    const c = f.querySelector("canvas");
    if (!c) return [f.dataset.chart, 0];
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 128 && Math.max(d[i], d[i + 1], d[i + 2])
          - Math.min(d[i], d[i + 1], d[i + 2]) > 80) n++;
    }
    return [f.dataset.chart, n];
}))"""


def _cell(path: str, cls: str) -> str:
    return f"document.querySelector('#routes tr[data-path=\"{path}\"] td.{cls}').textContent"


class _BucketClock:
    """Wall time for the traffic buckets, moved on by the test to the start of the next one."""

    def __init__(self) -> None:
        self._offset = 0.0
        self.next_bucket()

    def time(self) -> float:
        return time.time() + self._offset

    def next_bucket(self) -> None:
        self._offset += STEP_SECONDS - self.time() % STEP_SECONDS + 0.05


@pytest.mark.timeout(120)
async def test_status_page_in_headless_chromium(fakes: Fakes, tmp_path: Path) -> None:
    # The traffic falls in two adjacent buckets, every run: the case where each line is a stub
    # a few pixels long unless drawn with its dots (CI once timed out on one too faint to count).
    clock = _BucketClock()  # the buckets' clock, and the one the page reads them by
    gate = asyncio.Event()
    up = await fakes.start(UPSTREAM, Script(scripted=True, pieces=5, chunk_delay=0.01))
    cfg = _write_config(tmp_path / "gw.yaml", up.url)
    app = create_app(load_config(cfg), config_path=cfg, clock=Clock(wall=clock.time))
    gateway = TestServer(app, host="127.0.0.1")
    await gateway.start_server()
    base = f"http://127.0.0.1:{gateway.port}"
    held: asyncio.Task[int] | None = None
    try:
        assert await app[RELOADER]() == []
        async with aiohttp.ClientSession() as s, Browser(tmp_path / "profile") as browser:
            for i in range(12):
                if i == 6:
                    clock.next_bucket()
                assert await _send(s, base, stream=i % 3 > 0) == 200
            assert await _send(s, base, stream=False, ok=False) == 400
            # One stream held open after its first text: in flight while the page loads.
            up.queue.append(Script(scripted=True, pieces=5, hold_after_first=gate))
            held = asyncio.create_task(_send(s, base, stream=True))

            async def peak_noted() -> bool:
                chat = _route(await _status(s, base))
                return bool(chat["inflight"] == 1 and max(chat["series"]["inflight_peak"]) == 1)

            await eventually(peak_noted, within=10)

            page = await browser.page(1280, 900)
            await page.goto(base + "/")
            assert await page.wait_for(
                "document.querySelectorAll('#charts .uplot').length") == 5
            drawn = await page.wait_for(  # the charts' lines, in their colours
                _COLOURED_PIXELS, until=lambda p: bool(p) and all(n > 20 for n in p.values()))
            assert set(drawn) == {"rate", "inflight", "whole", "stream", "ttft"}, drawn
            assert await page.eval(_cell("/chat", "inflight")) == "1"
            gate.set()
            assert await held == 200
            # The page refreshes itself: the stream that finished is counted, none in flight.
            await page.wait_for(f"{_cell('/chat', 'inflight')} === '0' && "
                                f"{_cell('/chat', 'requests')} === '14'")
            assert all(u.startswith(base + "/") for u in page.requested_urls()), \
                page.requested_urls()
            shot = tmp_path / "status.png"
            await page.screenshot(shot)
            data = await _status(s, base)
            await _without_javascript(await browser.page(1280, 900, javascript=False), base, data)
        _keep(shot)
    finally:
        gate.set()
        if held is not None and not held.done():
            held.cancel()
        await gateway.close()


async def _without_javascript(page: Page, base: str, data: dict[str, Any]) -> None:
    """What a browser without JavaScript shows: every figure, no chart."""
    await page.goto(base + "/")
    assert await page.eval("document.querySelectorAll('.uplot').length") == 0
    text: str = await page.eval("document.body.innerText")
    chat = _route(data)
    t = chat["traffic"]
    routes = await page.eval("document.querySelector('#routes').innerText")
    assert re.search(rf"/chat\t{CLIENT}\tllm\tfailover\t0\t[\d.]+\t14\t9\t1\t0", routes), routes
    latency = await page.eval("document.querySelector('#latency').innerText")
    for kind, label in (("whole", "whole answers, total"), ("stream", "streams, total"),
                        ("ttft", "time to first token")):
        k = t[kind]
        expected = "\t".join([f"/chat\t{label}\t{k['requests']}",
                              *(f"{k[p]:,.1f}" for p in ("p50_ms", "p95_ms", "p99_ms"))])
        assert expected in latency, (expected, latency)
    assert "No requests in the last 5 min." in text  # the idle route
    assert f"chat-gateway {data['gateway']['version']}" in text
    assert data["gateway"]["config_path"] in text
    assert f"worker\t{os.getpid()}" in text or f"worker\n{os.getpid()}" in text
    assert re.search(r"last reload\s+ok at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text
    assert "The charts need JavaScript" in text
    upstreams = await page.eval("document.querySelector('#upstreams').innerText")
    assert f"llm\t{UPSTREAM}\t" in upstreams and "\tup\t1 of 1\t0" in upstreams


def _keep(shot: Path) -> None:
    """Print where the screenshot is; copy it to $STATUS_SCREENSHOT when that is set."""
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    wanted = os.environ.get("STATUS_SCREENSHOT")
    if wanted:
        shutil.copyfile(shot, wanted)
    print(f"status page screenshot: {wanted or shot}")


def test_shared_dir_follows_the_multiprocess_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert worker_status.shared_dir() is None
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/run/m")
    assert worker_status.shared_dir() == Path("/run/m/status")
