"""What one loaded config means at run time: the route table and the upstream states.

A reload builds a new :class:`Runtime` and swaps it in; a request keeps the one it started with,
so in-flight requests finish on their config. Upstream health state is keyed by upstream name and
carried over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from gateway.balancer import UpstreamState
from gateway.config import GatewayConfig, RouteConfig
from gateway.dialects import Dialect, Target, get, routes_by_prefix
from gateway.dialects.stored import stored_responses_of
from gateway.framing import Framing

__all__ = ["RouteEntry", "Runtime", "normalize_path"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RouteEntry:
    config: RouteConfig
    client: Dialect
    stream: bool | None
    """Fixed by the path (a dialect with a ``stream_path``), else ``None``: the body decides."""
    stream_content_type: str
    options: dict[str, Any]
    """The route's options for its dialect (validated, with defaults)."""
    responses_state: Literal["gateway", "upstream"] | None = None
    """Who keeps the answers of a client API that keeps them (``responses_state``, its
    default resolved); ``None``: the route's dialect keeps none."""
    framing: Framing | None = None
    """The framing the request target chose for a stream, when the client's dialect has two
    (``None``: its dialect's own)."""
    model: str | None = None
    """The model the request target named (a dialect whose routes are prefixes), which wins
    over the body's; ``None``: the body names it."""


class Runtime:
    def __init__(self, config: GatewayConfig, states: dict[str, UpstreamState],
                 on_health_change: Callable[[str, bool], None],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """``monotonic``: the health clock of the upstream states this runtime creates (those
        carried over from a previous runtime keep theirs: the app has one clock)."""
        self.config = config
        self._derived: dict[Callable[[Runtime], Any], Any] = {}
        self.routes: dict[str, RouteEntry] = {}
        self.prefixes: dict[str, RouteEntry] = {}
        """Routes whose dialect reads the rest of the path (:func:`routes_by_prefix`), by
        prefix."""
        for route in config.routes:
            client = get(route.dialect)
            ctype = client.stream_content_type
            if client.framing == "jsonlines" and route.content_type:
                ctype = route.content_type
            paths = config.served_paths(route)
            options = route.options
            kept = _responses_state(config, route, client)
            if routes_by_prefix(client):
                self.prefixes[route.path] = RouteEntry(route, client, None, ctype, options, kept)
                continue
            if len(paths) == 2:
                self.routes[paths[0]] = RouteEntry(route, client, False, ctype, options, kept)
                self.routes[paths[1]] = RouteEntry(route, client, True, ctype, options, kept)
            else:
                self.routes[paths[0]] = RouteEntry(route, client, None, ctype, options, kept)
        self._longest_first = [(prefix.rstrip("/") + "/", entry) for prefix, entry in
                               sorted(self.prefixes.items(), key=lambda p: len(p[0]),
                                      reverse=True)]
        """The prefix routes, the longest first, each with its prefix as it ends in a slash
        (ordered once: :meth:`target_for` runs on every request to one of them)."""
        for name, up in config.upstreams.items():
            if name in states:
                states[name].reconfigure(up)
            else:
                states[name] = UpstreamState(name, up, on_health_change, monotonic)
        for name in list(states):
            if name not in config.upstreams:
                del states[name]
        # This runtime's own view: a request that started on it keeps finding the upstreams of
        # its config even after a reload dropped some from the shared registry.
        self.states = {name: states[name] for name in config.upstreams}

    def derived(self, make: Callable[[Runtime], _T]) -> _T:
        """What ``make`` derives from this runtime, made on first use and kept with it: a
        reload's new runtime makes its own. (Kept here, not in a table weakly keyed by runtime:
        compiled, a runtime cannot be weakly referenced.)"""
        try:
            return self._derived[make]  # type: ignore[no-any-return]
        except KeyError:
            value = self._derived[make] = make(self)
            return value

    def route_for(self, path: str) -> RouteEntry | None:
        return self.routes.get(normalize_path(path))

    def target_for(self, path: str, method: str, query: Mapping[str, str],
                   ) -> tuple[RouteEntry, Target] | None:
        """The prefix route under which ``path`` lies and what its dialect reads of the rest
        (the longest prefix that reads it); ``None`` when none does."""
        if not self._longest_first:
            return None
        path = normalize_path(path)  # (a trailing slash, as the other routes allow)
        for head, entry in self._longest_first:
            if not path.startswith(head):
                continue
            target: Target | None = entry.client.read_target(  # type: ignore[attr-defined]
                path[len(head):], method, query)
            if target is not None:
                # (built field by field: dataclasses.replace costs several times as much, on
                # every request to a prefix route)
                array = target.framing == "jsonarray"
                return RouteEntry(
                    config=entry.config, client=entry.client, stream=target.stream,
                    stream_content_type="application/json" if array
                    else entry.stream_content_type,
                    options=entry.options, responses_state=entry.responses_state,
                    framing="jsonarray" if array else entry.framing,
                    model=target.model), target
        return None

    def down_routes(self) -> dict[str, list[str]]:
        """Routes with no upstream able to take traffic, with their upstreams."""
        out: dict[str, list[str]] = {}
        for route in self.config.routes:
            names = [u.name for u in route.upstreams]
            if not any(self.states[n].healthy for n in names):
                out[route.path] = names
        return out


def _responses_state(config: GatewayConfig, route: RouteConfig,
                     client: Dialect) -> Literal["gateway", "upstream"] | None:
    """Who keeps a stateful client API's answers on ``route`` (docs/translation.md)."""
    if stored_responses_of(client) is None:
        return None
    if route.responses_state is not None:
        return route.responses_state
    if config.responses_store is None:
        return "upstream"
    other = any(config.upstreams[u.name].dialect != client.name for u in route.upstreams)
    return "gateway" if other else "upstream"


def unkept_references(config: GatewayConfig) -> list[tuple[str, str]]:
    """``(where, note)`` for each route whose clients' stored answers nobody can keep: its
    dialect's API keeps answers, an upstream speaks another dialect and the config has no
    ``responses_store``, so references to earlier answers are refused. ``check`` prints them:
    clients that rely on the API's default (``store`` true) need the section."""
    notes = []
    for i, route in enumerate(config.routes):
        client = get(route.dialect)
        if stored_responses_of(client) is None or config.responses_store is not None \
                or route.responses_state is not None:
            continue
        if any(config.upstreams[u.name].dialect != client.name for u in route.upstreams):
            notes.append((f"routes[{i}]", "answers are not kept, so previous_response_id and "
                          "item_reference are refused: add a responses_store section to keep "
                          "them (docs/translation.md#stored-responses)"))
    return notes


def normalize_path(path: str) -> str:
    return path.rstrip("/") or "/"
