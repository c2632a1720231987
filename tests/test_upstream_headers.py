"""The headers of an upstream request, name by name and in the order they go out: the gateway's
own, the client's key (only when it is the upstream's to check), what the client's request
passes on (forwarding chain, trace context, user agent), and last the upstream's configured
ones, which replace a passed-on value where it stood."""

from __future__ import annotations

from typing import Any
from unittest import mock

from aiohttp.test_utils import make_mocked_request
from fakes import dialect_at, upstream_config

from gateway.config import parse_config
from gateway.dialects import get
from gateway.exchange.headers import upstream_headers

D = get(dialect_at(0))  # some dialect: this is about headers, not translation
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _request(headers: dict[str, str], path: str = "/c") -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("198.51.100.1", 1234) if name == "peername" else default)
    return make_mocked_request("POST", path, headers=headers, transport=transport)


def _config(up: dict[str, Any], **server: Any) -> Any:
    return parse_config({"server": server, "upstreams": {"up": up},
                         "routes": [{"path": "/c", "dialect": D.name, "upstream": "up"}]})


def test_every_part_in_its_place() -> None:
    config = _config(upstream_config(D.name, "http://127.0.0.1:1/v1",
                                     headers={"X-Team": "a", "User-Agent": "configured"}),
                     upstream_user_agent="pass")
    request = _request({"Authorization": "Bearer k", "OpenAI-Project": "p",
                        "traceparent": TRACEPARENT, "User-Agent": "client/1"})
    h = upstream_headers(request, config, config.upstreams["up"], D, True, "rid")
    assert list(h.items()) == [
        ("Content-Type", "application/json"), ("X-Request-ID", "rid"),
        ("Accept", D.stream_accept), ("Authorization", "Bearer k"), ("OpenAI-Project", "p"),
        ("X-Forwarded-Proto", "http"), ("X-Forwarded-For", "198.51.100.1"),
        ("traceparent", TRACEPARENT), ("User-Agent", "configured"), ("X-Team", "a")]


def test_a_whole_answer_without_a_key_or_configured_headers() -> None:
    config = _config(upstream_config(D.name, "http://127.0.0.1:1/v1"),
                     upstream_user_agent="none")
    request = _request({"User-Agent": "client/1", "tracestate": "a=1"}, "/c?key=g")
    h = upstream_headers(request, config, config.upstreams["up"], D, False, "rid")
    assert list(h.items()) == [
        ("Content-Type", "application/json"), ("X-Request-ID", "rid"),
        ("x-goog-api-key", "g"), ("X-Forwarded-Proto", "http"),
        ("X-Forwarded-For", "198.51.100.1"), ("tracestate", "a=1")]


def test_the_clients_key_stays_when_the_upstream_has_its_own() -> None:
    config = _config(upstream_config(D.name, "http://127.0.0.1:1/v1",
                                     headers={"Authorization": "Bearer own"}))
    request = _request({"Authorization": "Bearer k", "OpenAI-Organization": "o"}, "/c?key=g")
    h = upstream_headers(request, config, config.upstreams["up"], D, False, "rid")
    assert h["Authorization"] == "Bearer own"
    assert "OpenAI-Organization" not in h and "x-goog-api-key" not in h
