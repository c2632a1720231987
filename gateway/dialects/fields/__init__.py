"""Each dialect's documented request fields, and where each goes on a route to another dialect.

One table per dialect, ``gateway/dialects/fields/<dialect>.yaml`` (a dialect shipped elsewhere
sets ``field_table`` on its class to a :class:`FieldTable`, e.g. from :func:`load_table`). It
lists every request field the dialect's official API reference documents, nested ones included
where they matter (a tool's ``defer_loading``, a content block's ``cache_control``), each checked
against the reference and the SDK types named under ``sources``. The gateway reads it at run time
to account for every field a client sends (:func:`losses`), and
tests/test_field_walk.py walks every field of every table through every upstream dialect of the
registry.

The format::

    dialect: <name>
    sources: {<what>: <where>}   # the references the entries were checked against
    sdk_types: [<module>:<TypedDict>[ at <path>]]  # an SDK's request types (at the top, or
                                 # at a nested path): each of their keys is a field here, one an
                                 # entry ``covers``, or (top level) one under not_body
    not_body: {<key>: <why>}     # a key the SDK sends elsewhere (a header)
    sdk_names: camel             # the SDK's types spell keys in snake_case and send them in
                                 # lowerCamelCase, as the table lists them (absent: as they are)
    base: {...}                  # a small valid request; the test adds each field to it
    carries: [<place>, ...]      # places the renderer writes that no field of its own reads
    reads_only: [<place>, ...]   # places its fields are read into that it never writes for a
                                 # client of another dialect
    fields:
      <path>:
        to: <place>              # mapped: the canonical place it is read into (see PLACES);
                                 # absent: kept only for an upstream of the same dialect
        lost: report | policy    # when the upstream cannot carry it: ``report`` (the default):
                                 # left out and reported whatever the route's policy;
                                 # ``policy``: the route's on_unsupported decides (reject: a
                                 # 400 naming it; drop: left out and reported)
        default: <value>         # a value that asks for nothing (the API's default): no loss
        no_loss: [<value>, ...]  # other values whose loss is none (the gateway does it itself)
        sample: <value>          # a valid value (the test sets it at <path>), or
        request: {...}           # the request fragment that holds a nested field
        feature: <name>          # taken up by a feature still under way; until it lands the
                                 # field may be refused at parsing (a 400 naming it)
        covers: [<key>, ...]     # keys under it that its place reads too (``tools``: each
                                 # tool's name, description, schema), relative, dot-separated
        note: <why>

A path is dot-separated keys; ``key[]`` is each element of the list at ``key`` (or the one
object there), ``key[type=x]`` only the elements whose ``type`` is ``x`` (``key[type=x*]``: whose
``type`` starts with ``x``); a path that ends in a selector names the elements themselves. A
field is *present* when its path holds a value that is not ``null`` (nor its ``default``); a
field whose parts have entries of their own (``context`` and ``context.overrides.top``) is
present when it holds keys beyond those parts, or none at all.

Places (``to``):

- ``messages``, ``stream``, ``answer``, ``client``: every dialect carries them (``answer``: the
  field shapes the client's own answer, such as ``stream_options.include_usage``; ``client``:
  the client's own bookkeeping, which no API takes as model input, such as the AI SDK's chat and
  message ids or the sources its UI showed; nothing goes upstream of another dialect for
  either, and neither is a loss).
- The capabilities (``tools``, ``hosted_tools``, ``tool_choice``, ``tool_calls``,
  ``tool_results``, ``images``, ``content_parts``, ``reasoning``, ``reasoning_effort``,
  ``structured_output``, ``session_state``) and ``options``
  (what a dialect names in :attr:`~gateway.canonical.ChatRequest.unmapped`): accounted by
  :mod:`gateway.carry` under those names, as each dialect's :class:`Capabilities` declares.
- Any other place (``model``, ``context``, ``message.name``, ``sampling.<key>``...): carried to
  an upstream whose table reads some field into it (or lists it under ``carries``), else lost
  under the client's path, as ``lost`` says.

Undocumented top-level keys are lost under their own path (reported); in the metric's label they
are ``undocumented`` (the label's values stay bounded).

The contract the field-walk test (tests/test_field_walk.py) holds every table to: for each field,
from a client of its dialect to an upstream of each registered dialect, either the rendered
upstream request differs from the one without the field and holds it (same dialect: at its path;
another: a field the upstream's table reads into the same place), or the field's path (or its
capability's name) is among the losses reported, and refused under ``reject`` exactly when its
table says ``lost: policy``. On a same-dialect route it is never reported. A new dialect adds its
table here (or ``field_table`` on its class) and the test walks it with every other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal, Protocol

import yaml

from gateway.canonical import JSON, ChatRequest

__all__ = ["ALWAYS", "CAPABILITY_PLACES", "Field", "FieldTable", "Use", "governed", "load_table",
           "losses", "metric_label", "table_of", "uses"]

ALWAYS = frozenset({"messages", "stream", "answer", "client"})
"""Places every dialect carries."""
CAPABILITY_PLACES = frozenset({
    "tools", "hosted_tools", "tool_choice", "tool_calls", "tool_results", "images",
    "content_parts", "reasoning", "reasoning_effort", "structured_output", "session_state",
    "options"})
"""Places accounted by the dialects' declared capabilities (:mod:`gateway.carry`)."""
UNDOCUMENTED = "undocumented"
"""The metric label of a key no table documents."""
_MAX_UNDOCUMENTED = 8
"""Undocumented keys named one by one in a request's losses; the rest are one ``undocumented``."""
_MAX_KEY = 64
"""Characters of an undocumented key kept in its reported path."""
_NO_DEFAULT: Any = object()
_SELECTOR = re.compile(r"^([^\[\]]+)\[(?:([A-Za-z_]+)=([^\]]+))?\]$")


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Field:
    """One documented request field of a dialect."""

    path: str
    to: str | None = None
    """The canonical place it is read into; ``None``: only an upstream of its own dialect gets
    it."""
    lost: Literal["report", "policy"] = "report"
    """When the upstream cannot carry it: reported whatever the route's policy, or the
    policy's (``on_unsupported``) to decide."""
    default: JSON = _NO_DEFAULT
    """A value that asks for nothing (the API's default): holding it is no use of the field."""
    sample: JSON = _NO_DEFAULT
    request: JSON = None
    """A valid value at :attr:`path`, or the request fragment that holds the field (the test's)."""
    feature: str | None = None
    note: str | None = None
    covers: tuple[str, ...] = ()
    """Keys under it its place reads too (checked against the SDK's types)."""
    no_loss: tuple[JSON, ...] = ()
    """Values besides :attr:`default` that lose nothing (what the gateway does anyway)."""

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    @property
    def has_sample(self) -> bool:
        return self.sample is not _NO_DEFAULT


@dataclass(slots=True)
class _Node:
    """One level of the compiled table: the fields a value here is, and what to look for
    under each key of an object here."""

    fields: list[Field] = field(default_factory=list)
    keys: dict[str, _Key] = field(default_factory=dict)


@dataclass(slots=True)
class _Key:
    """What to look for at one key: the value itself (``key.…``), each element of a list there
    (``key[]…``), and the elements whose ``k`` is ``v`` (``key[k=v]…``, by ``k`` then ``v``)."""

    plain: _Node | None = None
    each: _Node | None = None
    match: dict[str, dict[str, _Node]] = field(default_factory=dict)
    prefix: dict[str, list[tuple[str, _Node]]] = field(default_factory=dict)
    """``key[k=v*]…``: the elements whose ``k`` starts with ``v``."""
    elements: bool = False
    """Whether anything is looked for in the elements (:attr:`each`, :attr:`match` or
    :attr:`prefix`): one test per key rather than three."""


@dataclass(frozen=True)
class FieldTable:
    """A dialect's documented request fields (the module docstring has the format)."""

    dialect: str
    fields: dict[str, Field]
    sources: dict[str, str] = field(default_factory=dict)
    sdk_types: tuple[str, ...] = ()
    not_body: dict[str, str] = field(default_factory=dict)
    base: JSON = None
    sdk_names: Literal["as_is", "camel"] = "as_is"
    """How the wire spells the keys of :attr:`sdk_types` (``camel``: snake_case ones in
    lowerCamelCase, as google-genai sends them)."""
    carries: frozenset[str] = frozenset()
    places: frozenset[str] = frozenset()
    """Every place an upstream of this dialect is sent: its fields' and :attr:`carries`, but
    ``reads_only``."""
    _root: _Node = field(default_factory=_Node, repr=False, compare=False)

    @property
    def top_level(self) -> frozenset[str]:
        return frozenset(self._root.keys)


def _compile(fields: dict[str, Field]) -> _Node:
    root = _Node()
    for f in fields.values():
        node = root
        for part in f.path.split("."):
            m = _SELECTOR.match(part)
            key = part if m is None else m.group(1)
            at = node.keys.setdefault(key, _Key())
            if m is None:
                at.plain = at.plain or _Node()
                node = at.plain
                continue
            at.elements = True
            if m.group(2) is None:
                at.each = at.each or _Node()
                node = at.each
            elif m.group(3).endswith("*"):
                start = m.group(3)[:-1]
                pairs = at.prefix.setdefault(m.group(2), [])
                node = next((n for p, n in pairs if p == start), None) or _Node()
                if all(n is not node for _, n in pairs):
                    pairs.append((start, node))
            else:
                node = at.match.setdefault(m.group(2), {}).setdefault(m.group(3), _Node())
        node.fields.append(f)
    return root


_TABLE_KEYS = frozenset({"dialect", "sources", "sdk_types", "not_body", "sdk_names", "base",
                         "carries", "reads_only", "fields"})
_FIELD_KEYS = frozenset({"to", "lost", "default", "sample", "request", "feature", "note",
                         "covers", "no_loss"})


def load_table(text: str) -> FieldTable:
    """A table from its YAML text."""
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("dialect"), str):
        raise ValueError("a field table is a mapping with a dialect name")
    unknown = set(raw) - _TABLE_KEYS
    if unknown:
        raise ValueError(f"unknown keys in the field table: {sorted(unknown)}")
    fields: dict[str, Field] = {}
    for path, spec in (raw.get("fields") or {}).items():
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - _FIELD_KEYS:
            raise ValueError(f"{path}: a field is a mapping of {sorted(_FIELD_KEYS)}")
        lost = spec.get("lost", "report")
        if lost not in ("report", "policy"):
            raise ValueError(f"{path}: lost must be report or policy, not {lost!r}")
        fields[path] = Field(
            path, to=spec.get("to"), lost=lost, default=spec.get("default", _NO_DEFAULT),
            sample=spec.get("sample", _NO_DEFAULT), request=spec.get("request"),
            feature=spec.get("feature"), note=spec.get("note"),
            covers=tuple(spec.get("covers") or ()), no_loss=tuple(spec.get("no_loss") or ()))
    sdk_names = raw.get("sdk_names", "as_is")
    if sdk_names not in ("as_is", "camel"):
        raise ValueError(f"sdk_names must be as_is or camel, not {sdk_names!r}")
    carries = frozenset(raw.get("carries") or ())
    places = (frozenset(f.to for f in fields.values() if f.to is not None) | carries) \
        - frozenset(raw.get("reads_only") or ())
    return FieldTable(raw["dialect"], fields, dict(raw.get("sources") or {}),
                      tuple(raw.get("sdk_types") or ()), dict(raw.get("not_body") or {}),
                      raw.get("base"), sdk_names, carries, places, _compile(fields))


@cache
def _packaged(name: str) -> FieldTable | None:
    entry: Traversable = resources.files("gateway.dialects.fields").joinpath(f"{name}.yaml")
    if not entry.is_file():
        return None
    table = load_table(entry.read_text(encoding="utf-8"))
    if table.dialect != name:
        raise ValueError(f"fields/{name}.yaml names the dialect {table.dialect!r}")
    return table


_OWN_TABLE: dict[type, bool] = {}
"""Whether a dialect's class may give a ``field_table`` of its own: asked once per class (every
request asks, and ``getattr`` of a member that is not there costs an exception)."""


def table_of(dialect: _HasName) -> FieldTable | None:
    """The dialect's table: its own ``field_table`` (set on its class), else the one shipped
    here under its name, else ``None``."""
    cls = type(dialect)
    own_table = _OWN_TABLE.get(cls)
    if own_table is None:
        own_table = _OWN_TABLE[cls] = hasattr(cls, "field_table") or hasattr(cls, "__getattr__")
    if own_table:
        own = getattr(dialect, "field_table", None)
        if isinstance(own, FieldTable):
            return own
    return _packaged(dialect.name)


# --- what a request holds ------------------------------------------------------------------------


@dataclass(slots=True, init=False)
class Use:
    """A field a request holds: its path, and its table entry (``None``: undocumented). (Not
    frozen, and its own __init__: a few are made for every request, and compiled, a frozen
    dataclass is built through ``object.__setattr__``, and the __init__ dataclasses generates
    runs interpreted, each several times the cost. tests/test_canonical.py holds it to its
    fields.)"""

    path: str
    field: Field | None

    def __init__(self, path: str, field: Field | None) -> None:
        self.path = path
        self.field = field


def _present(value: JSON, f: Field) -> bool:
    return value is not None and (f.default is _NO_DEFAULT or value != f.default) and (
        not f.no_loss or value not in f.no_loss)


def _own(value: JSON, node: _Node) -> bool:
    """Whether a field whose table also documents parts of it holds more than those parts
    (``context`` beyond its ``overrides``): those parts are accounted one by one."""
    if not node.keys or not isinstance(value, dict) or not value:
        return True  # (an empty object is a use of the field itself: Responses' reasoning {})
    return any(k not in node.keys and v is not None for k, v in value.items())


def _visit(node: _Node, value: JSON, found: dict[str, Field]) -> None:
    for f in node.fields:
        if f.path not in found and _present(value, f) and _own(value, node):
            found[f.path] = f
    if node.keys and isinstance(value, dict):
        _walk(node, value, found)


def _walk(node: _Node, obj: dict[str, JSON], found: dict[str, Field],
          unknown: list[str] | None = None) -> None:
    """Add to ``found`` the fields under ``node`` that ``obj`` holds (each path once), and to
    ``unknown`` (when given) the keys of ``obj`` the table does not know.

    (An agent's request holds hundreds of blocks, each looked at here: the object's own keys are
    looked up, a handful, rather than every key the table knows at that level; a key whose entry
    is a field with nothing under it is checked in place rather than by a call.)"""
    keys = node.keys
    for key, value in obj.items():
        at = keys.get(key)
        if at is None:
            if unknown is not None and value is not None:
                unknown.append(key)
            continue
        if value is None:
            continue
        plain = at.plain
        if plain is not None:
            if plain.keys:
                _visit(plain, value, found)
            else:
                for f in plain.fields:  # (_present, in place: value is not None here)
                    if f.path not in found and (
                            f.default is _NO_DEFAULT or value != f.default) and (
                            not f.no_loss or value not in f.no_loss):
                        found[f.path] = f
        if not at.elements:
            continue
        each, match, prefix = at.each, at.match, at.prefix
        for item in value if isinstance(value, list) else (value,):
            if item is None:
                continue
            if each is not None:
                _visit(each, item, found)
            if match and isinstance(item, dict):
                for k, nodes in match.items():
                    sub = nodes.get(item.get(k))  # type: ignore[arg-type]
                    if sub is not None:
                        _visit(sub, item, found)
            if prefix and isinstance(item, dict):
                for k, pairs in prefix.items():
                    v = item.get(k)
                    if isinstance(v, str):
                        for start, sub in pairs:
                            if v.startswith(start):
                                _visit(sub, item, found)


def uses(table: FieldTable, body: JSON) -> list[Use]:
    """The fields ``body`` holds, documented ones by their table path, then the undocumented
    top-level keys (at most a few by name, then one ``undocumented``)."""
    if not isinstance(body, dict):
        return []
    found: dict[str, Field] = {}
    extra: list[str] = []
    _walk(table._root, body, found, extra)
    out = [Use(p, f) for p, f in found.items()]
    if extra:
        out.extend(Use(k[:_MAX_KEY], None) for k in extra[:_MAX_UNDOCUMENTED])
        if len(extra) > _MAX_UNDOCUMENTED:
            out.append(Use(UNDOCUMENTED, None))
    return out


def _request_uses(req: ChatRequest) -> list[Use]:
    """What the client's request holds, read once from its body (kept on the request)."""
    if req.field_uses is not None:
        return req.field_uses
    table = _table_by_name(req.extras_dialect)
    if table is None or req.wire is None:
        # No table, or a request not read from a body: what its dialect kept for itself
        found = [Use(k[:_MAX_KEY], None) for k, v in req.extras.items()
                 if v is not None and not k.startswith("_")]
    else:
        found = uses(table, req.wire)
    req.field_uses = found
    return found


def _table_by_name(name: str | None) -> FieldTable | None:
    if name is None:
        return None
    dialect = _registry().get(name)
    return table_of(dialect) if dialect is not None else None


@cache
def _registry() -> Mapping[str, _HasName]:
    """The dialects' registry (imported on first use: the registry imports the dialects, which
    import us; cached, as an import statement costs a lookup on every request)."""
    from gateway.dialects import DIALECTS

    return DIALECTS


def losses(req: ChatRequest, target: _HasName) -> list[Use]:
    """The fields of the client's request that an upstream of ``target``'s dialect does not
    get, other than what the capabilities account for (:func:`gateway.carry.request_losses`).
    Nothing on a same-dialect route."""
    if req.extras_dialect is None or req.extras_dialect == target.name:
        return []
    theirs = table_of(target)
    places = theirs.places if theirs is not None else frozenset()
    out: list[Use] = []
    for u in _request_uses(req):
        f = u.field
        if f is None or f.to is None:
            out.append(u)
        elif f.to in ALWAYS or f.to in CAPABILITY_PLACES:
            continue
        elif f.to not in places:
            out.append(u)
    return out


def governed(lost: list[Use]) -> list[str]:
    """The paths among ``lost`` whose fate the route's ``on_unsupported`` decides."""
    return [u.path for u in lost if u.field is not None and u.field.lost == "policy"]


@cache
def _documented(registered: int) -> frozenset[str]:
    """Every registered table's paths (looked up again when a dialect registers)."""
    from gateway.dialects import DIALECTS

    paths: set[str] = set()
    for d in DIALECTS.values():
        t = table_of(d)
        if t is not None:
            paths.update(t.fields)
    return frozenset(paths)


def metric_label(name: str, capability_fields: frozenset[str]) -> str:
    """``name`` as the ``field`` label of ``gateway_dropped_fields_total``: a capability's
    name or a documented path as it is, anything else ``undocumented``."""
    from gateway.dialects import DIALECTS

    if name in capability_fields or name in _documented(len(DIALECTS)):
        return name
    return UNDOCUMENTED
