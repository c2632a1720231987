"""The chat dialects as the benchmark sees them on the wire, with no help from ``gateway``.

The mock upstream renders its answers from here (once, at startup) and the load driver builds its
requests and reassembles answer text from here, so a gateway bug cannot hide behind shared code.

One module per dialect beside this file, named as the gateway's dialect module
(``bench/wire/<module>.py`` for ``gateway/dialects/<module>.py``), found through the gateway's
dialect registry: a new dialect gets its bench module and nothing else in ``bench/`` changes. What
a module provides is :class:`WireDialect`. Only the list of dialects (and their module names) is
taken from the gateway; everything a module says about the wire it says itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol, cast

import orjson

__all__ = ["ALIASES", "DIALECTS", "MOCK_PATHS", "STREAM_CONTENT_TYPE", "WORD", "MissingWire",
           "WireDialect", "WireError", "answer_text", "default_pairs", "module_of", "refusal",
           "request", "short", "stream_frames", "stream_path", "stream_text", "streams_only",
           "upstream_extra", "wants_stream", "whole_body", "whole_path", "whole_text"]

WORD = "tok "
CREATED = 1_700_000_000
USER = [{"role": "user", "content": "hi"}]
CONTEXT = {"data_points": {"text": ["doc.pdf: snippet"]}}


class WireError(Exception):
    pass


class MissingWire(Exception):
    """A registered dialect has no bench module."""


# --- helpers the dialect modules share ----------------------------------------------------------


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def sse_named(name: str, obj: Any) -> bytes:
    """One SSE event with an ``event:`` name (the dialects whose events are typed)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def line(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


def sse_data(body: bytes) -> list[bytes]:
    """The ``data`` of each event of an SSE body (multi-line data joined with ``\\n``)."""
    out: list[bytes] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [ln[5:].lstrip(b" ") if ln.startswith(b"data:") else None
                for ln in block.split(b"\n")]
        parts = [d for d in data if d is not None]
        if parts:
            out.append(b"\n".join(parts))
    return out


def sse_events(body: bytes) -> list[tuple[str | None, bytes]]:
    """The ``(event name or None, data)`` of each event of an SSE body; comment lines and
    blocks without data are skipped (https://html.spec.whatwg.org/#event-stream-interpretation:
    one space after the colon is removed, the last ``event:`` wins)."""
    out: list[tuple[str | None, bytes]] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name: str | None = None
        parts: list[bytes] = []
        for ln in block.split(b"\n"):
            field, colon, value = ln.partition(b":")
            if not colon or not field:
                continue
            value = value[1:] if value.startswith(b" ") else value
            if field == b"data":
                parts.append(value)
            elif field == b"event":
                name = value.decode()
        if parts:
            out.append((name, b"\n".join(parts)))
    return out


def json_lines(body: bytes) -> list[Any]:
    return [orjson.loads(ln) for ln in body.split(b"\n") if ln.strip()]


Reassemble = Callable[[bytes], str]


class WireDialect(Protocol):
    """What ``bench/wire/<module>.py`` provides (module-level names)."""

    NAME: str
    """The gateway's dialect name."""
    SHORT: str
    """The short name used on the command line (``--pairs``)."""
    MOCK_PATH: str
    """Where the mock serves this dialect."""
    STREAM_SUFFIX: str
    """Added to a path to ask for a stream (``""``: the body or a header asks)."""
    STREAM_CONTENT_TYPE: str
    UPSTREAM: dict[str, Any]
    """Extra keys of the gateway's upstream config for this dialect (e.g. a model)."""
    KEEPS_STATE: bool
    """Its client-side stream encoding keeps state that grows with the answer (the soak's
    default client: the translating path most likely to leak)."""

    def request(self, stream: bool) -> tuple[dict[str, Any], dict[str, str]]: ...
    def refusal(self, body: dict[str, Any], headers: Any) -> str | None:
        """Why an upstream of this dialect would refuse this request (the mock answers 400
        with it), or None."""
    def wants_stream(self, body: dict[str, Any], headers: Any) -> bool: ...
    def whole_body(self, chunks: int) -> dict[str, Any]: ...
    def stream_frames(self, chunks: int) -> list[bytes]: ...
    def whole_text(self, obj: Any) -> str: ...
    def stream_text(self, body: bytes) -> str: ...


def module_of(dialect_name: str) -> str:
    """The gateway's module name of a registered dialect (``gateway/dialects/<module>.py``)."""
    from gateway.dialects import get

    return type(get(dialect_name)).__module__.rsplit(".", 1)[1]


def _load() -> dict[str, WireDialect]:
    from gateway.dialects import names

    out: dict[str, WireDialect] = {}
    for name in names():
        try:
            mod: ModuleType = importlib.import_module(f"{__name__}.{module_of(name)}")
        except ModuleNotFoundError as e:
            raise MissingWire(f"dialect {name!r} has no bench module bench/wire/"
                              f"{module_of(name)}.py (see bench/wire/__init__.py)") from e
        wd = cast(WireDialect, mod)
        if name != wd.NAME:
            raise MissingWire(f"bench/wire/{module_of(name)}.py says NAME={wd.NAME!r}, "
                              f"the registry {name!r}")
        out[wd.SHORT] = wd
    return out


_BY_SHORT = _load()
DIALECTS: dict[str, str] = {s: w.NAME for s, w in _BY_SHORT.items()}
"""Short name -> the gateway's dialect name, in registry order."""
ALIASES = {**{v: k for k, v in DIALECTS.items()}, **{k: k for k in DIALECTS}}
MOCK_PATHS: dict[str, str] = {s: w.MOCK_PATH for s, w in _BY_SHORT.items()}
STREAM_CONTENT_TYPE: dict[str, str] = {s: w.STREAM_CONTENT_TYPE for s, w in _BY_SHORT.items()}


def short(name: str) -> str:
    try:
        return ALIASES[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; known: {', '.join(ALIASES)}") from None


def default_pairs(quick: bool) -> list[tuple[str, str]]:
    """All pairs; or, quick, the first dialect's identity pair and a ring of translating pairs
    in which every dialect is client once and upstream once."""
    order = list(DIALECTS)
    if not quick:
        return [(c, u) for c in order for u in order]
    ring = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    return [(order[0], order[0]), *[p for p in ring if p[0] != p[1]]]


def soak_pair() -> tuple[str, str]:
    order = list(DIALECTS)
    client = next((s for s in order if _BY_SHORT[s].KEEPS_STATE), order[0])
    return client, next((s for s in reversed(order) if s != client), client)


def answer_text(chunks: int) -> str:
    return WORD * chunks


def stream_path(dialect: str, path: str) -> str:
    """The path a client POSTs a streamed request to (a module whose model and method are in
    the path says it with ``path_for(path, stream)``)."""
    path_for = getattr(_BY_SHORT[dialect], "path_for", None)
    if path_for is not None:
        built: str = path_for(path, True)
        return built
    suffix = _BY_SHORT[dialect].STREAM_SUFFIX
    return path.rstrip("/") + suffix if suffix else path


def whole_path(dialect: str, path: str) -> str:
    """The path a client POSTs a whole request to: ``path``, unless the module's ``path_for``
    builds another."""
    path_for = getattr(_BY_SHORT[dialect], "path_for", None)
    if path_for is not None:
        built: str = path_for(path, False)
        return built
    return path


def upstream_extra(dialect: str) -> dict[str, Any]:
    return dict(_BY_SHORT[dialect].UPSTREAM)


def request(dialect: str, stream: bool) -> tuple[bytes, dict[str, str]]:
    """A client request body and its headers."""
    body, headers = _BY_SHORT[dialect].request(stream)
    return orjson.dumps(body), {"Content-Type": "application/json", **headers}


def refusal(dialect: str, body: dict[str, Any], headers: Any) -> str | None:
    """Why an upstream of ``dialect`` would refuse this request, or None to answer it."""
    return _BY_SHORT[dialect].refusal(body, headers)


def wants_stream(dialect: str, path_stream: bool | None, body: dict[str, Any],
                 headers: Any) -> bool:
    """Whether an upstream of ``dialect`` streams this request: the path decides when it can
    (``path_stream``), else the dialect (a body flag, a header)."""
    if path_stream is not None:
        return path_stream
    return _BY_SHORT[dialect].wants_stream(body, headers)


def whole_body(dialect: str, chunks: int) -> bytes:
    return orjson.dumps(_BY_SHORT[dialect].whole_body(chunks))


def stream_frames(dialect: str, chunks: int) -> list[bytes]:
    """The framed pieces of a streamed answer of ``chunks`` text chunks, one write each."""
    return _BY_SHORT[dialect].stream_frames(chunks)


def streams_only(dialect: str) -> bool:
    """An upstream of ``dialect`` answers even a request for a whole answer with its stream (a
    protocol without a whole answer: its module reads a whole answer's body itself)."""
    return hasattr(_BY_SHORT[dialect], "whole_body_text")


def whole_text(dialect: str, body: bytes) -> str:
    """The answer text of a whole answer; a module reads the body itself when it names
    ``whole_body_text`` (an answer that may not be JSON: a protocol without a whole answer)."""
    wire = _BY_SHORT[dialect]
    own: Reassemble | None = getattr(wire, "whole_body_text", None)
    try:
        return own(body) if own is not None else wire.whole_text(orjson.loads(body))
    except (KeyError, IndexError, TypeError, AttributeError, orjson.JSONDecodeError) as e:
        raise WireError(f"unexpected whole answer ({type(e).__name__}: {e}): {body[:200]!r}") \
            from None


def stream_text(dialect: str, body: bytes) -> str:
    """The answer text of a whole stream body, reassembled as that dialect's client would."""
    try:
        return _BY_SHORT[dialect].stream_text(body)
    except WireError:
        raise
    except (KeyError, IndexError, TypeError, AttributeError, orjson.JSONDecodeError) as e:
        raise WireError(f"unexpected stream ({type(e).__name__}: {e}): {body[:200]!r}") from None
