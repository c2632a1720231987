"""The history API, end to end through the gateway app, on SQLite and on a real PostgreSQL
(the ``store`` fixture runs every test here on both): the spec's example payloads, the Chat UI
app's own calls, paging, who sees what, CORS, bad input and a failing store."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from fakes import eventually
from history_support import SUMMARY_KEYS, StoreUnderTest, assert_error, gateway_config

from gateway.app import create_app
from gateway.config import parse_config
from gateway.history.keys import HISTORY
from gateway.history.store import NewMessage

Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]
H = "/chat-history"
JSON = {"Content-Type": "application/json"}  # what the Chat UI app sends on every call

# The spec's examples (specs/chat-ui-api-formats.md, "History API").
SPEC_CREATE = {"mode": "standard", "title": "New Chat"}
SPEC_MESSAGES = [
    {"messageId": "msg-125", "conversationId": "chat-123", "status": "completed",
     "role": "user", "content": "Can you explain how to use the API?", "contentType": "text",
     "sources": [], "error": None, "createdAt": "2023-04-07T11:30:00.000Z"},
    {"messageId": "msg-126", "conversationId": "chat-123", "status": "completed",
     "role": "assistant", "content": "Sure, the API has two main endpoints...",
     "contentType": "text", "sources": [], "error": None,
     "createdAt": "2023-04-07T11:31:00.000Z"},
]


@pytest.fixture
def make_client(aiohttp_client: Any, store: StoreUnderTest) -> MakeClient:
    async def make(**overrides: Any) -> Client:
        config = parse_config(gateway_config(store.url, **overrides), env={})
        client: Client = await aiohttp_client(create_app(config))
        return client
    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()


async def create(client: Client, mode: str = "standard", title: str = "New Chat",
                 **headers: str) -> dict[str, Any]:
    resp = await client.post(H, json={"mode": mode, "title": title}, headers={**JSON, **headers})
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def put(client: Client, chat_id: str, messages: list[Any], *, app_spelling: bool = False,
              **headers: str) -> dict[str, Any]:
    path = f"{H}/{chat_id}" if app_spelling else f"{H}/{chat_id}/messages"
    resp = await client.put(path, json={"messages": messages}, headers={**JSON, **headers})
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def messages(client: Client, chat_id: str, query: str = "", **headers: str) -> Any:
    resp = await client.get(f"{H}/{chat_id}/messages{query}", headers={**JSON, **headers})
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


async def listing(client: Client, query: str = "?mode=standard", **headers: str) -> Any:
    resp = await client.get(H + query, headers={**JSON, **headers})
    assert resp.status == 200, await resp.text()
    return await resp.json()


# --- the spec's endpoints with the spec's payloads ------------------------------------------


async def test_spec_examples_round_trip(client: Client) -> None:
    new = await create(client, **{})
    assert set(new) == SUMMARY_KEYS
    assert new["title"] == "New Chat" and new["messageCount"] == 0 and new["mode"] == "standard"
    assert new["lastUpdated"].endswith("Z")

    updated = await put(client, new["id"], SPEC_MESSAGES)
    assert set(updated) == SUMMARY_KEYS
    assert updated["id"] == new["id"] and updated["messageCount"] == 2
    assert updated["lastMessage"] == "Sure, the API has two main endpoints..."
    assert updated["lastUpdated"] >= new["lastUpdated"]

    assert await messages(client, new["id"]) == SPEC_MESSAGES  # every field, in order

    listed = await listing(client)
    assert listed == [updated]

    resp = await client.delete(f"{H}/{new['id']}", headers=JSON)
    assert resp.status == 200 and await resp.json() == {"success": True}
    await assert_error(await client.get(f"{H}/{new['id']}/messages"), 404, "NOT_FOUND")
    assert await listing(client) == []


async def test_every_answer_is_json(client: Client) -> None:
    chat = await create(client)
    for resp in (await client.get(H + "?mode=standard"), await client.get(f"{H}/{chat['id']}"),
                 await client.get(f"{H}/{chat['id']}/messages")):
        assert resp.status == 200 and resp.content_type == "application/json"


async def test_trailing_slash_and_default_mode(client: Client) -> None:
    chat = await create(client)
    assert [c["id"] for c in await listing(client, "/")] == [chat["id"]]
    assert [c["id"] for c in await listing(client, "")] == [chat["id"]]


async def test_get_chat_summary(client: Client) -> None:
    chat = await create(client, title="Project Planning")
    await put(client, chat["id"], SPEC_MESSAGES[:1])
    resp = await client.get(f"{H}/{chat['id']}")
    got = await resp.json()
    assert got["title"] == "Project Planning" and got["messageCount"] == 1


# --- the Chat UI app's calls -----------------------------------------------------------------


def ui(i: int, role: str, content: str, **extra: Any) -> dict[str, Any]:
    """A message as the Chat UI app keeps it (and PUTs it)."""
    return {"id": f"ui-{i}", "role": role, "content": content,
            "timestamp": f"2026-11-01T10:00:0{i}.000Z", **extra}


async def test_app_puts_the_whole_chat_each_time(client: Client) -> None:
    chat = await create(client)
    turn1 = [ui(1, "user", "Hi"), ui(2, "assistant", "Hello!", agentName="Research")]
    await put(client, chat["id"], turn1, app_spelling=True)
    turn2 = [*turn1, ui(3, "user", "More?"),
             ui(4, "assistant", "Yes", toolCall=[{"id": "t1", "functionName": "f"}]),
             ui(5, "tool", "42", toolCallId="t1")]
    summary = await put(client, chat["id"], turn2, app_spelling=True)
    assert summary["messageCount"] == 5 and summary["lastMessage"] == "42"
    assert await messages(client, chat["id"]) == turn2  # never duplicated, stored as sent

    # The app edits a message it had (a streamed answer's final text): replaced in place.
    turn2[1] = ui(2, "assistant", "Hello again!", agentName="Research")
    summary = await put(client, chat["id"], turn2, app_spelling=True)
    assert summary["messageCount"] == 5 and summary["lastMessage"] == "42"
    assert await messages(client, chat["id"]) == turn2

    resp = await client.delete(f"{H}/{chat['id']}?mode=standard", headers=JSON)
    assert await resp.json() == {"success": True}
    await assert_error(await client.get(f"{H}/{chat['id']}"), 404, "NOT_FOUND")


async def test_a_retried_put_never_duplicates(client: Client) -> None:
    chat = await create(client)
    first = await put(client, chat["id"], SPEC_MESSAGES)
    again = await put(client, chat["id"], SPEC_MESSAGES)
    assert again == first  # nothing changed, not even lastUpdated (the list order holds)
    assert await messages(client, chat["id"]) == SPEC_MESSAGES
    assert len(await messages(client, chat["id"])) == 2


async def test_message_id_is_the_key_before_id(client: Client) -> None:
    chat = await create(client)
    await put(client, chat["id"], [{"messageId": "m", "id": "x", "content": "1"}])
    await put(client, chat["id"], [{"messageId": "m", "id": "y", "content": "2"}])  # replaces
    await put(client, chat["id"], [{"id": "x", "content": "3"}])  # another key: appended
    assert await messages(client, chat["id"]) == [
        {"messageId": "m", "id": "y", "content": "2"}, {"id": "x", "content": "3"}]


async def test_a_key_twice_in_one_put_keeps_its_first_place_and_last_body(
        client: Client) -> None:
    chat = await create(client)
    summary = await put(client, chat["id"], [{"id": "a", "content": "1"}, {"id": "b"},
                                             {"id": "a", "content": "2"}])
    assert summary["messageCount"] == 2
    assert await messages(client, chat["id"]) == [{"id": "a", "content": "2"}, {"id": "b"}]


async def test_messages_are_stored_verbatim_whatever_their_shape(client: Client) -> None:
    odd = {"zeta": 1, "id": "odd-1", "alpha": [1.5, -0.0, None, True, "ü€😀\u0000\n"],
           "nested": {"b": {"c": []}, "a": 10**18}, "content": [{"type": "text", "text": "hi"}]}
    chat = await create(client)
    summary = await put(client, chat["id"], [odd])
    assert summary["lastMessage"] == "hi"  # the text parts of a list content
    got = await messages(client, chat["id"])
    assert got == [odd] and list(got[0]) == list(odd)  # same fields, same order


async def test_large_chat_put_whole_again(client: Client) -> None:
    """More keys than one IN (...) holds: the whole chat PUT again still never duplicates."""
    chat = await create(client)
    many = [{"id": f"k{i}", "content": f"m{i}"} for i in range(1200)]
    assert (await put(client, chat["id"], many))["messageCount"] == 1200
    many[700]["content"] = "edited"
    many.append({"id": "k-last", "content": "last"})
    summary = await put(client, chat["id"], many, app_spelling=True)
    assert summary["messageCount"] == 1201 and summary["lastMessage"] == "last"
    assert await messages(client, chat["id"]) == many


# --- lists: modes, order, paging -------------------------------------------------------------


async def test_modes_keep_separate_lists(client: Client) -> None:
    standard = await create(client, "standard")
    multi = await create(client, "multiAgent", "Agents")
    assert multi["mode"] == "multiAgent"
    assert [c["id"] for c in await listing(client, "?mode=standard")] == [standard["id"]]
    assert [c["id"] for c in await listing(client, "?mode=multiAgent")] == [multi["id"]]


async def test_newest_first_and_paging(client: Client) -> None:
    ids = [(await create(client, title=f"c{i}"))["id"] for i in range(5)]
    assert [c["id"] for c in await listing(client)] == ids[::-1]
    await put(client, ids[1], [{"id": "x", "content": "bump"}])  # updated: now the newest
    order = [ids[1], ids[4], ids[3], ids[2], ids[0]]
    assert [c["id"] for c in await listing(client)] == order
    pages: list[str] = []
    query = "?mode=standard&limit=2"
    while True:
        page = await listing(client, query)
        assert len(page) <= 2
        if not page:
            break
        pages += [c["id"] for c in page]
        query = f"?mode=standard&limit=2&before={page[-1]['id']}"
    assert pages == order


async def test_message_paging(client: Client) -> None:
    chat = await create(client)
    msgs = [{"messageId": f"m{i}", "content": str(i)} for i in range(10)]
    await put(client, chat["id"], msgs)
    assert await messages(client, chat["id"], "?limit=3") == msgs[7:]
    assert await messages(client, chat["id"], "?limit=3&before=m7") == msgs[4:7]
    assert await messages(client, chat["id"], "?before=m2") == msgs[:2]
    assert await messages(client, chat["id"], "?limit=3&before=m0") == []


@pytest.mark.parametrize("query", ["?limit=0", "?limit=-1", "?limit=abc", "?limit=1001",
                                   "?limit="])
async def test_bad_limit_is_400(client: Client, query: str) -> None:
    await assert_error(await client.get(H + query), 400, "INVALID_REQUEST", "limit")


async def test_unknown_cursor_is_400(client: Client) -> None:
    chat = await create(client)
    await assert_error(await client.get(H + "?before=nope"), 400, "INVALID_REQUEST", "before")
    await assert_error(await client.get(f"{H}/{chat['id']}/messages?before=nope"), 400,
                       "INVALID_REQUEST", "before")
    await assert_error(await client.get(f"{H}/{chat['id']}/messages?limit=0"), 400,
                       "INVALID_REQUEST", "limit")


# --- errors ----------------------------------------------------------------------------------


async def test_unknown_chat_is_404_everywhere(client: Client) -> None:
    for method, path, body in [
            ("GET", f"{H}/nope/messages", None), ("GET", f"{H}/nope", None),
            ("PUT", f"{H}/nope/messages", {"messages": []}),
            ("PUT", f"{H}/nope", {"messages": [{"id": "a"}]}),
            ("DELETE", f"{H}/nope", None), ("DELETE", f"{H}/nope?mode=multiAgent", None)]:
        resp = await client.request(method, path, json=body, headers=JSON)
        await assert_error(resp, 404, "NOT_FOUND")


@pytest.mark.parametrize(("method", "where", "body", "param"), [
    ("PUT", "messages", b"{bad", "body"),
    ("PUT", "messages", b"", "body"),
    ("PUT", "messages", b"[]", "body"),
    ("PUT", "messages", b"{}", "messages"),
    ("PUT", "messages", b'{"messages": "x"}', "messages"),
    ("PUT", "messages", b'{"messages": [1]}', "messages[0]"),
    ("PUT", "messages", b'{"messages": [{"id": "a"}, {"id": 5}]}', "messages[1].id"),
    ("PUT", "messages", b'{"messages": [{"role": "user"}]}', "messages[0]"),
    ("PUT", "chat", b'{"messages": [{"messageId": ""}]}', "messages[0].messageId"),
    ("PUT", "chat", b'{"messages": [{"messageId": "' + b"x" * 256 + b'"}]}',
     "messages[0].messageId"),
    ("POST", "list", b'{"mode": "solo"}', "mode"),
    ("POST", "list", b'{"title": 5}', "title"),
    ("POST", "list", b'"New Chat"', "body"),
])
async def test_bad_body_is_400_naming_the_field(client: Client, method: str, where: str,
                                                body: bytes, param: str) -> None:
    chat = await create(client)
    path = {"list": H, "chat": f"{H}/{chat['id']}", "messages": f"{H}/{chat['id']}/messages"}
    resp = await client.request(method, path[where], data=body, headers=JSON)
    error = await assert_error(resp, 400, "INVALID_JSON" if param == "body" and method == "PUT"
                               and body in (b"{bad", b"") else "INVALID_REQUEST", param)
    assert error["message"].startswith(param)
    assert (await listing(client))[0]["messageCount"] == 0  # nothing stored


@pytest.mark.parametrize("path", [H + "?mode=single", f"{H}/x?mode=single"])
async def test_unknown_mode_is_400(client: Client, path: str) -> None:
    method = "GET" if path.startswith(H + "?") else "DELETE"
    await assert_error(await client.request(method, path), 400, "INVALID_REQUEST", "mode")


async def test_oversized_body_is_413(make_client: MakeClient) -> None:
    client = await make_client(server={"max_body_bytes": 2000})
    chat = await create(client)
    big = {"messages": [{"id": "a", "content": "x" * 3000}]}
    for path in (f"{H}/{chat['id']}/messages", f"{H}/{chat['id']}"):
        await assert_error(await client.put(path, json=big), 413, "PAYLOAD_TOO_LARGE")
    chunked = client.put(f"{H}/{chat['id']}", data=_chunks(orjson.dumps(big)))  # no length
    await assert_error(await chunked, 413, "PAYLOAD_TOO_LARGE")
    await assert_error(await client.post(H, json={"title": "t" * 3000}), 413,
                       "PAYLOAD_TOO_LARGE")
    assert await messages(client, chat["id"]) == []


async def _chunks(data: bytes) -> Any:
    for i in range(0, len(data), 500):
        yield data[i:i + 500]


async def test_wrong_method_is_405_with_allow(client: Client) -> None:
    for path, allow in ((H, "GET, POST, OPTIONS"), (f"{H}/x", "GET, PUT, DELETE, OPTIONS"),
                        (f"{H}/x/messages", "GET, PUT, OPTIONS")):
        resp = await client.patch(path, json={})
        await assert_error(resp, 405, "METHOD_NOT_ALLOWED")
        assert resp.headers["Allow"] == allow


async def test_a_put_is_one_transaction(client: Client, store: StoreUnderTest) -> None:
    """A statement fails half-way through a PUT (a trigger refuses one message): the client
    gets 503 and nothing of that PUT is stored; the store is used again as soon as it works."""
    chat = await create(client)
    await put(client, chat["id"], [{"id": "before", "content": "kept"}])
    if store.kind == "sqlite":
        store.sql("CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.body LIKE '%boom%' "
                  "BEGIN SELECT RAISE(ABORT, 'boom'); END")
    else:
        store.sql("CREATE FUNCTION boom() RETURNS trigger AS $$ BEGIN IF NEW.body LIKE "
                  "'%boom%' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$ "
                  "LANGUAGE plpgsql")
        store.sql("CREATE TRIGGER boom BEFORE INSERT ON messages FOR EACH ROW "
                  "EXECUTE FUNCTION boom()")
    batch = [{"id": "before", "content": "changed"}, {"id": "fine", "content": "ok"},
             {"id": "bad", "content": "boom"}]
    resp = await client.put(f"{H}/{chat['id']}/messages", json={"messages": batch})
    body = await assert_error(resp, 503, "STORE_UNAVAILABLE")
    assert resp.headers["Retry-After"] == "5"
    assert "boom" not in orjson.dumps(body).decode() and "Traceback" not in await resp.text()
    assert await messages(client, chat["id"]) == [{"id": "before", "content": "kept"}]
    summary = (await listing(client))[0]
    assert summary["messageCount"] == 1 and summary["lastMessage"] == "kept"
    assert (await put(client, chat["id"], batch[:2]))["messageCount"] == 2


async def test_a_client_that_leaves_does_not_cut_a_put(client: Client) -> None:
    store = client.app[HISTORY]
    chat = await create(client)
    task = asyncio.create_task(store.put_messages("", chat["id"], [
        NewMessage(f"k{i}", orjson.dumps({"id": f"k{i}"}).decode(), "") for i in range(50)]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def stored() -> bool:
        got = await messages(client, chat["id"])
        assert len(got) in (0, 50)  # never half of it
        return len(got) == 50
    await eventually(stored)


# --- who sees what ---------------------------------------------------------------------------

KEY_A, KEY_B = "key-alpha-0123456789", "key-bravo-9876543210"


async def test_each_key_sees_only_its_chats(make_client: MakeClient,
                                            store: StoreUnderTest) -> None:
    client = await make_client(auth={"api_keys": [KEY_A, KEY_B]})
    a = {"Authorization": f"Bearer {KEY_A}"}
    b = {"api-key": KEY_B}
    for method, path in (("GET", H), ("POST", H), ("GET", f"{H}/x/messages"),
                         ("PUT", f"{H}/x"), ("DELETE", f"{H}/x")):
        await assert_error(await client.request(method, path, json={}), 401, "UNAUTHORIZED")
        await assert_error(await client.request(method, path, json={},
                                                headers={"api-key": "wrong"}),
                           401, "UNAUTHORIZED")
    chat = await create(client, **a)
    await put(client, chat["id"], SPEC_MESSAGES, **a)
    mine = await create(client, "standard", "B's", **b)

    assert [c["id"] for c in await listing(client, **a)] == [chat["id"]]
    assert [c["id"] for c in await listing(client, **b)] == [mine["id"]]
    for method, path, body in (("GET", f"{H}/{chat['id']}/messages", None),
                               ("GET", f"{H}/{chat['id']}", None),
                               ("PUT", f"{H}/{chat['id']}/messages", {"messages": []}),
                               ("PUT", f"{H}/{chat['id']}", {"messages": [{"id": "x"}]}),
                               ("DELETE", f"{H}/{chat['id']}", None)):
        resp = await client.request(method, path, json=body, headers={**JSON, **b})
        text = await resp.text()
        await assert_error(resp, 404, "NOT_FOUND")  # never 403, never its data
        assert "Sure, the API" not in text
    assert await messages(client, chat["id"], **a) == SPEC_MESSAGES  # untouched by B

    owners = {row[0] for row in store.sql("SELECT owner FROM chats")}
    assert owners == {hashlib.sha256(k.encode()).hexdigest() for k in (KEY_A, KEY_B)}
    dump = "".join("".join(r) for t in ("chats", "messages")
                   for r in store.sql(f"SELECT * FROM {t}"))
    assert KEY_A not in dump and KEY_B not in dump  # a hash of the key, never the key


async def test_cors_covers_the_history_preflight_included(make_client: MakeClient) -> None:
    origin = "http://chat.example"
    client = await make_client(server={"cors": {"allow_origins": [origin]}})
    chat = await create(client)
    for path, method in ((H, "POST"), (H, "GET"), (f"{H}/{chat['id']}", "PUT"),
                         (f"{H}/{chat['id']}", "DELETE"), (f"{H}/{chat['id']}/messages", "GET")):
        resp = await client.options(path, headers={
            "Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type"})
        assert resp.status == 204, await resp.text()
        assert resp.headers["Access-Control-Allow-Origin"] == origin
        assert method in resp.headers["Access-Control-Allow-Methods"].split(", ")
        assert "content-type" in resp.headers["Access-Control-Allow-Headers"].lower()
    resp = await client.put(f"{H}/{chat['id']}", json={"messages": [{"id": "a"}]},
                            headers={**JSON, "Origin": origin})
    assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == origin
    resp = await client.get(f"{H}/nope/messages", headers={"Origin": origin})
    assert resp.status == 404 and resp.headers["Access-Control-Allow-Origin"] == origin
    resp = await client.get(H, headers={"Origin": "http://elsewhere.example"})
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_preflight_needs_no_key(make_client: MakeClient) -> None:
    client = await make_client(auth={"api_keys": [KEY_A]},
                               server={"cors": {"allow_origins": ["*"]}})
    resp = await client.options(H, headers={"Origin": "http://x",
                                            "Access-Control-Request-Method": "POST"})
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "*"


# --- the store in /readyz and /api/status ----------------------------------------------------


async def test_readyz_and_status_report_the_store(client: Client,
                                                  store: StoreUnderTest) -> None:
    ready = await client.get("/readyz")
    assert ready.status == 200
    body = await ready.json()
    expected = store.url.replace(":s3cret-pw", "")
    assert body["history"] == {"store": expected, "healthy": True}
    status = await (await client.get("/api/status")).json()
    assert status["history"] == {"store": expected, "healthy": True}
    assert "s3cret" not in orjson.dumps([body, status]).decode()
