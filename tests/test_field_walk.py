"""The field walk: every documented request field of every dialect's table
(gateway/dialects/fields), from a client of that dialect to an upstream of every registered
dialect, is carried, mapped, or reported: never lost without a word.

For each field the test builds the table's ``base`` request with the field (its ``sample`` at its
path, or its ``request`` fragment) and the same request without it, translates both (pure: parse,
the route's policy, render; no sockets), and holds the field to one of:

- **carried or mapped**: the two rendered upstream requests differ (a field that shapes only the
  client's own answer, ``to: answer``, or whether to stream, changes the canonical request
  instead), and the upstream dialect's own table finds in what it got the field itself (same
  dialect) or a field of the same canonical place (another dialect);
- **reported**: its path, or the capability it belongs to, is among the request's losses, and
  under ``on_unsupported: reject`` a field whose table says ``lost: policy`` is refused (a 400
  naming it) while a reported one never is.

On a same-dialect route a field is always carried and never reported. A field taken up by a
feature still under way (``feature:``) may instead be refused when its request is read, naming it.
"""

from __future__ import annotations

import copy
import importlib
import re
from dataclasses import dataclass, replace
from typing import Any

import pytest

from gateway.canonical import ChatRequest, Message
from gateway.carry import Unsupported, dropped_label
from gateway.dialects import DIALECTS, Dialect, upstream_url_of
from gateway.dialects.fields import (
    ALWAYS,
    CAPABILITY_PLACES,
    Field,
    FieldTable,
    load_table,
    losses,
    table_of,
    uses,
)
from gateway.errors import ParseError
from gateway.pipeline import translate_request

JSON = Any


def _tables() -> list[tuple[Dialect, FieldTable]]:
    out = []
    for d in DIALECTS.values():
        t = table_of(d)
        assert t is not None, f"{d.name} has no field table (gateway/dialects/fields)"
        out.append((d, t))
    return out


TABLES = _tables()
CASES = [pytest.param(d, t, f, id=f"{d.name}:{f.path}") for d, t in TABLES
         for f in t.fields.values()]


# --- building the two requests -------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    key: str
    each: bool
    match: tuple[str, str] | None


def _steps(path: str) -> list[_Step]:
    out = []
    for part in path.split("."):
        if part.endswith("]"):
            key, _, sel = part[:-1].partition("[")
            k, _, v = sel.partition("=")
            out.append(_Step(key, True, (k, v) if sel else None))
        else:
            out.append(_Step(part, False, None))
    return out


def _with_field(table: FieldTable, f: Field) -> dict[str, JSON]:
    body: dict[str, JSON] = copy.deepcopy(table.base)
    if f.request is not None:
        body.update(copy.deepcopy(f.request))
        return body
    assert f.has_sample, f"{table.dialect}: {f.path} has neither sample nor request"
    steps = _steps(f.path)
    assert not any(s.each for s in steps), f"{f.path}: a nested field needs a request"
    at = body
    for s in steps[:-1]:
        at = at.setdefault(s.key, {})
    at[steps[-1].key] = copy.deepcopy(f.sample)
    return body


def _without(obj: JSON, steps: list[_Step]) -> int:
    """Take the field at ``steps`` out of ``obj``; how many places held it."""
    if not isinstance(obj, dict) or steps[0].key not in obj:
        return 0
    s, rest = steps[0], steps[1:]
    value = obj[s.key]
    if not s.each:
        if not rest:
            del obj[s.key]
            return 1
        return _without(value, rest)
    items = value if isinstance(value, list) else [value]
    if s.match is not None:
        k, v = s.match
        picked = [x for x in items if isinstance(x, dict) and (
            x.get(k) == v or (v.endswith("*") and str(x.get(k)).startswith(v[:-1])))]
    else:
        picked = items
    if not rest:
        if picked:
            assert isinstance(value, list), s.key
            obj[s.key] = [x for x in items if x not in picked]
        return len(picked)
    return sum(_without(x, rest) for x in picked)


def _requests(table: FieldTable, f: Field) -> tuple[dict[str, JSON], dict[str, JSON]]:
    with_it = _with_field(table, f)
    if f.request is None and _without(copy.deepcopy(table.base), _steps(f.path)):
        # a field the base request needs (messages, input): the base's own value against the
        # sample's
        return with_it, copy.deepcopy(table.base)
    without = copy.deepcopy(with_it)
    assert _without(without, _steps(f.path)), f"{f.path} is not in its own sample request"
    return with_it, without


# --- the walk ------------------------------------------------------------------------------------


_WIDER = {"hosted_tools": "tools"}
"""A capability whose loss, on an upstream without the wider one, is reported as that one (a
provider's built-in tools, to an upstream with no tools at all)."""


def _names(f: Field) -> set[str]:
    """What a loss of ``f`` is reported as: its path, or the capability it belongs to."""
    if f.to not in CAPABILITY_PLACES:
        return {f.path}
    return {f.path, f.to} | ({_WIDER[f.to]} if f.to in _WIDER else set())


def _translate(body: JSON, client: Dialect, upstream: Dialect,
               policy: str) -> tuple[Any, JSON, list[str]]:
    return translate_request(body, client, upstream, policy=policy)  # type: ignore[arg-type]


def test_every_registered_dialect_has_a_table_of_known_places() -> None:
    known = ALWAYS | CAPABILITY_PLACES
    plain = {p for _, t in TABLES for p in t.places} - known
    for d, t in TABLES:
        assert t.dialect == d.name
        assert t.fields and t.sources, f"{d.name}: no fields, or no sources"
        d.parse_request(copy.deepcopy(t.base))  # the base request is valid
        for f in t.fields.values():
            assert f.has_sample or f.request is not None, f"{d.name}: {f.path} has no sample"
            assert f.to is None or f.to in known or f.to in plain, f"{d.name}: {f.path}"
    # every plain place is somewhere carried, or a table would name a place no one writes
    assert all(any(p in t.places for _, t in TABLES) for p in plain)


SDK_TYPES = [pytest.param(t, spec, id=spec) for _, t in TABLES for spec in t.sdk_types]


def _plain(path: str) -> str:
    """A path without its list marks and selectors (``tools[].function`` is ``tools.function``)."""
    return re.sub(r"\[[^\]]*\]", "", path)


def _wire(key: str, table: FieldTable) -> str:
    """An SDK type's key as the wire spells it (``thinking_config``: ``thinkingConfig`` for an
    SDK that sends lowerCamelCase)."""
    if table.sdk_names != "camel":
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


@pytest.mark.parametrize(("table", "spec"), SDK_TYPES)
def test_every_key_of_the_sdks_request_types_is_in_the_table(table: FieldTable,
                                                             spec: str) -> None:
    ref, _, at = spec.partition(" at ")
    module, _, name = ref.partition(":")
    typed = getattr(importlib.import_module(module), name)
    keys = {_wire(k, table) for cls in getattr(typed, "__mro__", (typed,))
            for k in getattr(cls, "__annotations__", {})}
    assert keys, spec
    documented = {_plain(f.path) for f in table.fields.values()} | {
        f"{_plain(f.path)}.{c}" for f in table.fields.values() for c in f.covers}
    prefix = f"{_plain(at)}." if at else ""
    missing = {k for k in keys if k not in table.not_body and not any(
        d == prefix + k or d.startswith(f"{prefix}{k}.") for d in documented)}
    assert not missing, f"{table.dialect} lacks {sorted(missing)} at {at or 'the top'}"


def test_a_table_checked_against_an_sdk_names_its_request_types() -> None:
    with_sdk = [t.dialect for _, t in TABLES if "sdk" in t.sources]
    assert with_sdk and all(table_of(DIALECTS[d]).sdk_types for d in with_sdk)  # type: ignore[union-attr]


@pytest.mark.parametrize(("client", "table", "f"), CASES)
def test_the_field_reaches_every_upstream_or_is_reported(client: Dialect, table: FieldTable,
                                                         f: Field) -> None:
    with_it, without = _requests(table, f)
    names = _names(f)
    for upstream in DIALECTS.values():
        where = f"{client.name} -> {upstream.name}: {f.path}"
        try:
            req, sent, lost = _translate(with_it, client, upstream, "drop")
        except ParseError as e:
            # only a field a feature under way takes up, refused by name when it is read
            assert f.feature is not None, f"{where}: refused ({e})"
            assert f.path.split(".")[0].split("[")[0] in str(e.where), where
            continue
        base_req, base_sent, _ = _translate(without, client, upstream, "drop")
        # what a render mints anew each time (an id) tells nothing about the field
        sent = _masked(sent, _translate(with_it, client, upstream, "drop")[1])
        base_sent = _masked(base_sent, _translate(without, client, upstream, "drop")[1])
        if f.to in _CANONICAL_ONLY:
            # (a feature's field that shapes the answer, such as Responses' store, is shown in
            # the answer by that feature's own tests)
            carried = _canonical(req) != _canonical(base_req) or (
                f.to == "answer" and f.feature is not None)
        else:
            carried = sent != base_sent
        # an upstream that names the model in its URL (the request target), not in its body
        in_url = f.to == "model" and _url(req, upstream) != _url(base_req, upstream)
        carried = carried or in_url
        reported = bool(names & set(lost))
        theirs = table_of(upstream)
        assert theirs is not None
        found = {u.path: u.field for u in uses(theirs, sent)}
        if upstream.name == client.name:
            assert carried and not reported, f"{where}: not carried on its own dialect"
            assert f.to in _CANONICAL_ONLY or in_url or f.path in found, \
                f"{where}: not at its path"
            continue
        if f.to == "client":  # the client's own bookkeeping: no upstream of another API's
            assert not reported, f"{where}: reported, though it is the client's own"
            continue
        assert f.to is not None or reported, f"{where}: kept for its own dialect, unreported"
        assert carried or reported, f"{where}: vanished, unreported"
        if not reported and f.to not in _CANONICAL_ONLY and not in_url:
            # mapped: the upstream's own table finds a field of the same place in what it got
            assert any(g is not None and g.to == f.to for g in found.values()), \
                f"{where}: the upstream got no field of {f.to}"
        if f.to in CAPABILITY_PLACES or f.path in CAPABILITY_PLACES:
            continue  # the capabilities' policy has tests of its own (test_matrix, ...)
        refused = _refused(with_it, client, upstream)
        if f.lost == "policy" and f.path in lost:
            assert f.path in refused, f"{where}: not refused under reject"
        else:
            assert f.path not in refused, f"{where}: refused, though only reported"


def _masked(one: JSON, two: JSON) -> JSON:
    """``one`` with every value that differs in ``two``, a second render of the same request,
    replaced by a mark: ids a dialect mints anew on each render."""
    if isinstance(one, dict) and isinstance(two, dict) and one.keys() == two.keys():
        return {k: _masked(v, two[k]) for k, v in one.items()}
    if isinstance(one, list) and isinstance(two, list) and len(one) == len(two):
        return [_masked(a, b) for a, b in zip(one, two, strict=True)]
    return one if one == two else "<minted>"


_CANONICAL_ONLY = frozenset({"stream", "answer"})
"""Places an upstream request need not show: whether to stream is the exchange's to choose
(by the path, for some dialects), and ``answer`` shapes the client's own answer."""


def _url(req: Any, upstream: Dialect) -> str | None:
    """Where ``req`` would be sent to an upstream of a dialect that builds its URL from the
    model (``None``: the configured URL, whatever the model)."""
    return upstream_url_of(upstream, "http://upstream.test/base", req.model, stream=False)


def _canonical(req: Any) -> tuple[Any, ...]:
    return req.stream, req.hints, req.options


def _refused(body: JSON, client: Dialect, upstream: Dialect) -> list[str]:
    """The fields ``on_unsupported: reject`` refuses the request for (none: it goes on)."""
    try:
        _translate(body, client, upstream, "reject")
    except Unsupported as e:
        return e.fields
    return []


# --- the table's reading of a body ---------------------------------------------------------------

_MADE_UP = load_table("""
dialect: made-up
sources: {reference: this test}
base: {items: []}
fields:
  items: {to: messages, sample: []}
  items[].mark: {request: {items: [{mark: 1}]}}
  items[kind=odd]: {to: content_parts, request: {items: [{kind: odd}]}}
  ctx: {to: context, default: {}, sample: {a: 1}}
  ctx.known: {to: context, request: {ctx: {known: 1}}}
  n: {lost: policy, default: 1, sample: 2}
""")


def _paths(body: JSON) -> list[str]:
    return [u.path for u in uses(_MADE_UP, body)]


def test_a_default_value_or_null_is_no_use_and_a_selector_names_its_elements() -> None:
    assert _paths({"items": [], "n": 1, "ctx": {}, "mark": None}) == ["items"]
    assert _paths({"items": [{"kind": "even", "mark": 2}, "text", {"kind": "odd"}], "n": 2}) \
        == ["items", "items[].mark", "items[kind=odd]", "n"]


def test_a_field_with_parts_of_its_own_is_used_only_beyond_them() -> None:
    assert _paths({"ctx": {"known": 1}}) == ["ctx.known"]
    assert _paths({"ctx": {"known": 1, "other": 2}}) == ["ctx", "ctx.known"]


def test_undocumented_keys_are_named_a_few_at_a_time_and_cut_short() -> None:
    body = {f"k{i}": i for i in range(20)} | {"x" * 500: 1}
    found = uses(_MADE_UP, body)
    assert all(u.field is None for u in found)
    assert [u.path for u in found] == [f"k{i}" for i in range(8)] + ["undocumented"]
    assert [u.path for u in uses(_MADE_UP, {"x" * 500: 1})] == ["x" * 64]
    assert dropped_label("k3") == "undocumented" and dropped_label("tools") == "tools"
    assert all(dropped_label(p) == p for _, t in TABLES for p in t.fields)


def test_a_request_of_a_dialect_without_a_table_reports_what_it_kept_for_itself() -> None:
    req = ChatRequest([Message("user", "hi")], extras={"knob": 1, "_private": 2, "gone": None},
                      extras_dialect="no-such-dialect")
    target = next(iter(DIALECTS.values()))
    assert [u.path for u in losses(req, target)] == ["knob"]
    assert losses(replace(req, extras_dialect=target.name, field_uses=None), target) == []
