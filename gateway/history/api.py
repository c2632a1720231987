"""The history endpoints (aiohttp handlers, thin): the Chat UI spec's History API plus the
spellings the Chat UI app uses. See docs/history.md.

    GET    {path}?mode=standard|multiAgent&limit=&before=   chat summaries, newest first
    POST   {path}                      {"mode", "title"} -> the new chat's summary
    GET    {path}/{chatId}             the chat's summary
    PUT    {path}/{chatId}             {"messages": [...]} (the app's spelling of the next one)
    DELETE {path}/{chatId}[?mode=]     {"success": true}
    GET    {path}/{chatId}/messages?limit=&before=   the messages, in order
    PUT    {path}/{chatId}/messages    {"messages": [...]}: appended, or replaced in place by key

Every error body is ``{"error": {"message", "code", "param"?}, "message"}`` (the app shows the
top-level ``message``). With ``auth.api_keys``, each key sees only the chats made with it; a chat
of another key is 404, exactly like a chat that does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import ValidationError

from gateway.auth import accepted_key
from gateway.config import HistoryConfig
from gateway.history.keys import HISTORY
from gateway.history.models import (
    MODES,
    CreateChat,
    Mode,
    PutMessages,
    content_text,
    first_problem,
)
from gateway.history.store import (
    ChatSummary,
    HistoryStore,
    NewMessage,
    StoreUnavailable,
    UnknownCursor,
)
from gateway.keys import LOG, RUNTIME

__all__ = ["CHATS_LIMIT", "CHATS_LIMIT_MAX", "MESSAGES_LIMIT_MAX", "RETRY_AFTER", "add_history"]

CHATS_LIMIT = 100
"""Chats per page of ``GET {path}`` when the client names no ``limit``."""
CHATS_LIMIT_MAX = 1000
MESSAGES_LIMIT_MAX = 10_000
"""``GET {path}/{chatId}/messages`` answers every message unless the client names a limit."""
RETRY_AFTER = 5
_JSON = "application/json"

M = TypeVar("M", CreateChat, PutMessages)
Operation = Callable[[web.Request, HistoryStore, str], Awaitable[web.Response]]


class _Refused(Exception):
    def __init__(self, response: web.Response) -> None:
        self.response = response


def add_history(app: web.Application, config: HistoryConfig) -> None:
    """Serve the history API under ``config.path``; the store opens and closes with the app.
    Register before any catch-all route."""
    async def store_ctx(app: web.Application) -> AsyncIterator[None]:
        store = HistoryStore(config, app[LOG])
        try:
            await store.start()
        except BaseException:
            await store.close()
            raise
        app[HISTORY] = store
        watch = asyncio.create_task(store.watch())
        yield
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await store.close()

    app.cleanup_ctx.append(store_ctx)
    base = config.path
    for path, table in ((base, _CHATS), (base + "/", _CHATS), (base + "/{chat_id}", _CHAT),
                        (base + "/{chat_id}/messages", _MESSAGES)):
        app.router.add_route("*", path, _handler(base, table))


def _handler(route: str, table: dict[str, Operation]) -> Callable[
        [web.Request], Awaitable[web.StreamResponse]]:
    allow = ", ".join([*table, "OPTIONS"])

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        rid = request.headers.get("X-Request-ID", "")
        if not (rid and len(rid) <= 128 and rid.isascii() and rid.isprintable()):
            rid = os.urandom(16).hex()
        response = await _serve(request, table, allow)
        response.headers["X-Request-ID"] = rid
        request.app[LOG].info("access", request_id=rid, route=route, method=request.method,
                              path=request.path, status=response.status,
                              duration_ms=round((time.perf_counter() - started) * 1000, 2))
        return response
    return handle


async def _serve(request: web.Request, table: dict[str, Operation],
                 allow: str) -> web.Response:
    if request.method == "OPTIONS":  # a CORS preflight: never asks for a key
        return web.Response(status=204, headers={"Allow": allow})
    op = table.get(request.method)
    if op is None:
        return _error(405, f"{request.method} is not allowed here; use {allow}",
                      "METHOD_NOT_ALLOWED", headers={"Allow": allow})
    owner = _owner(request)
    if owner is None:
        return _error(401, "a valid API key is required", "UNAUTHORIZED")
    try:
        return await op(request, request.app[HISTORY], owner)
    except _Refused as e:
        return e.response
    except UnknownCursor as e:
        return _error(400, f"before: {e}", "INVALID_REQUEST", param="before")
    except StoreUnavailable:
        return _error(503, "the history store is unavailable; try again later",
                      "STORE_UNAVAILABLE", headers={"Retry-After": str(RETRY_AFTER)})


# --- the operations -------------------------------------------------------------------------

async def _list(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    chats = await store.list_chats(owner, _mode(request), _limit(request, CHATS_LIMIT,
                                                                  CHATS_LIMIT_MAX),
                                   request.query.get("before"))
    return _json([_summary(c) for c in chats])


async def _create(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    body = _validate(CreateChat, await _read_json(request))
    return _json(_summary(await store.create_chat(owner, body.mode, body.title)))


async def _get(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    chat = await store.get_chat(owner, request.match_info["chat_id"])
    if chat is None:
        raise _Refused(_no_chat(request))
    return _json(_summary(chat))


async def _put(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    data = await _read_json(request)
    body = _validate(PutMessages, data)
    batch = [NewMessage(k.key, orjson.dumps(m).decode(), content_text(m))
             for k, m in zip(body.messages, data["messages"], strict=True)]
    chat = await store.put_messages(owner, request.match_info["chat_id"], batch)
    if chat is None:
        raise _Refused(_no_chat(request))
    return _json(_summary(chat))


async def _delete(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    if "mode" in request.query:
        _mode(request)  # the app names the list it deletes from: checked, not needed
    if not await store.delete_chat(owner, request.match_info["chat_id"]):
        raise _Refused(_no_chat(request))
    return _json({"success": True})


async def _messages(request: web.Request, store: HistoryStore, owner: str) -> web.Response:
    limit = _limit(request, None, MESSAGES_LIMIT_MAX) if "limit" in request.query else None
    bodies = await store.messages(owner, request.match_info["chat_id"], limit,
                                  request.query.get("before"))
    if bodies is None:
        raise _Refused(_no_chat(request))
    # Stored as JSON text: the answer is their concatenation, nothing parsed again.
    return web.Response(body=("[" + ",".join(bodies) + "]").encode(), content_type=_JSON)


_CHATS: dict[str, Operation] = {"GET": _list, "POST": _create}
_CHAT: dict[str, Operation] = {"GET": _get, "PUT": _put, "DELETE": _delete}
_MESSAGES: dict[str, Operation] = {"GET": _messages, "PUT": _put}


# --- reading the request --------------------------------------------------------------------

def _owner(request: web.Request) -> str | None:
    """``''`` when the gateway has no keys; else the SHA-256 of the client's key (the store
    never sees a key); ``None``: no valid key."""
    keys = request.app[RUNTIME].current.config.auth.accepted_keys
    if not keys:
        return ""
    key = accepted_key(request, keys)
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


def _mode(request: web.Request) -> Mode:
    mode = request.query.get("mode", "standard")
    if mode not in MODES:
        raise _Refused(_error(400, f"mode: must be one of {', '.join(MODES)}, not {mode!r}",
                              "INVALID_REQUEST", param="mode"))
    return mode  # type: ignore[return-value]  # checked against the Literal's values


def _limit(request: web.Request, default: int | None, most: int) -> int:
    raw = request.query.get("limit")
    if raw is None and default is not None:
        return default
    try:
        limit = int(raw or "")
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise _Refused(_error(400, f"limit: must be a whole number from 1 to {most}",
                              "INVALID_REQUEST", param="limit"))
    return limit


async def _read_json(request: web.Request) -> Any:
    limit = request.app[RUNTIME].current.config.server.max_body_bytes
    too_large = _error(413, f"the request body is over {limit} bytes", "PAYLOAD_TOO_LARGE")
    if request.content_length is not None and request.content_length > limit:
        raise _Refused(too_large)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _Refused(too_large) from None
    if len(raw) > limit:  # a reload may have lowered the limit below the app's own
        raise _Refused(too_large)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _Refused(_error(400, f"body: not valid JSON ({e.msg})", "INVALID_JSON",
                              param="body")) from None


def _validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        where, what = first_problem(e)
        raise _Refused(_error(400, f"{where}: {what}", "INVALID_REQUEST", param=where)) from None


# --- writing the answer ---------------------------------------------------------------------

def _summary(chat: ChatSummary) -> dict[str, Any]:
    return {"id": chat.id, "title": chat.title, "lastMessage": chat.last_message,
            "lastUpdated": _iso(chat.updated_us), "messageCount": chat.message_count,
            "mode": chat.mode}


def _iso(us: int) -> str:
    t = datetime.fromtimestamp(us / 1_000_000, UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON)


def _no_chat(request: web.Request) -> web.Response:
    return _error(404, f"no chat {request.match_info['chat_id'][:100]!r}", "NOT_FOUND")


def _error(status: int, message: str, code: str, *, param: str | None = None,
           headers: dict[str, str] | None = None) -> web.Response:
    err: dict[str, str] = {"message": message, "code": code}
    if param is not None:
        err["param"] = param
    return web.Response(status=status, headers=headers, content_type=_JSON,
                        body=orjson.dumps({"error": err, "message": message}))
