"""A dialect's ``default_path`` is a suggestion: dialects that suggest one path each get a route
of their own, the first at the path, the others under a prefix named after them."""

from __future__ import annotations

from gateway.dialects import get, names
from gateway.models_list import listing_path
from gateway.route_paths import distinct_paths


def shared_paths() -> dict[str, list[str]]:
    """The registered dialects grouped by suggested path, where several suggest one."""
    by_path: dict[str, list[str]] = {}
    for name in names():
        by_path.setdefault(get(name).default_path, []).append(name)
    return {p: group for p, group in by_path.items() if len(group) > 1}


def test_dialects_that_suggest_one_path_get_distinct_routes() -> None:
    groups = shared_paths()
    assert groups, "no two registered dialects suggest one path: nothing to resolve"
    paths = distinct_paths(names())
    assert len(set(paths.values())) == len(paths)
    for suggested, group in groups.items():
        first, *later = group
        assert paths[first] == suggested
        for name in later:
            assert paths[name] == f"/{name}{suggested}"


def test_a_prefixed_route_keeps_its_model_list_beside_it() -> None:
    paths = distinct_paths(names())
    for name, path in paths.items():
        d = get(name)
        if d.models_path is not None:
            listed = listing_path(path, d)
            assert listed is not None and listed.endswith(d.models_path.rsplit("/", 1)[-1])
            assert listed.startswith(path[: len(path) - len(d.default_path)])


def test_the_order_given_decides_who_keeps_the_path() -> None:
    for group in shared_paths().values():
        reversed_paths = distinct_paths(reversed(group))
        assert reversed_paths[group[-1]] == get(group[-1]).default_path

