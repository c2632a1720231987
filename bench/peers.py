"""Side-by-side with peers: the same whole and streamed OpenAI load through the pass-through, the
chat-gateway, nginx, LiteLLM's proxy and Portkey's gateway, all against the same mock.

    bench/compare_peers.sh [--quick]     # installs the peers into throwaway dirs, then runs this
    .venv/bin/python bench/peers.py --litellm /path/to/bin/litellm \\
        --portkey /path/to/node_modules/@portkey-ai/gateway/build/start-server.js [--quick]

Any peer may be ``none`` (or fail to start): its rows then say so, the others are measured all
the same. Everything listens on 127.0.0.1 on free ports: the mock (``bench/mock.py``, openai at
``/v1/chat/completions``), the pass-through (``bench/passthrough.py``), the chat-gateway with one
openai -> openai route (both on ``--loop``, uvloop by default, the gateway started as
``run.py`` starts it), nginx (``--nginx``, on PATH or /usr/sbin/nginx: its own master and one
worker, ``proxy_pass`` with upstream keep-alive and ``proxy_buffering off``; see
``nginx_config``), LiteLLM with one model (``m``, ``openai/m`` at the mock, ``--num_workers 1``,
a random master key, no database, telemetry and the remote model-cost map off) and Portkey
(``--headless``; each request carries ``x-portkey-provider: openai`` and ``x-portkey-custom-host``
pointing at the mock; see ``FETCH_SHIM`` for the workaround its streams need on Node). As in
``run.py``, this driver and the mock run the lean generator on uvloop (``--generator``), the
servers are pinned to core 0 and this driver and the mock to core 1; answers are checked as
``driver.py`` checks them, the same sample reassembled as an OpenAI client would and compared
with the mock's text for every server (a mismatch is an error). Per
repetition, each mode, each server in turn; figures are medians over repetitions and ``x pt`` is
req/s over the pass-through's of the same mode. The JSON goes to
``bench/results/peers-<time>.json``. See docs/performance.md, "Peers (optional)".

Caveat: each peer runs one process on one core (nginx: one worker) with its defaults (LiteLLM
with no database and no callbacks; Portkey with no cache, no logging). They do
more per request than the gateway by design (routing, cost tracking, retries, guardrails), so
the ratios are the price of each product's default path for a plain OpenAI pass-through, not of
the same work. nginx does less: like the pass-through it relays bytes and parses no JSON, in C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import driver
    import procs
    import wire
    from aiohttp import ClientSession, ClientTimeout
    from procs import fmt
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/peers.py needs the project's dependencies ({e}): run it with .venv/bin/python")

OPENAI_PATH = wire.MOCK_PATHS["openai"]  # /v1/chat/completions, also the peers' path
SERVERS = ("direct", "passthrough", "chat-gateway", "nginx", "litellm", "portkey")
LABELS = {"direct": "direct (mock)", "passthrough": "pass-through (aiohttp)",
          "chat-gateway": "chat-gateway openai/openai", "nginx": "nginx proxy_pass",
          "litellm": "LiteLLM proxy", "portkey": "Portkey gateway"}
VERSIONED = ("nginx", "litellm", "portkey")
"""The peers whose label carries their version."""


@dataclass(slots=True)
class Server:
    name: str
    url: str
    """Where the driver POSTs (the OpenAI chat completions URL)."""
    proc: procs.Proc | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Extra request headers (Portkey's routing headers)."""
    error: str | None = None
    """Why it is not measured (did not start, not installed)."""
    version: str | None = None
    idle_rss_mib: float | None = None
    label_suffix: str = ""

    @property
    def label(self) -> str:
        version = f" {self.version}" if self.version and self.name in VERSIONED else ""
        return LABELS.get(self.name, self.name) + version + self.label_suffix


# --- arguments -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="The same OpenAI load through the pass-through, the chat-gateway, nginx, "
                    "LiteLLM and Portkey, against one mock.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx",
                   help="the nginx binary ('none': skip)")
    p.add_argument("--litellm", default="none",
                   help="the litellm CLI of a venv with litellm[proxy] ('none': skip)")
    p.add_argument("--portkey", default="none",
                   help="Portkey's build/start-server.js ('none': skip)")
    p.add_argument("--node", default="node", help="node binary for Portkey")
    p.add_argument("--portkey-fetch-shim", choices=("auto", "on", "off"), default="auto",
                   help="preload a fetch() wrapper that works around Portkey's 'TypeError: "
                        "immutable' on Node streams (auto: only if it fails without)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: --duration 3 --warmup 1 --repetitions 1")
    p.add_argument("--duration", type=float, default=None, help="measured seconds per run [10]")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of load before each measured window [2]")
    p.add_argument("--repetitions", type=int, default=None, help="runs per configuration [3]")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--modes", default="whole,stream", help="whole, stream or both")
    p.add_argument("--chunks", type=int, default=20, help="text chunks per answer")
    p.add_argument("--no-direct", action="store_true", help="skip the direct-to-mock rows")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="the event loop of the chat-gateway and the pass-through (the same for "
                        "both, as in bench/run.py)")
    p.add_argument("--generator", choices=driver.GENERATORS, default="lean",
                   help="the load generator, the driver's client and the mock's server (as "
                        "bench/run.py's --generator)")
    p.add_argument("--gateway-cmd", default=None,
                   help="command that starts the chat-gateway (before 'serve --config ...')")
    p.add_argument("--start-timeout", type=float, default=120.0,
                   help="seconds a peer may take to answer its first request")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument("--request-timeout", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=None,
                   help="JSON results file [bench/results/peers-<time>.json]")
    a = p.parse_args(argv)
    quick = {"duration": 3.0, "warmup": 1.0, "repetitions": 1}
    full = {"duration": 10.0, "warmup": 2.0, "repetitions": 3}
    for k, v in (quick if a.quick else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.modes or not set(a.modes) <= {"whole", "stream"}:
        p.error("--modes takes whole, stream or whole,stream")
    if a.repetitions < 1 or a.duration <= 0 or a.warmup < 0 or a.concurrency < 1:
        p.error("--repetitions >= 1, --duration > 0, --warmup >= 0, --concurrency >= 1, please")
    return a


# --- starting the servers ------------------------------------------------------------------------


def gateway_command(a: argparse.Namespace) -> list[str]:
    if a.gateway_cmd:
        return str(a.gateway_cmd).split()
    script = Path(sys.executable).parent / "chat-gateway"
    if script.exists():
        return [str(script)]
    found = shutil.which("chat-gateway")
    return [found] if found else [sys.executable, "-m", "gateway"]


def gateway_config(port: int, mock: int) -> dict[str, Any]:
    return {"server": {"host": "127.0.0.1", "port": port}, "logging": {"level": "warning"},
            "upstreams": {"mock": {"dialect": "openai", "model": "m",
                                   "url": f"http://127.0.0.1:{mock}{OPENAI_PATH}"}},
            "routes": [{"path": OPENAI_PATH, "dialect": "openai", "upstream": "mock"}]}


def litellm_config(mock: int, master_key: str) -> str:
    """LiteLLM's proxy config (JSON is YAML): the driver's model ``m`` -> the mock's openai path
    (LiteLLM POSTs to ``<api_base>/chat/completions``). Recent LiteLLM refuses to start without
    a master key, so there is one (checked against the config only: no database)."""
    return json.dumps({
        "model_list": [{"model_name": "m", "litellm_params": {
            "model": "openai/m", "api_base": f"http://127.0.0.1:{mock}/v1",
            "api_key": "dummy"}}],
        "litellm_settings": {"telemetry": False, "drop_params": True, "num_retries": 0,
                             "request_timeout": 30, "set_verbose": False,
                             "json_logs": False},
        "general_settings": {"master_key": master_key, "disable_spend_logs": True,
                             "disable_error_logs": True},
    }, indent=1)


def nginx_config(tmp: Path, port: int, mock: int) -> str:
    """nginx as a plain reverse proxy to the mock: one worker, HTTP/1.1 keep-alive upstream
    connections (``Connection`` cleared, up to 64 idle), ``proxy_buffering off`` so that a stream
    goes out frame by frame as the mock writes it, no access log, and its pid and temp files in
    ``tmp``. Keep-alive is not cut after nginx's default 1000 requests on either side (the
    pass-through does not cut it either)."""
    t = tmp.resolve()
    return f"""\
worker_processes 1;
pid {t}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {t}/nginx-client-body;
    proxy_temp_path {t}/nginx-proxy;
    fastcgi_temp_path {t}/nginx-fastcgi;
    uwsgi_temp_path {t}/nginx-uwsgi;
    scgi_temp_path {t}/nginx-scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    upstream mock {{
        server 127.0.0.1:{mock};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def nginx_command(nginx: str, tmp: Path) -> list[str]:
    """nginx in the foreground (``daemon off``), its prefix and config in ``tmp``; ``-e stderr``
    so that it does not try /var/log/nginx/error.log before reading the config."""
    return [nginx, "-p", str(tmp.resolve()), "-c", str((tmp / "nginx.conf").resolve()),
            "-e", "stderr", "-g", "daemon off;"]


def nginx_version(nginx: str) -> str | None:
    """``nginx -v`` says ``nginx version: nginx/1.22.1`` on stderr."""
    try:
        out = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    _, _, version = (out.stderr or out.stdout).strip().partition("nginx/")
    return version.split()[0] if version else None


def offline_env() -> dict[str, str]:
    """The environment of a peer: nothing that phones home or talks to a real provider."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PROMETHEUS_MULTIPROC_DIR", "DATABASE_URL", "OPENAI_API_KEY",
                        "OPENAI_BASE_URL", "LITELLM_MASTER_KEY")}
    env.update({
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # not the model price map from GitHub
        "LITELLM_LOG": "ERROR",
        "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
        "DISABLE_ADMIN_UI": "True",
        "NO_DOCS": "True",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
        "NODE_ENV": "production",
        "ENVIRONMENT": "production",
    })
    return env


async def check_once(server: Server, text: str, within: float) -> str | None:
    """One whole and one streamed request, each checked; None if both are right."""
    async with ClientSession(timeout=ClientTimeout(total=within)) as s:
        for stream in (False, True):
            body, headers = request_with(server.headers)("openai", stream)
            try:
                async with s.post(server.url, data=body, headers=headers) as r:
                    raw = await r.read()
                    if r.status != 200:
                        return f"{'stream' if stream else 'whole'}: HTTP {r.status}: {raw[:300]!r}"
                    got = wire.stream_text("openai", raw) if stream else \
                        wire.whole_text("openai", raw)
                    if got != text:
                        return f"{'stream' if stream else 'whole'}: text {got[:60]!r} != mock's"
            except (OSError, TimeoutError, wire.WireError) as e:
                return f"{'stream' if stream else 'whole'}: {type(e).__name__}: {e}"
    return None


async def start_peer(server: Server, cmd: list[str], ready_url: str, cpus: set[int] | None,
                     log: Path, env: dict[str, str], within: float, text: str) -> None:
    """Start ``cmd``, wait for ``ready_url`` and for one right answer of each mode; on failure
    the process is stopped and ``server.error`` says why."""
    try:
        proc = procs.Proc(server.name, cmd, cpus, log, env)
    except OSError as e:
        server.error = f"could not start ({e})"
        return
    server.proc = proc
    deadline = time.monotonic() + within
    try:
        await procs.wait_ready(proc, ready_url, within)
        problem: str | None = "no answer"
        deadline = min(deadline, time.monotonic() + 10)  # ready: wrong answers stay wrong
        while time.monotonic() < deadline:
            problem = await check_once(server, text, 20)
            if problem is None or not proc.alive():
                break
            await asyncio.sleep(0.5)
        if problem is not None:
            raise RuntimeError(f"wrong answers: {problem}\n{proc.log_tail(10)}")
        await asyncio.sleep(0.5)
        server.idle_rss_mib = procs.rss_mib(proc.pid)
    except RuntimeError as e:
        server.error = f"did not start: {e}".strip()
        proc.stop(5)
        server.proc = None


FETCH_SHIM = """\
// Portkey's gateway adds its x-portkey-* headers to the upstream's fetch() Response, whose headers
// are immutable on Node: every stream fails with "TypeError: immutable" (Portkey-AI/gateway
// issues 1389 and 1550). This preload hands Portkey a copy with mutable headers.
const fetch0 = globalThis.fetch;
globalThis.fetch = async (...args) => {
  const r = await fetch0(...args);
  return new Response(r.body, {status: r.status, statusText: r.statusText,
                               headers: new Headers(r.headers)});
};
"""


async def start_portkey(pk: Server, a: argparse.Namespace, port: int, cpus: set[int] | None,
                        tmp: Path, env: dict[str, str], text: str, notes: list[str]) -> None:
    """Portkey as installed; if its answers are wrong and --portkey-fetch-shim is auto, again with
    ``FETCH_SHIM`` preloaded (noted in the results)."""
    cmd = [a.node, a.portkey, f"--port={port}", "--headless"]
    ready = f"http://127.0.0.1:{port}/"
    shim = tmp / "portkey-fetch-shim.cjs"
    shim.write_text(FETCH_SHIM)
    shimmed = [a.node, "--require", str(shim), *cmd[1:]]
    if a.portkey_fetch_shim == "on":
        await start_peer(pk, shimmed, ready, cpus, tmp / "portkey.log", env, a.start_timeout,
                         text)
        if pk.error is None:
            notes.append("portkey: run with the fetch shim (--portkey-fetch-shim on)")
        return
    await start_peer(pk, cmd, ready, cpus, tmp / "portkey.log", env, a.start_timeout, text)
    if pk.error is None or a.portkey_fetch_shim == "off":
        return
    first = pk.error.splitlines()[0]
    pk.error = None
    print(f"portkey: {first[:160]}; retrying with the fetch shim", file=sys.stderr, flush=True)
    await start_peer(pk, shimmed, ready, cpus, tmp / "portkey-shim.log", env, a.start_timeout,
                     text)
    if pk.error is None:
        notes.append(f"portkey: failed as installed ({first[:200]}); measured with the fetch "
                     "shim preloaded (its responses copied once so their headers are mutable)")
        pk.label_suffix = " (fetch shim)"


def version_of(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


# --- the load ------------------------------------------------------------------------------------


def request_with(extra: dict[str, str]) -> Callable[[str, bool], tuple[bytes, dict[str, str]]]:
    original = _ORIGINAL_REQUEST

    def request(dialect: str, stream: bool) -> tuple[bytes, dict[str, str]]:
        body, headers = original(dialect, stream)
        return body, {**headers, **extra}
    return request


_ORIGINAL_REQUEST = wire.request


@contextlib.contextmanager
def extra_headers(extra: dict[str, str]) -> Iterator[None]:
    """``driver.run_load`` builds its request with ``wire.request``; Portkey needs routing
    headers on top, so for its runs that function is wrapped (same body, same checks)."""
    if not extra:
        yield
        return
    wire.request = request_with(extra)  # type: ignore[assignment]
    try:
        yield
    finally:
        wire.request = _ORIGINAL_REQUEST


async def measure(server: Server, mode: str, a: argparse.Namespace, gen_pids: list[int],
                  text: str) -> dict[str, Any]:
    target = driver.Target(server.url, "openai", mode == "stream", text)
    pids = server.proc.pids() if server.proc else []
    sampler = procs.RssSampler(pids) if pids else None
    marks: dict[str, float] = {}

    async def on_start() -> None:
        marks["cpu0"] = procs.cpu_seconds(pids)
        marks["gen0"] = procs.cpu_seconds(gen_pids)
        marks["t0"] = time.perf_counter()

    async def on_end() -> None:
        marks["cpu1"] = procs.cpu_seconds(pids)
        marks["gen1"] = procs.cpu_seconds(gen_pids)
        marks["t1"] = time.perf_counter()

    if sampler:
        sampler.start()
    try:
        with extra_headers(server.headers):
            result = await driver.run_load(
                target, concurrency=a.concurrency, warmup=a.warmup, duration=a.duration,
                request_timeout=a.request_timeout, on_start=on_start, on_end=on_end,
                client=a.generator)
    finally:
        if sampler:
            await sampler.stop()
    out = result.summary()
    wall = marks["t1"] - marks["t0"]
    out["generator_cpu_pct"] = 100 * (marks["gen1"] - marks["gen0"]) / wall
    if pids:
        cpu = marks["cpu1"] - marks["cpu0"]
        out["server_cpu_pct"] = 100 * cpu / wall
        out["cpu_ms_per_req"] = 1e3 * cpu / result.requests if result.requests else None
        out["rss_peak_mib"] = sampler.peak_one if sampler else None
    return out


# --- reporting -----------------------------------------------------------------------------------

FIGURES = ("rps", "p50_ms", "p99_ms", "ttfb_p50_ms", "ttfb_p99_ms", "cpu_ms_per_req",
           "server_cpu_pct", "generator_cpu_pct", "rss_peak_mib")


LEGEND = """\
x pt: req/s over the pass-through's (same mode, same run). p50ms/p99ms: request start to last
byte; ttfb50: to the first body byte (streams). err: non-200, transport errors or text that does
not reassemble to the mock's, over all repetitions. cpu ms/req: the server's CPU (all its
processes) per request, the figure least disturbed by a shared machine; srv%: its CPU share of
the window; gen%: driver + mock CPU. rss: peak VmRSS of the server's main process."""


def print_table(servers: list[Server], modes: list[str], conc: int,
                summary: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    head = (f"{'server':40} {'mode':6} {'req/s':>7} {'x pt':>5} {'p50ms':>7} {'p99ms':>7} "
            f"{'ttfb50':>7} {'err':>5} {'cpu ms/req':>10} {'srv%':>4} {'gen%':>4} "
            f"{'rss MiB':>7}")
    lines = [f"OpenAI chat completions, concurrency {conc}", head, "-" * len(head)]
    for mode in modes:
        pt = summary.get(("passthrough", mode))
        for srv in servers:
            label = srv.label
            if srv.error is not None:
                lines.append(f"{label:40} {mode:6} {'not measured: ' + srv.error.splitlines()[0]}"
                             [:200])
                continue
            s = summary.get((srv.name, mode))
            if s is None:
                continue
            ratio = s["rps"] / pt["rps"] if pt and pt.get("rps") and srv.name not in (
                "passthrough",) else None
            lines.append(
                f"{label:40} {mode:6} {fmt(s.get('rps'), 0):>7} {fmt(ratio, 2):>5} "
                f"{fmt(s.get('p50_ms')):>7} {fmt(s.get('p99_ms')):>7} "
                f"{fmt(s.get('ttfb_p50_ms') if mode == 'stream' else None):>7} "
                f"{s['errors']:>5} {fmt(s.get('cpu_ms_per_req'), 3):>10} "
                f"{fmt(s.get('server_cpu_pct'), 0):>4} {fmt(s.get('generator_cpu_pct'), 0):>4} "
                f"{fmt(s.get('rss_peak_mib')):>7}")
        lines.append("")
    return lines


# --- main ----------------------------------------------------------------------------------------


async def amain(a: argparse.Namespace) -> int:
    split = procs.split_cores(a.no_pin)
    cpus, pin, server_cpus, gen_cpus = split.usable, split.pinned, split.server, split.generator
    text = wire.answer_text(a.chunks)
    p_mock, p_pt, p_gw, p_ng, p_ll, p_pk = (procs.free_port() for _ in range(6))
    py = sys.executable
    started = time.time()
    notes: list[str] = []
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    servers: list[Server] = []
    env = offline_env()
    with tempfile.TemporaryDirectory(prefix="gateway-peers-") as tmpname:
        tmp = Path(tmpname)
        running: list[procs.Proc] = []
        try:
            mock = procs.Proc("mock", [py, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                                       "--server", a.generator, "--listen", str(p_mock)],
                              gen_cpus, tmp / "mock.log")
            running.append(mock)
            await procs.wait_ready(mock, f"http://127.0.0.1:{p_mock}/", 15)
            if not a.no_direct:
                servers.append(Server("direct", f"http://127.0.0.1:{p_mock}{OPENAI_PATH}"))

            pt = Server("passthrough", f"http://127.0.0.1:{p_pt}{OPENAI_PATH}")
            await start_peer(pt, [py, str(HERE / "passthrough.py"), "--port", str(p_pt),
                                  "--upstream", f"http://127.0.0.1:{p_mock}", "--loop", a.loop],
                             f"http://127.0.0.1:{p_pt}/", server_cpus, tmp / "passthrough.log",
                             dict(os.environ), 15, text)
            servers.append(pt)

            gw = Server("chat-gateway", f"http://127.0.0.1:{p_gw}{OPENAI_PATH}")
            config = tmp / "gateway.yaml"
            config.write_text(json.dumps(gateway_config(p_gw, p_mock), indent=1))
            gw_env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
            # as bench/run.py's start_gateway: the same command, the same loop as the yardstick
            await start_peer(gw, [*gateway_command(a), "serve", "--config", str(config),
                                  "--host", "127.0.0.1", "--port", str(p_gw), "--loop", a.loop],
                             f"http://127.0.0.1:{p_gw}/healthz", server_cpus,
                             tmp / "gateway.log", gw_env, 30, text)
            servers.append(gw)

            ng = Server("nginx", f"http://127.0.0.1:{p_ng}{OPENAI_PATH}")
            if a.nginx == "none":
                ng.error = "skipped (--nginx none)"
            elif not Path(a.nginx).exists() and not shutil.which(a.nginx):
                ng.error = f"not installed ({a.nginx} not found)"
            else:
                ng.version = nginx_version(a.nginx)
                (tmp / "nginx.conf").write_text(nginx_config(tmp, p_ng, p_mock))
                await start_peer(ng, nginx_command(a.nginx, tmp), f"http://127.0.0.1:{p_ng}/",
                                 server_cpus, tmp / "nginx.log", dict(os.environ), 15, text)
            servers.append(ng)

            master_key = "sk-" + secrets.token_hex(24)
            ll = Server("litellm", f"http://127.0.0.1:{p_ll}{OPENAI_PATH}",
                        headers={"Authorization": f"Bearer {master_key}"})
            if a.litellm == "none":
                ll.error = "skipped (--litellm none)"
            elif not Path(a.litellm).exists() and not shutil.which(a.litellm):
                ll.error = f"not installed ({a.litellm} not found)"
            else:
                ll.version = version_of([str(Path(a.litellm).parent / "python"), "-c",
                                         "import importlib.metadata as m; "
                                         "print(m.version('litellm'))"])
                cfg = tmp / "litellm.yaml"
                cfg.write_text(litellm_config(p_mock, master_key))
                print(f"starting LiteLLM {ll.version or ''} (its imports take a while)",
                      flush=True)
                await start_peer(ll, [a.litellm, "--config", str(cfg), "--host", "127.0.0.1",
                                      "--port", str(p_ll), "--num_workers", "1"],
                                 f"http://127.0.0.1:{p_ll}/health/liveliness", server_cpus,
                                 tmp / "litellm.log", env, a.start_timeout, text)
            servers.append(ll)

            pk = Server("portkey", f"http://127.0.0.1:{p_pk}/v1/chat/completions", headers={
                "x-portkey-provider": "openai",
                "x-portkey-custom-host": f"http://127.0.0.1:{p_mock}/v1",
                "Authorization": "Bearer dummy"})
            if a.portkey == "none":
                pk.error = "skipped (--portkey none)"
            elif not Path(a.portkey).exists():
                pk.error = f"not installed ({a.portkey} not found)"
            elif not shutil.which(a.node):
                pk.error = f"no {a.node} binary"
            else:
                pkg = Path(a.portkey).resolve().parent.parent / "package.json"
                with contextlib.suppress(OSError, ValueError):
                    pk.version = json.loads(pkg.read_text()).get("version")
                await start_portkey(pk, a, p_pk, server_cpus, tmp, env, text, notes)
            servers.append(pk)

            for srv in servers:
                if srv.proc is not None:
                    running.append(srv.proc)
                if srv.error is not None:
                    msg = f"{srv.name}: {srv.error}"
                    print(msg, file=sys.stderr, flush=True)
                    notes.append(msg)
            live = [s for s in servers if s.error is None]
            total = (a.warmup + a.duration + 0.5) * len(live) * len(a.modes) * a.repetitions
            pinning = (f"servers on {sorted(server_cpus or [])}, driver and mock on "
                       f"{sorted(gen_cpus or [])}") if pin else "off"
            print(f"{len(live)} servers x {len(a.modes)} modes x {a.repetitions} repetitions, "
                  f"about {total / 60:.1f} min; pinning: {pinning}", flush=True)
            gen_pids = [os.getpid(), mock.pid]
            for rep in range(a.repetitions):
                for mode in a.modes:
                    for srv in live:
                        if srv.proc is not None and not srv.proc.alive():
                            srv.error = f"exited during the runs:\n{srv.proc.log_tail(10)}"
                            notes.append(f"{srv.name}: {srv.error}")
                            continue
                        if srv.error is not None:
                            continue
                        r = await measure(srv, mode, a, gen_pids, text)
                        runs.setdefault((srv.name, mode), []).append(r)
                        print(f"[rep {rep + 1}/{a.repetitions}] {mode:6} "
                              f"{srv.label:40} {r['rps']:8.0f}/s err {r['errors']}"
                              + (f"  ({r['error_samples'][0][:100]})" if r["errors"] else ""),
                              flush=True)
        finally:
            for p in reversed(running):
                p.stop()

    summary = {k: procs.combine(rs, FIGURES) for k, rs in runs.items() if rs}
    table = print_table(servers, a.modes, a.concurrency, summary)
    print()
    print("\n".join(table))
    print(LEGEND)
    out = a.out or HERE / "results" / time.strftime("peers-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    pt_rps = {m: summary.get(("passthrough", m), {}).get("rps") for m in a.modes}
    result = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "machine": {"cpus": os.cpu_count(), "usable_cpus": cpus, "pinned": pin,
                    "python": platform.python_version(), "platform": platform.platform()},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "servers": {s.name: {"label": s.label, "url": s.url, "error": s.error,
                             "version": s.version, "idle_rss_mib": s.idle_rss_mib}
                    for s in servers},
        "notes": notes,
        "runs": {f"{n}|{m}": rs for (n, m), rs in runs.items()},
        "summary": {f"{n}|{m}": {**s, "ratio_to_passthrough":
                                 s["rps"] / pt_rps[m] if pt_rps.get(m) and s.get("rps")
                                 else None}
                    for (n, m), s in summary.items()},
        "table": table,
    }
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nJSON: {out}")
    return 0


def main() -> None:
    a = parse_args()
    sys.exit(driver.run(amain(a), a.generator))


if __name__ == "__main__":
    main()
