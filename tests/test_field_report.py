"""A field the upstream's dialect has no place for, through the exchange (in-memory upstream):
left out of the upstream request and reported where an operator sees it (the access log's
``dropped`` with the field's path, ``gateway_dropped_fields_total`` by path, or ``undocumented``
for a key no table documents), or, when its table leaves it to the route's policy, refused
under ``on_unsupported: reject`` with a 400 in the client's own dialect.

The field walk (tests/test_field_walk.py) holds every table to this over every pair; this file
proves the reporting end to end, for each dialect with such fields in its table.
"""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect, client_path
from gateway.dialects.fields import Field, FieldTable, table_of
from gateway.log import configure_logging
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

UNDOCUMENTED_KEY = "x_vendor_knob"


def _top_level(t: FieldTable, lost: str) -> Field | None:
    """A top-level field of ``t`` with a sample and no canonical place, lost as ``lost`` says."""
    return next((f for f in t.fields.values() if f.to is None and f.lost == lost
                 and f.has_sample and f.feature is None and "." not in f.path
                 and "[" not in f.path), None)


def _cases() -> list[Any]:
    out = []
    for c in DIALECTS.values():
        t = table_of(c)
        if t is None:
            continue
        reported, governed = _top_level(t, "report"), _top_level(t, "policy")
        up = next((d for d in DIALECTS.values() if d.name != c.name
                   and "text" in d.samples.responses), None)
        if reported is not None and governed is not None and up is not None:
            out.append(pytest.param(c, t, reported, governed, up, id=f"{c.name}->{up.name}"))
    return out


CASES = _cases()


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buf = io.StringIO()
    configure_logging(stream=buf)
    yield buf
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def _access(buf: io.StringIO) -> list[dict[str, Any]]:
    return [e for line in buf.getvalue().splitlines()
            if (e := orjson.loads(line)).get("event") == "access"]


async def _gateway(aiohttp_client: Any, client: Dialect, up: Dialect, policy: str,
                   sent: list[Any]) -> TestClient[Any, Any]:
    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        sent.append(orjson.loads(req.body))
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(up.samples.responses["text"]))

    cfg = {"upstreams": {"a": {"dialect": up.name, "url": "http://a.test/chat", "model": "m"}},
           "routes": [{"path": "/c", "dialect": client.name, "upstream": "a",
                       "on_unsupported": policy}]}
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(upstream))
    gw: TestClient[Any, Any] = await aiohttp_client(app)
    return gw


async def _dropped_metric(gw: TestClient[Any, Any]) -> dict[str, float]:
    resp = await gw.get("/metrics")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            if s.name == "gateway_dropped_fields_total" and s.labels.get("route") == "/c":
                out[s.labels["field"]] = s.value
    return out


@pytest.mark.parametrize(("client", "table", "reported", "governed", "up"), CASES)
async def test_dropped_fields_are_left_out_logged_by_path_and_counted(
        aiohttp_client: Any, logs: io.StringIO, client: Dialect, table: FieldTable,
        reported: Field, governed: Field, up: Dialect) -> None:
    body = copy.deepcopy(table.base)
    body.update({reported.path: reported.sample, governed.path: governed.sample,
                 UNDOCUMENTED_KEY: 1})
    sent: list[Any] = []
    gw = await _gateway(aiohttp_client, client, up, "drop", sent)
    resp = await gw.post(client_path(client, "/c", "m", stream=False), json=body)
    assert resp.status == 200, await resp.text()
    (upstream_body,) = sent
    for key in (reported.path, governed.path, UNDOCUMENTED_KEY):
        assert key not in upstream_body, key
    (line,) = _access(logs)
    assert {reported.path, governed.path, UNDOCUMENTED_KEY} <= set(line["dropped"]), line
    counted = await _dropped_metric(gw)
    assert counted.get(reported.path) == 1 and counted.get(governed.path) == 1, counted
    assert counted.get("undocumented") == 1 and UNDOCUMENTED_KEY not in counted, counted


@pytest.mark.parametrize(("client", "table", "reported", "governed", "up"), CASES)
async def test_under_reject_only_a_field_left_to_the_policy_is_refused(
        aiohttp_client: Any, logs: io.StringIO, client: Dialect, table: FieldTable,
        reported: Field, governed: Field, up: Dialect) -> None:
    sent: list[Any] = []
    gw = await _gateway(aiohttp_client, client, up, "reject", sent)
    path = client_path(client, "/c", "m", stream=False)
    resp = await gw.post(path, json={**copy.deepcopy(table.base), reported.path: reported.sample})
    assert resp.status == 200, await resp.text()
    assert reported.path in _access(logs)[-1]["dropped"]
    resp = await gw.post(path, json={**copy.deepcopy(table.base), governed.path: governed.sample})
    assert resp.status == 400
    err = client.parse_error(await resp.json())  # in the client's own dialect
    assert err is not None and governed.path in err.message and up.name in err.message, err
    assert len(sent) == 1  # the refused request reached no upstream


def test_every_shipped_dialect_with_extras_is_covered() -> None:
    covered = {p.values[0].name for p in CASES}
    with_both = {d.name for d in DIALECTS.values() if (t := table_of(d)) is not None
                 and _top_level(t, "report") and _top_level(t, "policy")}
    assert covered == with_both and covered, covered
