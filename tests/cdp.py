"""Headless Chromium driven over the DevTools protocol, with aiohttp's websocket client.

Why the protocol rather than ``--dump-dom``/``--screenshot``: one browser serves several pages,
a test waits for a state of the page (``wait_for``) instead of a virtual-time budget, reads canvas
pixels, switches JavaScript off, lists every URL the page fetched, and screenshots the state it
asserted. No dependency beyond aiohttp, which the gateway already uses.

Chromium runs with the flags known to work on these machines (no sandbox as root, no background
networking) and with every host name resolving to nothing: a page that needed a CDN would fail.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["CHROMIUM", "Browser", "Page"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


class Browser:
    """``async with Browser(tmp_dir) as b: page = await b.page()``."""

    def __init__(self, profile: Path, timeout: float = 30.0) -> None:
        self.profile = profile
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._event = asyncio.Event()

    async def __aenter__(self) -> Browser:
        assert os.path.exists(CHROMIUM), \
            f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)"
        self.profile.mkdir(parents=True, exist_ok=True)
        active = self.profile / "DevToolsActivePort"
        active.unlink(missing_ok=True)  # a profile used before holds the last run's port
        self._proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            async with asyncio.timeout(self.timeout):
                while not (active.exists() and len(active.read_text().split()) == 2):
                    assert self._proc.poll() is None, \
                        f"chromium exited with {self._proc.returncode}"
                    await asyncio.sleep(0.05)
            port, path = active.read_text().split()
            self._session = aiohttp.ClientSession()
            self._ws = await self._session.ws_connect(f"ws://127.0.0.1:{port}{path}",
                                                      max_msg_size=0)
        except BaseException:
            await self.__aexit__()
            raise
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.send("Browser.close"), 5)
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._session is not None:
            await self._session.close()
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._proc.wait, 10 if self._ws is not None else 0.1)
            # Its renderers and helpers are in its own process group: end them all.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(5)

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = msg.json()
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
            else:
                self.events.append(data)
                self._event.set()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the browser went away"))

    async def send(self, method: str, params: dict[str, Any] | None = None,
                   session: str | None = None) -> dict[str, Any]:
        assert self._ws is not None
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        await self._ws.send_json(msg)
        async with asyncio.timeout(self.timeout):
            reply = await fut
        assert "error" not in reply, (method, reply["error"])
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def wait_event(self, method: str, session: str, since: int = 0) -> dict[str, Any]:
        async with asyncio.timeout(self.timeout):
            while True:
                for e in self.events[since:]:
                    if e["method"] == method and e.get("sessionId") == session:
                        return e
                self._event.clear()
                await self._event.wait()

    async def page(self, width: int = 1280, height: int = 900, *,
                   javascript: bool = True) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget",
                                   {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        await page.send("Page.enable")
        await page.send("Network.enable")
        await page.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        if not javascript:
            await page.send("Emulation.setScriptExecutionDisabled", {"value": True})
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session)

    async def goto(self, url: str) -> None:
        since = len(self.browser.events)
        await self.send("Page.navigate", {"url": url})
        await self.browser.wait_event("Page.loadEventFired", self.session, since)

    async def eval(self, expression: str) -> Any:
        got = await self.send("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True})
        assert "exceptionDetails" not in got, got["exceptionDetails"]
        return got["result"].get("value")

    async def wait_for(self, expression: str, within: float = 20.0,
                       until: Callable[[Any], bool] = bool) -> Any:
        """Evaluate ``expression`` until ``until`` holds for its value; return that value.

        On timeout the failure names the last value seen, so a flaky page says what it showed.
        """
        value: Any = None
        try:
            async with asyncio.timeout(within):
                while True:
                    value = await self.eval(expression)
                    if until(value):
                        return value
                    await asyncio.sleep(0.1)
        except TimeoutError:
            shown = expression if len(expression) < 80 else expression[:77] + "..."
            raise AssertionError(f"after {within} s, {shown!r} was {value!r}") from None

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("sessionId") == self.session
                and e["method"] == "Network.requestWillBeSent"]

    async def screenshot(self, path: Path) -> None:
        """The whole page, not only the viewport."""
        size = (await self.send("Page.getLayoutMetrics"))["cssContentSize"]
        shot = await self.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                     "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
