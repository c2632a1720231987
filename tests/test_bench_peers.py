"""bench/peers.py: nginx's generated config is a plain streaming reverse proxy, and the
pass-through and the gateway run on the loop asked for, as in bench/run.py. Nothing is started and
nothing listens: only the config text and the command lines are read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_modules import BENCH as _BENCH
from bench_modules import shipped_dialects_only

with shipped_dialects_only():
    import peers


def test_nginx_config_streams_through_a_kept_alive_upstream(tmp_path: Path) -> None:
    conf = peers.nginx_config(tmp_path, 18080, 18081)
    directives = {line.strip() for line in conf.splitlines()}
    assert {"worker_processes 1;", "access_log off;", "proxy_buffering off;",
            "proxy_http_version 1.1;", 'proxy_set_header Connection "";', "keepalive 64;",
            "proxy_pass http://mock;", "server 127.0.0.1:18081;"} <= directives
    assert re.search(r"^\s*listen 127\.0\.0\.1:18080\b", conf, re.M)
    # nothing outside the run's own directory: its pid and temp files are in tmp_path
    paths = re.findall(r"^\s*(?:pid|\w+_temp_path) (\S+);", conf, re.M)
    assert len(paths) == 6
    assert all(Path(p).parent == tmp_path.resolve() for p in paths), paths
    assert conf.count("{") == conf.count("}")


def test_nginx_runs_in_the_foreground_from_the_generated_config(tmp_path: Path) -> None:
    cmd = peers.nginx_command("/usr/sbin/nginx", tmp_path)
    assert cmd[0] == "/usr/sbin/nginx"
    assert cmd[cmd.index("-c") + 1] == str(tmp_path.resolve() / "nginx.conf")
    assert cmd[cmd.index("-p") + 1] == str(tmp_path.resolve())
    assert cmd[cmd.index("-g") + 1] == "daemon off;"
    assert cmd[cmd.index("-e") + 1] == "stderr"  # not /var/log/nginx before the config is read


def test_nginx_is_an_optional_peer() -> None:
    assert peers.parse_args(["--nginx", "none"]).nginx == "none"
    assert "nginx" in peers.SERVERS and "nginx" in peers.LABELS
    assert peers.Server("nginx", "http://x", version="1.22.1").label.endswith(" 1.22.1")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_yardstick_and_the_gateway_share_the_loop(loop: str) -> None:
    assert peers.parse_args([]).loop == "uvloop"  # bench/run.py's default
    assert peers.parse_args(["--loop", loop]).loop == loop
    text = (_BENCH / "peers.py").read_text()
    assert '"--upstream", f"http://127.0.0.1:{p_mock}", "--loop", a.loop]' in text
    assert '"--port", str(p_gw), "--loop", a.loop]' in text
