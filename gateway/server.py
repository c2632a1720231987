"""Running the app: one worker, or N workers sharing one port with SO_REUSEPORT.

Why SO_REUSEPORT and a tiny supervisor rather than gunicorn: no extra dependency, the kernel
spreads connections across workers, and each worker is the same asyncio server as with one
worker (so SIGHUP reload and SIGTERM drain behave the same). The supervisor forwards SIGTERM and
SIGHUP to the workers and restarts a worker that dies. Metrics are summed across workers through
prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from gateway.admin import start_admin_listener
from gateway.app import create_app
from gateway.config import GatewayConfig, load_config, retired_settings
from gateway.edge import Edge, EdgeListener, edge_for
from gateway.keys import METRICS, RELOADER
from gateway.log import configure_logging, get_logger

__all__ = ["loop_factory", "open_listeners", "run_server", "serve_forever"]

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

GC_THRESHOLDS = (50_000, 20, 20)
"""The cyclic collector's thresholds while serving. At Python's default (a young collection
every 700 net container allocations) the gateway under load ran about 100 collections a second,
each walking the objects of every request in flight, which reference counting frees a moment
later anyway: measured with ``gc.callbacks``, 1.1% of its CPU; with these thresholds 0.2%. The
garbage cycles that wait longer are a few MiB at most (the RSS target is measured with it)."""


def loop_factory(name: str) -> tuple[str, LoopFactory | None]:
    """The event loop ``name`` asks for (``auto``: uvloop when installed) and its factory
    (``None``: asyncio's own). Raises :class:`RuntimeError` when uvloop is asked for and
    missing."""
    if name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise RuntimeError("--loop uvloop: uvloop is not installed (pip install "
                                   "uvloop; it ships with the gateway on Linux)") from None
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", None


def _run(main: Coroutine[Any, Any, None], factory: LoopFactory | None) -> None:
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def open_listeners(app: web.Application, config: GatewayConfig, host: str, port: int,
                         *, reuse_port: bool = False
                         ) -> tuple[EdgeListener, EdgeListener | None, Edge]:
    """``app`` served on ``host:port`` and, when configured, the admin listener, both behind
    one :class:`~gateway.edge.Edge`. The caller cleans up both listeners (admin last)."""
    edge = edge_for(config.server, app[METRICS].edge_drops)
    listener = EdgeListener(app, edge, handler_cancellation=True, access_log=None,
                            shutdown_timeout=config.server.shutdown_grace,
                            # an unread body after the answer is read for at most this long
                            lingering_time=min(10.0, config.server.body_timeout))
    await listener.start(host, port, reuse_port=reuse_port)
    try:
        admin = await start_admin_listener(app, config, host, reuse_port=reuse_port, edge=edge)
    except BaseException:  # e.g. the admin port is taken: nothing may be left listening
        await listener.cleanup()
        raise
    return listener, admin, edge


async def serve_forever(config: GatewayConfig, config_path: str | None, host: str, port: int,
                        *, reuse_port: bool = False, on_ready: asyncio.Event | None = None,
                        stop: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop``); then stop accepting and let in-flight requests
    finish within ``server.shutdown_grace``."""
    log = get_logger()
    for where, note in retired_settings({"server": config.server.model_dump(exclude_unset=True)}):
        log.warning("retired_setting", setting=where, replaced_by=note)
    app = create_app(config, config_path=config_path)
    runner, admin, edge = await open_listeners(app, config, host, port, reuse_port=reuse_port)
    # What start-up built lives as long as the process: out of the collector's sight, so that a
    # full collection (many connections' objects churned, e.g. under a slow-header attack) does
    # not walk those ~50,000 objects each time (about 30 ms on a 2-vCPU machine).
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[object]] = set()

    def reload() -> None:
        task = asyncio.ensure_future(app[RELOADER]())
        pending.add(task)
        task.add_done_callback(pending.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    log.info("listening", host=host, port=port, pid=os.getpid(), routes=len(config.routes),
             loop=type(loop).__module__.split(".")[0],
             upstream_client=config.server.upstream_client,
             max_connections=edge.max_connections)
    if on_ready is not None:
        on_ready.set()
    try:
        await stop.wait()
        log.info("draining", grace_seconds=config.server.shutdown_grace)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        if admin is not None:  # after the drain: metrics stay readable while streams finish
            await admin.cleanup()
        gc.set_threshold(*thresholds)
        log.info("stopped")


def _worker(config_path: str, host: str, port: int, log_format: str | None,
            loop: str) -> None:
    config = load_config(config_path)
    configure_logging(log_format or config.logging.format, config.logging.level)
    _run(serve_forever(config, config_path, host, port, reuse_port=True), loop_factory(loop)[1])


def run_server(config: GatewayConfig, config_path: str, host: str, port: int, workers: int,
               log_format: str | None, loop: str | None = None) -> int:
    """``loop``: ``auto``, ``asyncio`` or ``uvloop`` (default: ``server.loop``)."""
    configure_logging(log_format or config.logging.format, config.logging.level)
    loop = loop or config.server.loop
    _, factory = loop_factory(loop)  # fails here, once, when uvloop is asked for and missing
    if workers <= 1:
        _run(serve_forever(config, config_path, host, port), factory)
        return 0
    if config.auth.limited and config.limits.store == "memory":
        # Said once, by the supervisor, before any worker counts anything.
        get_logger().warning(
            "limits_per_worker", workers=workers,
            note=f"limits.store is memory: each of the {workers} workers counts its own limits, "
                 "so a key may get up to that many times its limits; set limits.store to a "
                 "redis:// URL to share them")
    return _supervise(config_path, host, port, workers, log_format, loop)


def _supervise(config_path: str, host: str, port: int, workers: int,
               log_format: str | None, loop: str) -> int:
    log = get_logger()
    own_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        own_dir = tempfile.mkdtemp(prefix="chat-gateway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_dir
    ctx = multiprocessing.get_context("spawn")
    procs: list[multiprocessing.process.BaseProcess] = []
    stopping = False

    def spawn() -> multiprocessing.process.BaseProcess:
        p = ctx.Process(target=_worker, args=(config_path, host, port, log_format, loop),
                        daemon=False)
        p.start()
        return p

    def forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        if sig in (signal.SIGTERM, signal.SIGINT):
            stopping = True
        for p in procs:
            if p.pid and p.is_alive():
                os.kill(p.pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    procs.extend(spawn() for _ in range(workers))
    log.info("supervisor", workers=workers, pid=os.getpid())
    restarts = 0
    try:
        while procs:
            time.sleep(0.2)
            for i, p in enumerate(list(procs)):
                if p.is_alive():
                    continue
                _mark_dead(p.pid)
                if stopping or restarts >= 10 * workers:
                    procs.remove(p)
                    continue
                restarts += 1
                log.warning("worker_restarted", pid=p.pid, exitcode=p.exitcode)
                procs[i] = spawn()
    finally:
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0


def _mark_dead(pid: int | None) -> None:
    if pid is None:
        return
    from prometheus_client import multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
