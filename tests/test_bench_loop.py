"""The yardstick runs on the gateway's event loop: bench/passthrough.py and
bench/passthrough_fast.py take ``--loop`` with the gateway's names, default to uvloop (what the
gateway's ``auto`` picks when uvloop is installed), and bench/run.py starts the gateway and both
pass-throughs with the same one. No load is run: only the processes' command lines are read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import uvloop
from bench_modules import BENCH as _BENCH
from bench_modules import shipped_dialects_only

from gateway.server import loop_factory

with shipped_dialects_only():
    import passthrough
    import run


def test_passthrough_defaults_to_the_loop_the_gateway_picks() -> None:
    default = passthrough.LOOPS[0]
    assert default == "uvloop" == loop_factory("auto")[0]
    assert run.parse_args([]).loop == default
    with pytest.raises(SystemExit):  # "auto" could resolve differently in two processes
        run.parse_args(["--loop", "auto"])
    for name in passthrough.LOOPS:
        assert run.parse_args(["--loop", name]).loop == name
        assert loop_factory(name)[0] == name  # the gateway's --loop takes the same names


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_new_loop_is_the_kind_asked_for(name: str) -> None:
    loop = passthrough.new_loop(name)
    try:
        assert isinstance(loop, uvloop.Loop) == (name == "uvloop")
        assert isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()


def test_like_for_like_shares_the_flag() -> None:
    text = (_BENCH / "passthrough_fast.py").read_text()
    assert "loop=new_loop(args.loop)" in text and "uvloop.new_event_loop" not in text


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_run_starts_the_gateway_on_the_loop_asked_for(
        loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    class Proc:
        def __init__(self, _name: str, cmd: list[str], *_: Any) -> None:
            started.append(cmd)

    async def ready(*_: Any) -> None:
        return None

    monkeypatch.setattr(run.procs, "Proc", Proc)
    monkeypatch.setattr(run.procs, "wait_ready", ready)
    a = run.parse_args(["--loop", loop, "--gateway-cmd", "chat-gateway"])
    await run.start_gateway(a, tmp_path, run.Ports(1, 2, 3, 4, 5), None, 1)
    (cmd,) = started
    assert cmd[cmd.index("--loop") + 1] == loop


def test_run_starts_each_pass_through_with_the_run_s_loop() -> None:
    # amain builds their command lines in one place; a pass-through without the flag would fall
    # back to its own default whatever --loop the run was given
    text = (_BENCH / "run.py").read_text()
    assert '"--upstream", f"http://127.0.0.1:{up}", "--loop", a.loop]' in text
