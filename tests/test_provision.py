""".ci/provision, the script ``make test`` (and so ``.ci/run``) calls so that the system tools
the tests run are there: it installs the missing ones with apt-get when it may, and otherwise
fails with one line naming the packages.

Each test runs it with a PATH of stand-ins (``id``, ``apt-get``, ``sudo``) and none of the tools,
so what it does is seen whatever this machine has installed and whoever runs the tests.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "provision"
BASH = shutil.which("bash") or "/bin/bash"
# What the script itself calls, besides the tools it looks for and the stand-ins.
INITDB = "/usr/lib/postgresql/*/bin/initdb"
UTILITIES = ("awk", "sort", "xargs", "echo", "mktemp", "cat", "rm")


def _tools() -> list[tuple[str, str]]:
    """(tool, package) pairs, read from the script's TOOLS list."""
    text = SCRIPT.read_text()
    body = text.split("TOOLS=(", 1)[1].split(")", 1)[0]
    pairs = []
    for line in body.splitlines():
        words = line.split("#", 1)[0].strip().strip('"').split()
        if words:
            tool, package = words
            pairs.append((tool, package))
    return pairs


def _bin(tmp_path: Path, *, uid: int, apt: bool, sudo: bool, present: tuple[str, ...] = (),
         apt_fails: bool = False) -> Path:
    """A directory to be the whole PATH: the utilities, an ``id`` that answers ``uid``, and
    optionally an apt-get and a passwordless sudo that record their arguments and succeed (or, for
    apt-get with ``apt_fails``, fail to install)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in UTILITIES:
        found = shutil.which(name)
        assert found, f"{name} is missing on this machine"
        (bin_dir / name).symlink_to(found)
    log = tmp_path / "calls"

    def stub(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!{BASH}\n{body}\n")
        (bin_dir / name).chmod(0o755)

    stub("id", f'[ "$1" = -u ] && echo {uid}')
    if apt:
        fail = '[[ " $* " == *" install "* ]] && { echo "E: Unable to locate package"; exit 100; }'
        body = f'echo "apt-get $*" >> {log}' + (f"\n{fail}" if apt_fails else "")
        stub("apt-get", body + "\nexit 0")
    if sudo:
        stub("sudo", f'echo "sudo $*" >> {log}')
    root = tmp_path / "root"
    root.mkdir()
    for tool in present:
        if "/" in tool:  # a tool its package installs off PATH: made under the script's root
            made = root / tool.lstrip("/").replace("*", "15")
            made.parent.mkdir(parents=True)
            made.write_text("")
        else:
            stub(tool, "exit 0")
    return bin_dir


def _run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "PROVISION_ROOT": str(bin_dir.parent / "root")}
    return subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=30, check=False)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls"
    return log.read_text().splitlines() if log.exists() else []


def test_the_list_names_the_tools_the_operations_tests_run() -> None:
    tools = dict(_tools())
    assert tools == {"promtool": "prometheus", "prometheus": "prometheus",
                     "chromium": "chromium", "/usr/lib/postgresql/*/bin/initdb": "postgresql",
                     "redis-server": "redis-server", "node": "nodejs", "npm": "npm"}
    # CI runs make test, which goes through the script before the tests
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "provision:\n\tbash .ci/provision\n" in makefile
    test_recipe = makefile[makefile.index("\ntest:"):].split("\n\n")[0]
    assert " provision " in test_recipe and "unit" in test_recipe
    assert "unit: " in makefile and " provision\n" in makefile[makefile.index("unit: "):]


def test_nothing_to_do_when_every_tool_is_there(tmp_path: Path) -> None:
    tools = tuple(tool for tool, _ in _tools())
    result = _run(_bin(tmp_path, uid=1000, apt=True, sudo=False, present=tools))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert _calls(tmp_path) == []


def test_root_with_apt_installs_each_missing_package_once(tmp_path: Path) -> None:
    present = ("chromium", INITDB, "redis-server", "node", "npm")
    result = _run(_bin(tmp_path, uid=0, apt=True, sudo=False, present=present))
    calls = _calls(tmp_path)
    assert len(calls) == 2
    assert calls[0].startswith("apt-get ") and calls[0].endswith(" update -qq")
    assert calls[1].endswith(" install -y -qq --no-install-recommends prometheus")
    # the stand-in apt-get installs nothing, so the script must notice and say so
    assert result.returncode == 1
    assert result.stderr.count("\n") == 2  # "installing ..." and one line of failure
    assert "installed prometheus, yet promtool prometheus still not found" in result.stderr


def test_passwordless_sudo_is_used_when_not_root(tmp_path: Path) -> None:
    _run(_bin(tmp_path, uid=1000, apt=True, sudo=True))
    calls = _calls(tmp_path)
    assert calls[0] == "sudo -n true"
    installs = [c for c in calls if " install " in c]
    assert installs and all(c.startswith("sudo -n apt-get ") for c in installs)
    assert installs[-1].endswith(
        " install -y -qq --no-install-recommends"
        " chromium nodejs npm postgresql prometheus redis-server")


@pytest.mark.parametrize(("uid", "apt"), [(1000, True), (0, False)], ids=["no-root", "no-apt"])
def test_cannot_install_fails_with_one_line_naming_the_packages(tmp_path: Path, uid: int,
                                                                apt: bool) -> None:
    result = _run(_bin(tmp_path, uid=uid, apt=apt, sudo=False))
    assert result.returncode == 1
    assert _calls(tmp_path) == []
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "provision: the tests need promtool prometheus chromium /usr/lib/postgresql/*/bin/initdb"
        " redis-server node npm: install Debian's chromium nodejs npm postgresql prometheus"
        " redis-server (sudo apt-get install chromium nodejs npm postgresql prometheus"
        " redis-server)")



def test_when_apt_fails_its_output_is_shown(tmp_path: Path) -> None:
    result = _run(_bin(tmp_path, uid=0, apt=True, sudo=False, apt_fails=True))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    packages = "chromium nodejs npm postgresql prometheus redis-server"
    assert lines == [f"provision: installing Debian packages: {packages}",
                     "E: Unable to locate package",
                     f"provision: apt-get could not install {packages} (its output is above)"]
