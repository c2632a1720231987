"""The framing line readers, before and after they became linear, in one run.

    python bench/line_reader_bench.py [--old-ref core] [--mib 8] [--repeat 3]

The "before" readers are the modules of git ref ``--old-ref`` (``git show <ref>:gateway/framing/
{jsonlines,sse}.py``), loaded from a temporary directory beside the current ones, so both are
timed on the same machine in the same minute. Two measures, CPU time (``time.process_time``),
best of ``--repeat`` (old and new run in turns; the old long line once: it takes seconds):

- **long line**: a ``--mib`` MiB line (JSON lines) or ``data:`` line (SSE) fed in 2 KiB reads to a
  reader whose limit is one byte less, until it refuses it: what an upstream that sends one huge
  line slowly costs the gateway;
- **small lines**: the shape of normal streams, 100-byte JSON payloads, 50,000 of them, fed one
  frame per read, and again as 4 KiB reads that split frames anywhere: payloads per second.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.errors import FramingError  # noqa: E402
from gateway.framing import jsonlines, sse  # noqa: E402

PIECE = 2048
Reader = Any


def old_module(ref: str, name: str, tmp: Path) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:gateway/framing/{name}.py"],
                            check=True, capture_output=True).stdout
    path = tmp / f"old_{name}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(f"old_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def best_pair(a: Callable[[], object], b: Callable[[], object],
              repeat: int) -> tuple[float, float]:
    """Best of ``repeat`` for each, run in turns, so that a busy spell on a shared machine
    falls on both."""
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(best(a, 1))
        tb.append(best(b, 1))
    return min(ta), min(tb)


def long_line(make: Callable[[int], Reader], data: bytes, limit: int) -> Callable[[], None]:
    pieces = [data[i:i + PIECE] for i in range(0, len(data), PIECE)]

    def run() -> None:
        reader = make(limit)
        try:
            for p in pieces:
                reader.feed(p)
        except FramingError:
            return
        raise AssertionError("the limit did not refuse the line")
    return run


def small_lines(make: Callable[[int], Reader], reads: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        reader = make(8 * 1024 * 1024)
        for r in reads:
            reader.feed(r)
        reader.finish()
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-ref", default="core")
    ap.add_argument("--mib", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    n = args.mib * 1024 * 1024
    payload = b'{"choices":[{"delta":{"content":"tok "},"index":0}],"id":"c-1","x":"' + \
        b"y" * 30 + b'"}'
    count = 50_000
    with tempfile.TemporaryDirectory() as tmp:
        old = {name: old_module(args.old_ref, name, Path(tmp)) for name in ("jsonlines", "sse")}
        kinds: dict[str, tuple[Callable[[ModuleType], Callable[[int], Reader]], bytes, bytes]] = {
            "jsonlines": (lambda m: m.JsonLinesReader,
                          b'"' + b"x" * (n - 2) + b'"\n', payload + b"\n"),
            "sse": (lambda m: m.SSEReader,
                    b'data: "' + b"x" * (n - 8) + b'"\n\n', b"data: " + payload + b"\n\n"),
        }
        print(f"long line: {args.mib} MiB in {PIECE} B reads, refused at the limit; "
              f"small lines: {count} x {len(payload)} B payloads. CPU seconds, best of "
              f"{args.repeat}.")
        print(f"{'reader':10} {'measure':28} {'before':>10} {'after':>10} {'after/before':>13}")
        for name, (cls, line, frame) in kinds.items():
            before, after = cls(old[name]), cls(jsonlines if name == "jsonlines" else sse)
            t_old = best(long_line(before, line, n - 1), 1)
            t_new = best(long_line(after, line, n - 1), args.repeat)
            print(f"{name:10} {'long line (s)':28} {t_old:10.3f} {t_new:10.3f} "
                  f"{t_new / t_old:13.4f}")
            stream = frame * count
            shapes = {"one frame per read": [frame] * count,
                      "4 KiB reads, frames split": [stream[i:i + 4096]
                                                    for i in range(0, len(stream), 4096)]}
            for shape, reads in shapes.items():
                t_old, t_new = best_pair(small_lines(before, reads), small_lines(after, reads),
                                         args.repeat)
                print(f"{name:10} {shape + ' (payloads/s)':28} {count / t_old:10.0f} "
                      f"{count / t_new:10.0f} {t_old / t_new:13.3f}")


if __name__ == "__main__":
    main()
