"""The history's config, schema migrations and life cycle: what ``check`` refuses, the schema
made and kept at start, a newer schema refused, the store down (chat routes keep serving) and
back, and nothing left open at shutdown. On SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fakes import Fakes, client_request, eventually, free_port, upstream_config
from history_support import (
    ROUTE_DIALECT,
    UPSTREAM_DIALECT,
    StoreUnderTest,
    assert_error,
    gateway_config,
)
from pg import PostgresServer
from structlog.testing import capture_logs

from gateway.app import create_app
from gateway.cli import main
from gateway.config import HistoryConfig, parse_config
from gateway.errors import ConfigError
from gateway.history.keys import HISTORY
from gateway.history.migrate import HEAD, SchemaError
from gateway.history.schema import metadata
from gateway.history.store import HistoryStore
from gateway.log import get_logger

H = "/chat-history"


# --- config ----------------------------------------------------------------------------------


def _problems(data: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_config(data, env=env or {})
    return dict(e.value.problems)


def test_history_section_defaults() -> None:
    config = parse_config({**gateway_config("x"), "history": {}}, env={})
    assert config.history == HistoryConfig(path="/chat-history",
                                           store="sqlite:///data/history.db", pool_size=5)
    assert parse_config({**gateway_config("x"), "history": None}, env={}).history is None
    no_history = gateway_config("x")
    del no_history["history"]
    assert parse_config(no_history, env={}).history is None


@pytest.mark.parametrize(("history", "where", "says"), [
    ({"path": "/api/chat"}, "history.path", "routes[0]"),
    ({"path": "/api"}, "history.path", "routes[0]"),
    ({"path": "/metrics"}, "history.path", "served by the gateway"),
    ({"path": "/api/status"}, "history.path", "served by the gateway"),
    ({"path": "/admin"}, "history.path", "/admin/reload"),
    ({"path": "/"}, "history.path", "must be a path"),
    ({"path": "chat-history"}, "history.path", "must be a path"),
    ({"path": "/chat/{id}"}, "history.path", "must be a path"),
    ({"store": "mysql://u@h/db"}, "history.store", "unsupported store"),
    ({"store": "sqlite://"}, "history.store", "file path"),
    ({"store": "sqlite:///:memory:"}, "history.store", "file path"),
    ({"store": "postgresql://u:p@h:5432"}, "history.store", "names its database"),
    ({"store": "not a url"}, "history.store", "not a database URL"),
    ({"pool_size": 0}, "history.pool_size", "greater than or equal to 1"),
    ({"size": 3}, "history.size", "unknown key"),
])
def test_check_refuses_bad_history(history: dict[str, Any], where: str, says: str) -> None:
    data = gateway_config("sqlite:///h.db", history=history)
    problems = _problems(data)
    assert where in problems, problems
    assert says in problems[where], problems


def test_a_route_under_the_history_path_is_refused() -> None:
    data = gateway_config("sqlite:///h.db")
    data["routes"].append({"path": "/chat-history/ask", "dialect": ROUTE_DIALECT,
                           "upstream": "llm"})
    assert "routes[1]" in _problems(data)["history.path"]


def test_store_url_takes_secrets_from_the_environment() -> None:
    data = gateway_config("postgresql://gw:${PG_PASSWORD}@db:5432/history")
    config = parse_config(data, env={"PG_PASSWORD": "pw"})
    assert config.history is not None
    assert config.history.store == "postgresql://gw:pw@db:5432/history"
    assert _problems(data)["history.store"] == "environment variable PG_PASSWORD is not set"


def test_cli_check_names_the_bad_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    path = tmp_path / "gw.yaml"
    path.write_bytes(orjson.dumps(gateway_config("oracle://x/y")))
    assert main(["check", "--config", str(path)]) == 1
    assert "history.store: unsupported store 'oracle'" in capsys.readouterr().err
    path.write_bytes(orjson.dumps(gateway_config(f"sqlite:///{tmp_path}/h.db")))
    assert main(["check", "--config", str(path)]) == 0


async def test_no_history_section_no_history_endpoints(aiohttp_client: Any) -> None:
    data = gateway_config("x")
    del data["history"]
    client = await aiohttp_client(create_app(parse_config(data, env={})))
    resp = await client.get(H + "?mode=standard")
    assert resp.status == 404
    assert "history" not in await (await client.get("/readyz")).json()
    assert HISTORY not in client.app


def test_demo_config_serves_history_on_sqlite_from_any_directory() -> None:
    from gateway.demo import demo_config

    config = parse_config(demo_config(), env={})
    assert config.history is not None and config.history.store.startswith("sqlite:////")
    assert Path(config.history.store.removeprefix("sqlite:///")).is_absolute()
    own = parse_config(demo_config(), env={"CHAT_GATEWAY_DEMO_HISTORY": "/srv/h.db"})
    assert own.history is not None and own.history.store == "sqlite:////srv/h.db"


# --- migrations ------------------------------------------------------------------------------


def _store(url: str, **extra: Any) -> HistoryStore:
    return HistoryStore(HistoryConfig(**{"store": url, "timeout": 3, **extra}),
                        get_logger().bind())


async def test_schema_is_created_then_kept(store: StoreUnderTest) -> None:
    first = _store(store.url)
    await first.start()
    assert first.ready and first.healthy
    assert store.sql("SELECT version_num FROM alembic_version") == [(HEAD,)]
    chat = await first.create_chat("", "standard", "kept")
    await first.close()

    again = _store(store.url)
    await again.start()  # the schema is current: nothing to do, nothing lost
    assert [c.id for c in await again.list_chats("", "standard", 10, None)] == [chat.id]
    await again.close()


async def test_tables_match_the_migrations(store: StoreUnderTest) -> None:
    s = _store(store.url)
    await s.start()

    def diff(connection: Any) -> list[Any]:
        return compare_metadata(MigrationContext.configure(connection), metadata)

    assert await s._run(diff, write=False) == []
    await s.close()


# Stores starting at once wait their turn, each as long as its timeout: on a loaded machine one
# may wait behind a stalled one. What these tests guard (two migrating, a refusal that does not
# wait) fails whatever the timeout, so theirs is long.
PATIENT = 30.0


async def test_processes_starting_at_once_migrate_once(store: StoreUnderTest) -> None:
    stores = [_store(store.url, timeout=PATIENT) for _ in range(4)]
    await asyncio.gather(*(s.start() for s in stores))
    assert all(s.ready for s in stores)
    assert store.sql("SELECT version_num FROM alembic_version") == [(HEAD,)]
    for s in stores:
        await s.close()


async def test_new_sqlite_databases_entered_by_processes_at_once(tmp_path: Path) -> None:
    # Entering WAL on a new database is refused at once, without the busy handler, while
    # another process holds a lock: one start in about eight failed so before the store
    # waited for it itself; 25 new databases make missing it unlikely (about 3 %).
    for n in range(25):
        url = f"sqlite:///{tmp_path}/new-{n}.db"
        with capture_logs() as logged:
            stores = [_store(url, timeout=PATIENT) for _ in range(4)]
            await asyncio.gather(*(s.start() for s in stores))
        problems = [e for e in logged if e["log_level"] != "info"]
        assert [s.ready for s in stores] == [True] * 4, f"database {n}: {problems}"
        for s in stores:
            await s.close()


async def test_a_newer_schema_is_refused_never_dropped(store: StoreUnderTest) -> None:
    s = _store(store.url)
    await s.start()
    chat = await s.create_chat("", "standard", "precious")
    await s.close()
    store.sql("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    newer = _store(store.url)
    with pytest.raises(SchemaError, match="9999_from_the_future"):
        await newer.start()
    await newer.close()
    assert store.sql("SELECT id, title FROM chats") == [(chat.id, "precious")]


def test_serve_refuses_a_newer_schema_with_a_clear_message(tmp_path: Path) -> None:
    from history_support import sqlite_store

    store = sqlite_store(tmp_path)
    asyncio.run(_migrated(store.url))
    store.sql("UPDATE alembic_version SET version_num = 'abc123'")
    path = tmp_path / "gw.yaml"
    path.write_bytes(orjson.dumps({**gateway_config(store.url),
                                   "server": {"port": free_port()}}))
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path)],
                         capture_output=True, timeout=60, check=False)
    assert out.returncode == 1
    assert "cannot start: the history database is at schema revision 'abc123'" in \
        out.stderr.decode()
    assert b"Traceback" not in out.stderr


async def _migrated(url: str) -> None:
    s = _store(url)
    await s.start()
    await s.close()


# --- the store down: the chat routes keep serving --------------------------------------------


async def _chat_ok(session: aiohttp.ClientSession, base: str) -> None:
    path, body, headers = client_request(ROUTE_DIALECT, "/api/chat", stream=False, text="hi")
    async with session.post(base + path, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()


async def test_store_down_gives_503_and_chat_keeps_serving(fakes: Fakes) -> None:
    upstream = await fakes.start(UPSTREAM_DIALECT)
    pg = PostgresServer().start()
    try:
        database = pg.new_database()
        data = gateway_config(pg.url(database))
        data["upstreams"]["llm"] = upstream_config(upstream)
        server = TestServer(create_app(parse_config(data, env={})), host="127.0.0.1")
        await server.start_server()
        base = str(server.make_url(""))
        async with aiohttp.ClientSession() as s:
            async with s.post(base + H, json={"title": "survives"}) as r:
                chat = await r.json()
            pg.stop(remove=False)

            for method, path, body in (("GET", H, None), ("POST", H, {}),
                                       ("PUT", f"{H}/{chat['id']}", {"messages": [{"id": "a"}]}),
                                       ("GET", f"{H}/{chat['id']}/messages", None),
                                       ("DELETE", f"{H}/{chat['id']}", None)):
                async with s.request(method, base + path, json=body) as r:
                    await assert_error(r, 503, "STORE_UNAVAILABLE")
                    assert r.headers["Retry-After"] == "5"
                    assert "Traceback" not in await r.text()
            await _chat_ok(s, base)
            async with s.get(base + "/readyz") as r:
                assert r.status == 200
                assert (await r.json())["history"]["healthy"] is False

            pg.start()  # back on the same port: the gateway finds it again by itself

            async def back() -> bool:
                async with s.get(base + "/readyz") as r:
                    return bool((await r.json())["history"]["healthy"])
            await eventually(back, within=20)
            async with s.get(base + H) as r:
                assert r.status == 200
                assert [c["title"] for c in await r.json()] == ["survives"]
        await server.close()
    finally:
        pg.stop()


async def test_store_unreachable_at_start_then_migrated_when_it_comes(fakes: Fakes) -> None:
    upstream = await fakes.start(UPSTREAM_DIALECT)
    pg = PostgresServer()  # made, not started: its port refuses connections
    try:
        data = gateway_config(pg.url("postgres"))
        data["upstreams"]["llm"] = upstream_config(upstream)
        server = TestServer(create_app(parse_config(data, env={})), host="127.0.0.1")
        await server.start_server()  # starts all the same
        base = str(server.make_url(""))
        async with aiohttp.ClientSession() as s:
            async with s.get(base + H) as r:
                await assert_error(r, 503, "STORE_UNAVAILABLE")
            await _chat_ok(s, base)
            async with s.get(base + "/readyz") as r:
                assert r.status == 200
                assert (await r.json())["history"] == {"store": pg.url("postgres"),
                                                       "healthy": False}
            pg.start()

            async def served() -> bool:
                async with s.get(base + H) as r:
                    return r.status == 200
            await eventually(served, within=20)
            assert pg.psql("SELECT version_num FROM alembic_version") == HEAD
        await server.close()
    finally:
        pg.stop()


# --- shutdown --------------------------------------------------------------------------------


async def test_shutdown_closes_every_connection(postgres: PostgresServer) -> None:
    database = postgres.new_database()
    server = TestServer(create_app(parse_config(gateway_config(
        postgres.url(database), history={"pool_size": 3}), env={})), host="127.0.0.1")
    await server.start_server()
    base = str(server.make_url(""))
    async with aiohttp.ClientSession() as s:
        async with s.post(base + H, json={}) as r:
            chat = await r.json()

        async def put(i: int) -> None:
            async with s.put(f"{base}{H}/{chat['id']}", json={"messages": [{"id": str(i)}]}) as r:
                assert r.status == 200
        await asyncio.gather(*(put(i) for i in range(20)))

    def sessions() -> int:
        return int(postgres.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'chat-gateway' "
            f"AND datname = '{database}'"))
    assert 1 <= sessions() <= 3  # the pool, sized in config
    await server.close()
    assert sessions() == 0
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not any("HistoryStore" in repr(t.get_coro()) for t in left), left


def test_documented_history_configs_validate() -> None:
    import re
    import textwrap

    import yaml

    root = Path(__file__).resolve().parent.parent
    blocks = re.findall(r"```yaml\n(.*?)```", (root / "docs/history.md").read_text(), re.S)
    assert len(blocks) >= 3
    for block in blocks:
        section = yaml.safe_load(textwrap.dedent(block))["history"]
        data = gateway_config("x", history=section)
        data["history"] = section
        parse_config(data, env={"HISTORY_DB_PASSWORD": "pw"})
