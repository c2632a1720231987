"""The built-in demo, derived from the dialect registry: one demo backend per dialect, and a
gateway config that puts each client dialect in front of another dialect's backend, so that
every answer is translated.

Backend ``i`` (in registry order) listens on ``DEMO_BASE_PORT + i`` at its dialect's
``default_path`` (each backend has its own port, so two dialects may suggest one path); the
gateway's routes are at each dialect's suggested path too, unless an earlier dialect took it
(:func:`gateway.route_paths.distinct_paths`). A backend answers a short streamed answer with
citations and session state through the gateway's own dialect module, so each one is a
faithful example of its wire format. The curl lines the demo prints are each dialect's own
sample request (``samples/<dialect>/``).
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientConnectionResetError, web

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    StreamEvent,
    TextDelta,
    Usage,
)
from gateway.dialects import DIALECTS, Dialect, client_path, get, routes_by_prefix
from gateway.dialects.base import text_of
from gateway.errors import ParseError
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response, parse_body, render_body
from gateway.route_paths import distinct_paths

__all__ = ["DEMO_BASE_PORT", "TOKEN_DELAY", "curl_commands", "demo_backend_app", "demo_backends",
           "demo_config", "is_page_route", "page_dialects", "page_of", "page_urls",
           "start_demo_backends"]

DEMO_BASE_PORT = 9001
TOKEN_DELAY = 0.04
"""Seconds between a demo stream's tokens: paced like a model, so a stream shows as one."""


def demo_backends(host: str = "127.0.0.1") -> dict[str, tuple[int, str]]:
    """Each registered dialect's demo backend: ``name -> (port, path)``."""
    return {name: (DEMO_BASE_PORT + i, d.default_path)
            for i, (name, d) in enumerate(DIALECTS.items())}


def demo_config(host: str = "127.0.0.1", port: int = 8080) -> dict[str, Any]:
    """The demo's gateway config (as parsed YAML): every dialect's backend as an upstream named
    after its dialect, and a route per client dialect at its ``default_path`` (or, when an
    earlier dialect suggests the same path, under a prefix named after it), sent to the next
    dialect's backend. ``chat-gateway demo --print-config`` writes it out."""
    backends = demo_backends(host)
    names = list(backends)
    upstreams = {name: {"dialect": name, "url": f"http://{host}:{p}{path}",
                        "model": "demo-model"}
                 for name, (p, path) in backends.items()}
    paths = distinct_paths(names)
    routes = []
    for i, name in enumerate(names):
        target = names[(i + 1) % len(names)] if len(names) > 1 else name
        routes.append({"path": paths[name], "dialect": name, "upstream": target})
    for page in page_dialects():
        # the page's own routes, one to each backend: its list of backends to switch between
        routes += [{"path": f"{page.default_path}/{name}", "dialect": page.name, "upstream": name}
                   for name in names]
    return {
        "server": {"host": host, "port": port},
        "logging": {"level": "info"},
        # The Chat UI history API (docs/history.md), at an absolute path so that the demo finds
        # its history from any directory; CHAT_GATEWAY_DEMO_HISTORY keeps it elsewhere.
        "history": {"path": "/chat-history", "store": "sqlite:///${CHAT_GATEWAY_DEMO_HISTORY:-"
                    + str(Path(tempfile.gettempdir()) / "chat-gateway-demo" / "history.db")
                    + "}"},
        # Stored answers of the stateful client APIs (docs/translation.md#stored-responses), so
        # that clients relying on the API's default (``store`` true) run their tool loops.
        "responses_store": {"store": "sqlite:///${CHAT_GATEWAY_DEMO_HISTORY:-"
                            + str(Path(tempfile.gettempdir()) / "chat-gateway-demo"
                                  / "history.db") + "}"},
        "upstreams": upstreams,
        "routes": routes,
    }


def page_of(d: Dialect) -> str | None:
    """A dialect's chat page for the demo (optional ``demo_page``: a file of
    ``gateway/static``, served at ``/static/<it>``), built on its own clients."""
    page = getattr(d, "demo_page", None)
    return page if isinstance(page, str) else None


def page_dialects() -> list[Dialect]:
    """The dialects that ship a chat page for the demo."""
    return [d for d in DIALECTS.values() if page_of(d)]


def page_urls(base: str) -> list[str]:
    return [f"{base}/static/{page_of(d)}" for d in page_dialects()]


def is_page_route(route: Any) -> bool:
    """A route the demo serves for a chat page (one per backend), not a dialect's own."""
    d = get(route.dialect)
    return page_of(d) is not None and route.path.startswith(d.default_path + "/")


def curl_commands(config: Any, base: str) -> list[str]:
    """For each route, its dialect's sample request as a curl line, streamed the way that
    dialect asks for a stream (by path, by ``Accept``, or by ``"stream": true``)."""
    out = []
    for route in config.routes:
        if is_page_route(route):
            continue
        dialect = get(route.dialect)
        body = dict(dialect.samples.requests.get("text") or {"messages": [
            {"role": "user", "content": "What does the gateway do?"}]})
        path, flags = route.path, ["-N"]
        if dialect.stream_path or routes_by_prefix(dialect):  # the path asks for the stream
            path = client_path(dialect, path, "demo-model", stream=True)
        elif dialect.stream_by_accept:
            flags += ["-H", "'Accept: text/event-stream'"]
        else:
            body["stream"] = True
        payload = shlex.quote(orjson.dumps(body).decode())
        out.append(f"# {route.dialect} client -> {route.upstreams[0].name}\n"
                   f"curl {' '.join(flags)} -s {shlex.quote(base + path)} "
                   f"-H 'Content-Type: application/json' -d {payload}")
    return out


def demo_answer(dialect: str, req: ChatRequest) -> ChatResponse:
    question = next((text_of(m.content) for m in reversed(req.messages) if m.role == "user"), "")
    text = (f"Hello from the {dialect} demo backend! You asked: \"{question}\". "
            "The gateway translated your request and is streaming this answer back "
            "in your own dialect [gateway-guide.pdf#page=1].")
    return ChatResponse(
        messages=[AssistantMessage(text)],
        context={
            "data_points": {
                "text": ["gateway-guide.pdf#page=1: The gateway translates chat dialects."],
                "citations": ["gateway-guide.pdf#page=1"],
            },
            "thoughts": [{"title": "Demo", "description": f"answered by the {dialect} demo"}],
            "followup_questions": ["Which dialects does the gateway speak?"],
        },
        session_state=req.session_state if req.session_state is not None else "demo-session-1",
        finish_reason="stop",
        usage=Usage(input_tokens=12, output_tokens=30),
        model=req.model or "demo-model",
    )


def _tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _paced(events: list[StreamEvent]) -> list[StreamEvent]:
    return [piece for e in events for piece in (
        [TextDelta(t, e.agent) for t in _tokens(e.text)] if isinstance(e, TextDelta) else [e])]


def demo_backend_app(dialect_name: str, *, token_delay: float = TOKEN_DELAY) -> web.Application:
    """The demo backend of ``dialect_name``; ``token_delay``: seconds between its stream's
    tokens (a test passes a brief one)."""
    dialect: Dialect = get(dialect_name)
    path = dialect.default_path

    async def answer(request: web.Request, stream_by_path: bool | None) -> web.StreamResponse:
        try:
            req = dialect.parse_request(parse_body(await request.read()))
        except ParseError as e:
            return web.json_response(dialect.render_error(ChatError(400, str(e))), status=400)
        stream = stream_by_path if stream_by_path is not None else (
            req.stream or "text/event-stream" in request.headers.get("Accept", ""))
        whole = demo_answer(dialect_name, req)
        if not stream:
            return web.json_response(body=render_body(dialect, whole, req))
        resp = web.StreamResponse(headers={"Content-Type": dialect.stream_content_type,
                                           "Cache-Control": "no-cache"})
        encoder, frame = dialect.encoder(req), encoder_for(dialect.framing)
        try:
            await resp.prepare(request)
            for event in _paced(events_from_response(whole)):
                for payload in encoder.encode(event):
                    await resp.write(frame(payload))
                await asyncio.sleep(token_delay)
            await resp.write_eof()
        except (ConnectionError, ClientConnectionResetError):
            # The gateway (or a curl) went away: the gateway closes its upstream connection as
            # soon as it has read a stream's end (its [DONE], its completed event), before this
            # backend's last write. Normal: nothing to tell anyone.
            pass
        return resp

    async def whole(request: web.Request) -> web.StreamResponse:
        return await answer(request, False)

    async def streamed(request: web.Request) -> web.StreamResponse:
        return await answer(request, True)

    async def either(request: web.Request) -> web.StreamResponse:
        return await answer(request, None)

    async def targeted(request: web.Request) -> web.StreamResponse:
        asked = dialect.read_target(  # type: ignore[attr-defined]
            request.match_info["tail"], request.method, request.query)
        if asked is None or asked.kind != "chat":
            return web.json_response(dialect.render_error(ChatError(
                404, f"the demo backend has no {request.path}")), status=404)
        return await answer(request, asked.stream)

    app = web.Application()
    if routes_by_prefix(dialect):  # the model and the method follow the path
        app.router.add_post(path.rstrip("/") + "/{tail:.+}", targeted)
    elif dialect.stream_path:
        app.router.add_post(path, whole)
        app.router.add_post(path + dialect.stream_path, streamed)
    else:
        app.router.add_post(path, either)
    return app


async def start_demo_backends(host: str = "127.0.0.1") -> list[web.AppRunner]:
    runners = []
    for name, (port, _) in demo_backends(host).items():
        runner = web.AppRunner(demo_backend_app(name), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        runners.append(runner)
    return runners
