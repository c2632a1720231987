"""The demo's chat page in headless Chromium: a dialect's own client (the vendored AI SDK bundle
for the dialect that ships a page) served by the gateway, talking to the demo backends through
the page's routes; a question to one backend, then the same conversation on another.

Found from the registry: the dialects that declare a ``demo_page``; the backends are the demo's
own (``demo_backend_app``), on free ports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from cdp import Browser, Page

import gateway.demo
from gateway.app import create_app
from gateway.config import parse_config
from gateway.demo import demo_backend_app, demo_config, is_page_route, page_dialects, page_of
from gateway.dialects import names

STATIC = Path(gateway.demo.__file__).parent / "static"
PAGES = page_dialects()


def test_some_dialect_ships_a_page_and_its_files_need_no_other_host() -> None:
    assert PAGES, "no dialect ships the demo's chat page"
    for d in PAGES:
        page = (STATIC / str(page_of(d))).read_text()
        assert "http://" not in page and "https://" not in page
        scripts = re.findall(r'src="([^"]+)"', page)
        for name in scripts:
            script = (STATIC / name).read_text()
            assert "https://" not in script.replace("https://json-schema.org", "")
            for imported in re.findall(r'from "\./([^"]+)"', script):
                head = (STATIC / imported).read_text()[:1500]
                # the vendored bundle says what it is, its version and its license
                assert re.search(r"`ai` \d+\.\d+\.\d+ \(Apache-2\.0\)", head), head[:200]
                assert (STATIC / imported.replace(".js", ".LICENSE.txt")).read_text().count(
                    "Apache License") >= 1


async def ask(page: Page, route: Any, question: str, n: int) -> str:
    """Pick the route's backend, ask, wait for the ``n``-th answer; its text."""
    await page.eval(f"document.getElementById('backend').value = {route.path!r}")
    await page.eval(f"document.getElementById('question').value = {question!r};"
                    "document.getElementById('send').click()")
    await page.wait_for("document.getElementById('status').textContent === 'ready' && "
                        f"document.querySelectorAll('.message.assistant').length === {n}")
    text: str = await page.eval("[...document.querySelectorAll('.message.assistant')].at(-1)"
                                ".querySelector('.text').textContent")
    return text


@pytest.mark.timeout(120)
async def test_the_chat_page_switches_backends_in_chromium(aiohttp_client: Any,
                                                           tmp_path: Path) -> None:
    backends = {name: await aiohttp_client(demo_backend_app(name, token_delay=0.002))
                for name in names()}  # paced, as the demo is, but brief
    data = demo_config()
    data.pop("history", None)
    for up in data["upstreams"].values():
        port = backends[up["dialect"]].port
        up["url"] = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", up["url"])
    config = parse_config(data, env={})
    server = TestServer(create_app(config), host="127.0.0.1")
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with Browser(tmp_path / "profile") as browser:
            for d in PAGES:
                routes = [r for r in config.routes if is_page_route(r) and r.dialect == d.name]
                first, second = routes[0], routes[-1]
                page = await browser.page(1100, 900)
                await page.goto(f"{base}/static/{page_of(d)}")
                await page.wait_for("document.body.dataset.ready === 'yes'")
                options = await page.eval(
                    "[...document.querySelectorAll('#backend option')].map(o => o.value)")
                assert {r.path for r in routes} <= set(options)

                backend = config.upstreams[first.upstreams[0].name].dialect
                said = await ask(page, first, "What is on the page?", 1)
                assert said.startswith(f"Hello from the {backend} demo backend! "
                                       "You asked: \"What is on the page?\"")
                other = config.upstreams[second.upstreams[0].name].dialect
                said = await ask(page, second, "And now?", 2)
                assert said.startswith(f"Hello from the {other} demo backend! "
                                       "You asked: \"And now?\"")
                # what the backends' answers carry, as the page shows it
                shown = await page.eval("document.getElementById('messages').innerText")
                assert shown.count("user") == 2 and "(" + second.upstreams[0].name + ")" in shown
                assert await page.eval("document.querySelectorAll('.followup').length") >= 1
                assert await page.eval("document.getElementById('status').className") == ""
                assert all(u.startswith(base + "/") for u in page.requested_urls()), \
                    page.requested_urls()
                await page.screenshot(tmp_path / "chat.png")
                assert (tmp_path / "chat.png").stat().st_size > 10_000
    finally:
        await server.close()
