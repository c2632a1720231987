"""This worker's facts for the status page, and how workers share them under ``--workers N``.

Workers share nothing but ``PROMETHEUS_MULTIPROC_DIR``. Every second each worker writes its
traffic window (:mod:`gateway.traffic`) and its facts (pid, start, config file, last reload,
requests in flight, upstream health) to ``$PROMETHEUS_MULTIPROC_DIR/status/<pid>.json``, as a
temporary file renamed over the last one so that a reader never sees half a file. The worker that
serves the page merges its own live window with the others' files. A worker that stopped writing
still counts for the traffic it served, until its file is :data:`HISTORY_SECONDS` old and removed;
its in-flight count and health stop counting after :data:`LIVE_SECONDS`.

Why files of our own rather than the multiprocess metrics: those are totals since start, so a
chart of the last minutes would need every worker to read every worker's metric files each
second and difference them, and their latency buckets (up to 2x apart) give percentiles that far
off, where the window's samples are real latencies. A worker's file is its window: at most
~130 KiB for a saturated route, usually a few KiB.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pydantic
from typing_extensions import TypedDict  # pydantic validates these on Python 3.11

from gateway.metrics import Metrics
from gateway.traffic import HISTORY_SECONDS, SUMMARY_SECONDS, WindowData

__all__ = ["LIVE_SECONDS", "PUBLISH_SECONDS", "Reload", "WorkerFacts", "WorkerFile", "WorkerInfo",
           "inflight_by_route", "read_others", "requests_in_last_minute", "shared_dir",
           "version", "write_own"]

PUBLISH_SECONDS = 1.0
LIVE_SECONDS = 5.0
"""A worker whose file is older than this is not serving now (stopped, or stuck)."""


class Reload(TypedDict):
    at: float
    """Unix time."""
    result: str
    """``ok`` or ``invalid``, as in ``gateway_config_reloads_total{result}``."""
    problems: int
    """How many problems refused it (their text is in the log, not here: it may quote config)."""


class WorkerInfo(TypedDict):
    pid: int
    started: float
    updated: float
    config_path: str | None
    last_reload: Reload | None
    inflight: dict[str, int]
    upstreams_healthy: dict[str, bool]


class WorkerFile(TypedDict):
    worker: WorkerInfo
    window: WindowData


_FILE = pydantic.TypeAdapter(WorkerFile)


@dataclass(slots=True)
class WorkerFacts:
    """What this worker knows about itself; kept in the app, updated by the reloader."""

    config_path: str | None
    pid: int
    started: float
    last_reload: Reload | None = None

    @classmethod
    def start(cls, config_path: str | Path | None) -> WorkerFacts:
        path = None if config_path is None else str(Path(config_path).resolve())
        return cls(path, os.getpid(), time.time())

    def note_reload(self, problems: list[tuple[str, str]]) -> None:
        self.last_reload = {"at": time.time(), "result": "invalid" if problems else "ok",
                            "problems": len(problems)}


@functools.cache
def version() -> str:
    try:
        return metadata.version("chat-gateway")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def shared_dir() -> Path | None:
    """Where workers leave their files; ``None`` when this process is the only worker."""
    base = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(base) / "status" if base else None


def inflight_by_route(metrics: Metrics) -> dict[str, int]:
    """This process's ``gateway_inflight_requests``, per route."""
    metrics.pending.flush()  # the moves of the requests since the last scrape (BatchedGauge)
    return {s.labels["route"]: int(s.value)
            for family in metrics.inflight.metric.collect() for s in family.samples}


def requests_in_last_minute(window: WindowData, now: float) -> int:
    return sum(s["whole_n"] + s["stream_n"] for b in window["buckets"]
               if b["t"] > now - SUMMARY_SECONDS for s in b["routes"].values())


def write_own(directory: Path, pid: int, data: bytes) -> None:
    """Blocking file I/O: call it in a thread."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{pid}.tmp"
    tmp.write_bytes(data)
    tmp.replace(directory / f"{pid}.json")


def read_others(directory: Path, own_pid: int, now: float) -> list[WorkerFile]:
    """The other workers' files, by pid; removes those older than the history.

    Blocking file I/O: call it in a thread."""
    out: list[WorkerFile] = []
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(directory.glob("*.json")):
            if path.stem == str(own_pid):
                continue
            try:
                if path.stat().st_mtime < now - HISTORY_SECONDS:
                    path.unlink()
                    continue
                out.append(_FILE.validate_json(path.read_bytes()))
            except (OSError, pydantic.ValidationError):
                continue  # gone meanwhile, or not ours: the page shows the others
    return out
