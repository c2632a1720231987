"""Routes whose dialect reads the rest of the path (``routes_by_prefix``): the longest prefix that
reads a path serves it, and the entry it gets is the route's own but for what the path says."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config import parse_config
from gateway.dialects import get, names, routes_by_prefix
from gateway.runtime import Runtime

PREFIXED = [n for n in names() if routes_by_prefix(get(n))]


def _runtime(dialect: str) -> Runtime:
    other = next(n for n in names() if n != dialect)
    cfg = parse_config({
        "upstreams": {"u": {"dialect": other, "url": "http://127.0.0.1:9/x", "model": "m"}},
        "routes": [{"path": p, "dialect": dialect, "upstream": "u"}
                   for p in ("/a", "/a/b", "/a/b/c")],
    }, env={})
    return Runtime(cfg, {}, lambda _name, _up: None)


def test_some_dialect_routes_by_prefix() -> None:
    assert PREFIXED, "no registered dialect routes by prefix: nothing here is tested"


@pytest.mark.parametrize("dialect", PREFIXED)
@pytest.mark.parametrize("stream", [False, True])
def test_the_longest_prefix_serves_and_keeps_its_route(dialect: str, stream: bool) -> None:
    rt = _runtime(dialect)
    d = get(dialect)
    for prefix in ("/a", "/a/b", "/a/b/c"):
        target = d.client_target(prefix, "mod-1", stream=stream)  # type: ignore[attr-defined]
        path, _, query = target.partition("?")
        found = rt.target_for(path, "POST", dict(q.split("=", 1) for q in query.split("&") if q))
        assert found is not None, target
        entry, read = found
        assert entry.config.path == prefix
        assert entry.model == read.model == "mod-1" and entry.stream is read.stream
        # every other field is the route's own, whatever the path said
        own = rt.prefixes[prefix]
        changed = {"stream", "model", "framing", "stream_content_type"}
        for f in dataclasses.fields(entry):
            if f.name not in changed:
                assert getattr(entry, f.name) == getattr(own, f.name), f.name
    assert rt.target_for("/elsewhere/models/m:generate", "POST", {}) is None
