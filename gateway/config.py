"""The YAML config: pydantic models, ``${VAR}`` interpolation, errors that name their YAML path.

The keys of the minimum shape (``server.host/port``, ``upstreams.<name>.dialect/url/stream_url/
model/headers/timeout``, ``routes[].path/dialect/upstream``) are a public contract: extend, never
rename.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Collection, Iterable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gateway.carry import DEFAULT_POLICIES, GOVERNED, Policies
from gateway.dialects import DIALECTS, get
from gateway.errors import ConfigError
from gateway.secrets import Scrubber, secrets_of

__all__ = [
    "ENV_REFERENCE",
    "ENV_REFERENCE_SCHEMA",
    "RESERVED_PATHS",
    "RETIRED_SERVER_VALUES",
    "AuthConfig",
    "CorsConfig",
    "GatewayConfig",
    "HealthConfig",
    "HistoryConfig",
    "KeyConfig",
    "KeyLimits",
    "LimitsConfig",
    "ResponsesStoreConfig",
    "RetryConfig",
    "RouteConfig",
    "RouteUpstream",
    "ServerConfig",
    "TracingConfig",
    "UpstreamConfig",
    "check_structure",
    "load_config",
    "parse_config",
    "read_config_file",
    "retired_settings",
]



def _known_dialect(name: str) -> str:
    if name not in DIALECTS:
        raise ValueError(f"unknown dialect {name!r} (known: {', '.join(DIALECTS)})")
    return name


def _dialect_schema(schema: dict[str, Any]) -> None:
    # the registry's names, read when the schema is made; or a ${VAR} like any other value
    schema.pop("type", None)
    schema["anyOf"] = [{"type": "string", "enum": list(DIALECTS)}, dict(ENV_REFERENCE_SCHEMA)]


def _or_env(prop: dict[str, Any]) -> dict[str, Any]:
    """A dialect's route option as the config schema shows every non-string value: it may
    also be a ``${VAR}`` reference."""
    if "enum" not in prop and "const" not in prop and \
            prop.get("type") not in ("integer", "number", "boolean"):
        return prop
    outer: dict[str, Any] = {k: prop[k] for k in ("title", "description", "default") if k in prop}
    inner = {k: v for k, v in prop.items() if k not in outer}
    return {**outer, "anyOf": [inner, dict(ENV_REFERENCE_SCHEMA)]}


DialectName = Annotated[str, AfterValidator(_known_dialect), WithJsonSchema({"type": "string"}),
                        Field(json_schema_extra=_dialect_schema)]
"""A registered dialect's name (:mod:`gateway.dialects`): the registry is the only list."""
RESERVED_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/admin/reload",
                            "/admin/usage",
                            "/api/status"})
Seconds = Annotated[float, Field(gt=0)]


class _Model(BaseModel):
    # use_attribute_docstrings: the docstring under each field is its description in the JSON
    # Schema (`chat-gateway schema`), so editors show the same words as this file.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class CorsConfig(_Model):
    """Off unless ``allow_origins`` names at least one origin (``"*"`` for any)."""

    allow_origins: list[str] = []
    """Origins whose browser requests are allowed (``Access-Control-Allow-Origin``); ``"*"`` for
    any."""
    allow_headers: list[str] = ["Content-Type", "Authorization", "X-Request-ID", "api-key"]
    """Request headers a browser may send (``Access-Control-Allow-Headers``)."""
    allow_credentials: bool = False
    """Allow cookies and credentials on cross-origin requests."""
    max_age: int = 600
    """Seconds a browser may cache a preflight answer."""


class ServerConfig(_Model):
    """The listener and what the gateway itself serves."""

    host: str = "127.0.0.1"
    """Address to listen on (``0.0.0.0`` for every interface); ``serve --host`` overrides it."""
    port: int = Field(8080, ge=0, le=65535)
    """Port to listen on; ``serve --port`` overrides it."""
    max_body_bytes: int = Field(1024 * 1024, gt=0)
    """Request bodies past this get 413."""
    shutdown_grace: Seconds = 30.0
    """On SIGTERM, how long in-flight streams may take to finish."""
    header_timeout: Seconds = 10.0
    """Seconds a client has to send a request's line and headers, counted from the connection's
    accept, or on a keep-alive connection from the end of the previous answer (so it also
    bounds an idle keep-alive connection). Past it the connection is closed without an answer.
    Enforced on every listener, the admin one included. Read at start."""
    body_timeout: Seconds = 30.0
    """Longest silence while a request's body is read. Past it the client gets 408 in its
    route's dialect and the connection is closed. Read at start."""
    max_connections: int | None = Field(None, ge=1)
    """Most client connections open at once in one process (a worker), both listeners
    together; past it a new connection gets 503 and is closed at once while the established
    ones go on. Default: what the open-file limit leaves room for, two descriptors a
    connection (the client's and its upstream's) after a reserve of 100, at most 10,000. The
    gateway raises its soft open-file limit to the hard limit at start. Read at start."""
    cors: CorsConfig = CorsConfig()
    """Cross-origin (browser) access; off unless ``allow_origins`` is set."""
    admin: bool = True
    """Serve ``POST /admin/reload`` (answered only to loopback clients)."""
    upstream_client: Literal["fast", "aiohttp"] = "fast"
    """How upstreams are reached: ``fast``, the gateway's own HTTP/1.1 keep-alive client
    (httptools), or ``aiohttp``, aiohttp's client (the fallback). Read at start; a reload does
    not switch it."""
    http_layer: Literal["fast", "aiohttp"] = "aiohttp"
    """How the chat routes meet HTTP: ``aiohttp``, aiohttp's parser, router, middleware and
    response objects for every request, behind the edge's limits. ``fast`` (a lane of the
    gateway's own beside aiohttp's parser) is retired: still accepted, served as ``aiohttp``,
    with a warning from ``check`` and at start (:func:`retired_settings`)."""
    stream_accelerators: bool | list[Literal["forward", "templates", "runs"]] = True
    """The fast paths beside the plain decode-translate-encode path of a stream
    (:mod:`gateway.pipeline_fast`): ``true`` all, ``false`` none, or a list of ``forward``
    (an identity route's whole frames sent as they came), ``templates`` (text frames read
    without parsing them) and ``runs`` (rows of text frames read at once; needs
    ``templates``). The client gets the same bytes either way (tests/test_accelerators.py);
    only the CPU differs."""
    batch_writes: bool = True
    """Whole answers, and the upstream requests for them, leave in batches: each is written on
    the event loop's next turn, with the others made during this one, so that a peer that
    sleeps between them (a client, a local model server) is woken once for the batch rather
    than once for each, as aiohttp's client writes its requests. It costs each of them one
    turn of the loop. So does a stream whose upstream answered at once (its frames and its end
    came in one read, and go out in one write). A stream's request, and the frames of a stream
    still coming, are written at once: their first byte waits for nothing. ``false``:
    everything is written as soon as it is ready."""
    loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    """The event loop: ``auto`` is uvloop when it is installed, else asyncio's own
    (``--loop`` overrides it). Read at start."""
    admin_port: int | None = Field(None, ge=0, le=65535)
    """When set, ``/metrics``, ``/api/status``, ``/``, ``/static/*`` and ``/admin/*`` are
    served on this port only (a second listener of the same process; every worker shares it
    as it shares ``port``), and no longer on ``port``. Read at start."""
    admin_host: str | None = None
    """Address of the admin listener (default: ``host``), e.g. ``127.0.0.1`` to keep it
    local while ``host`` is ``0.0.0.0``. Read at start."""
    trusted_proxies: list[str] = []
    """Addresses or CIDRs (``10.0.0.0/8``, ``::1``) of proxies in front of the gateway: a
    request from one of them has its ``X-Forwarded-For`` chain kept (the gateway appends the
    peer) and its client read from that chain; from any other peer a new chain starts."""
    upstream_user_agent: str = "pass"
    """The ``User-Agent`` sent upstream: ``pass`` (the client's, when it sent one), ``none``
    (no such header), or any other text, sent as it is. An upstream's own ``headers`` win."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for entry in v:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or CIDR") from None
        return v

    @model_validator(mode="after")
    def _two_ports(self) -> ServerConfig:
        if self.admin_port and self.admin_port == self.port:
            raise ValueError(f"admin_port {self.admin_port} is also the main port")
        return self


class LoggingConfig(_Model):
    """The structured log written to stdout."""

    format: Literal["json", "console"] = "json"
    """``json``: one JSON object per line; ``console``: for people. ``--log-format`` overrides
    it."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe events logged."""


LIMIT_NAMES = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "tokens_per_month",
               "max_concurrent")
"""The limits a named key may set (:class:`KeyLimits`), a public contract."""


class KeyLimits(_Model):
    """A named key's limits (docs/operations.md#keys-with-limits); one left out is not
    enforced. ``limits: {}`` enforces nothing but keeps the key's usage in the limits store."""

    requests_per_minute: int | None = Field(None, ge=1)
    """Requests admitted in any sliding minute."""
    tokens_per_minute: int | None = Field(None, ge=1)
    """Tokens (prompt + completion) in any sliding minute."""
    tokens_per_day: int | None = Field(None, ge=1)
    """Tokens (prompt + completion) in any sliding 24 hours."""
    tokens_per_month: int | None = Field(None, ge=1)
    """Tokens (prompt + completion) in any sliding 30 days."""
    max_concurrent: int | None = Field(None, ge=1)
    """Requests and streams of this key in flight at once, across every replica."""


KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class KeyConfig(_Model):
    """A named client key: its name is what metrics, logs and ``/admin/usage`` show, never the
    key itself."""

    name: str
    """Letters, digits, ``.``, ``_`` and ``-`` (at most 64): a metric label and a store key."""
    key: str
    """The secret the client presents, as an ``auth.api_keys`` key is presented."""
    routes: list[str] | None = None
    """Route paths this key may use (absent: every route); any other answers 403."""
    limits: KeyLimits | None = None
    """Absent: the key is only named (metrics and logs), and never touches the limits store."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not KEY_NAME.fullmatch(v):
            raise ValueError("must be 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit")
        return v

    @field_validator("routes")
    @classmethod
    def _routes(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [p.rstrip("/") or "/" for p in v]

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the key is empty (is its environment variable set?)")
        return v


class AuthConfig(_Model):
    """Client authentication."""

    api_keys: list[str] = []
    """When set, every route requires ``Authorization: Bearer <key>`` or ``api-key: <key>``."""
    keys: list[KeyConfig] = []
    """Named keys, accepted wherever ``api_keys`` are, each with optional route allow-list and
    limits."""

    @field_validator("api_keys")
    @classmethod
    def _no_blank(cls, v: list[str]) -> list[str]:
        if any(not k.strip() for k in v):
            raise ValueError("an API key is empty (is its environment variable set?)")
        return v

    @model_validator(mode="after")
    def _distinct(self) -> AuthConfig:
        names: set[str] = set()
        secrets = set(self.api_keys)
        for i, k in enumerate(self.keys):
            if k.name in names:
                raise ValueError(f"keys[{i}]: the name {k.name!r} is used twice")
            if k.key in secrets:
                raise ValueError(f"keys[{i}] ({k.name}): its key is already another key's")
            names.add(k.name)
            secrets.add(k.key)
        return self

    @cached_property
    def accepted_keys(self) -> tuple[str, ...]:
        """Every key a client may present: ``api_keys`` and the named keys' (a frozen model's
        answer never changes)."""
        return (*self.api_keys, *(k.key for k in self.keys))

    @cached_property
    def limited(self) -> bool:
        """Some named key has ``limits`` (the limits store is in use)."""
        return any(k.limits is not None for k in self.keys)


class LimitsConfig(_Model):
    """Where the named keys' limits and usage are counted (docs/operations.md#keys-with-limits)."""

    store: str = "memory"
    """``memory`` (this process only; with ``--workers N`` each worker counts its own) or
    ``redis://host:6379/0`` (``rediss://`` for TLS): every replica shares the counters."""
    on_store_error: Literal["allow", "deny"] = "allow"
    """While the store cannot be reached: ``allow`` admits requests unlimited, ``deny`` answers
    them 503."""
    default_output_tokens: int = Field(1024, ge=1)
    """The output a request reserves when it names no maximum of its own."""
    timeout: Seconds = 2.0
    """Bound on connecting to the store and on each answer of it; past it the store counts as
    unreachable. Redis answers in a millisecond, but a process serving a burst reads its
    answers late: a bound near its event loop's lag would call a busy process's store
    unreachable."""
    retry_interval: Seconds = 1.0
    """After a store failure, how long requests get ``on_store_error`` before the store is asked
    again."""
    pool_size: int = Field(32, ge=1, le=1000)
    """Most store connections one gateway process holds open."""
    lease: Seconds = 600.0
    """The longest one request holds its ``max_concurrent`` slot: a replica that dies with
    requests in flight frees their slots after this."""

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        if v == "memory":
            return v
        from urllib.parse import urlsplit

        try:
            u = urlsplit(v)
            u.port  # noqa: B018 (read for its check: a port that is no number raises)
        except ValueError as e:
            raise ValueError(f"not a store URL: {e}") from None
        if u.scheme not in ("redis", "rediss"):
            raise ValueError("must be 'memory' or a redis://host:port/db URL")
        if not u.hostname:
            raise ValueError("the redis URL names no host")
        db = u.path.lstrip("/")
        if db and not db.isdigit():
            raise ValueError(f"the redis database must be a number, not {db!r}")
        return v


class HealthConfig(_Model):
    """Passive health checks: upstreams that keep failing are taken out for a while."""

    failure_threshold: int = Field(5, ge=1)
    """Consecutive failures that take an upstream out."""
    ejection_seconds: Seconds = 30.0
    """How long it stays out before one trial request."""


class UpstreamConfig(_Model):
    """A backend the gateway forwards to, in its own dialect."""

    dialect: DialectName
    """The dialect the upstream speaks."""
    url: str
    """The chat endpoint, full URL."""
    stream_url: str | None = None
    """Where streamed requests go (protocol-2024-05-29: ``url + "/stream"``; others: ``url``)."""
    model: str | None = None
    """Sent to upstreams whose dialect names a model when the client names none."""
    models: list[str] = []
    """More models this upstream serves, for the model list of the routes that use it
    (``GET /v1/models``, where the route's dialect lists models); ``model`` is listed too."""
    max_tokens: int | None = Field(None, gt=0)
    """The output cap sent when the client sets none, to a dialect that requires one
    (Anthropic's ``max_tokens``); unset, such a dialect gets 4096."""
    headers: dict[str, str] = {}
    """Headers sent with every request to it (credentials: use ``${VAR}``); never logged."""
    timeout: Seconds = 60.0
    """Bound on a whole answer, and on the wait for a stream's first event."""
    connect_timeout: Seconds = 5.0
    """Bound on opening a connection to it."""
    first_byte_timeout: Seconds | None = None
    """Bound from the request to the response headers and, for a stream, to its first event
    (keep-alive comments, blank lines and trickled bytes do not count); defaults to
    ``timeout``."""
    idle_timeout: Seconds | None = None
    """Longest wait for the next event of a stream (keep-alives do not count); defaults to
    ``timeout``."""
    max_stream_seconds: Seconds | None = None
    """Longest a stream may run, from the request to its end; past it the client gets its
    dialect's error event (a timeout). Default: no limit."""
    streaming: Literal["auto", "always", "never"] = "auto"
    """auto: stream when the client does; always: the upstream only streams; never: it never
    does."""
    custom_tools: CustomTools = "native"
    """Freeform (``custom``) tools, such as Codex's ``apply_patch``, to an upstream whose dialect
    has them (Chat Completions): ``native`` sends them as such; ``function`` sends each as a
    function of one string argument ``input`` and unwraps its calls, as for a dialect without
    them (servers that take only function tools: vLLM, llama.cpp, Ollama)."""
    max_inflight: int | None = Field(None, ge=1)
    """Most concurrent requests to it (default: no limit); past it, requests wait up to
    ``queue_timeout``."""
    queue_timeout: Seconds = 5.0
    """How long a request waits for a ``max_inflight`` slot before 503."""
    health_url: str | None = None
    """Fetched every ``health_interval`` when set; a non-2xx answer takes the upstream out."""
    health_interval: Seconds = 10.0
    """Seconds between two active health checks."""
    max_line_bytes: int = Field(8 * 1024 * 1024, gt=0)
    """Longest stream line or event accepted from the upstream."""

    @field_validator("url", "stream_url", "health_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an absolute http:// or https:// URL")
        return v

    @cached_property
    def has_own_credentials(self) -> bool:
        """Credentials of its own: an ``Authorization``, ``api-key``, ``x-api-key`` or
        ``x-goog-api-key`` header,
        or a ``user:password@`` in a URL (then the client's key is never passed on). Cached: a
        frozen config's answer never changes."""
        own = {k.lower() for k in self.headers}
        return bool(own & {"authorization", "api-key", "x-api-key", "x-goog-api-key"}) or any(
            u is not None and "@" in u.split("/", 3)[2] for u in (self.url, self.stream_url))

    @cached_property
    def scrubber(self) -> Scrubber:
        """Hides this upstream's credentials and addresses in text it sends back (its error
        messages) before they reach a client or a log (:mod:`gateway.secrets`). Cached: built
        once per config."""
        return Scrubber(secrets_of(
            (self.url, self.stream_url, self.effective_stream_url, self.health_url),
            self.headers))

    @property
    def effective_stream_url(self) -> str:
        if self.stream_url:
            return self.stream_url
        suffix = get(self.dialect).stream_path
        return self.url.rstrip("/") + suffix if suffix else self.url


CustomTools = Literal["native", "function"]
GovernedField = Literal["default", "tools", "hosted_tools", "tool_choice", "tool_calls",
                        "tool_results", "images", "content_parts", "reasoning",
                        "reasoning_effort", "structured_output", "options", "request_fields"]
"""The keys of a per-field ``on_unsupported``: :data:`gateway.carry.GOVERNED`, and ``default``."""


class RouteUpstream(_Model):
    """One of a route's upstreams, with its share of the traffic."""

    name: str
    """A key of ``upstreams``."""
    weight: float = Field(1.0, gt=0)
    """Relative share of requests under the ``weighted`` strategy."""


class RetryConfig(_Model):
    """How a route tries its upstreams again before the first byte reaches the client."""

    attempts: int | None = Field(None, ge=1)
    """Total attempts per request; defaults to one per upstream of the route."""
    total_timeout: Seconds = 120.0
    """Bound on all attempts of one request before its first byte."""
    retry_after_max: float = Field(5.0, ge=0)
    """Longest ``Retry-After`` honoured before the next attempt."""


class _NoRouteOptions(_Model):
    """The route options of a dialect that declares none: any key is unknown."""


def _route_schema(schema: dict[str, Any]) -> None:
    # The keys a route may have: its own, and the route options the dialects declare (each
    # valid with its dialect only, which ``_dialect_options`` checks); no other.
    schema["additionalProperties"] = False
    for name, dialect in DIALECTS.items():
        if dialect.route_options is None:
            continue
        for key, prop in dialect.route_options.model_json_schema().get("properties", {}).items():
            about = f"Routes of dialect {name} only. {prop.get('description', '')}".strip()
            schema["properties"].setdefault(key, _or_env({**prop, "description": about}))


class RouteConfig(_Model):
    """A path the gateway serves, in one dialect, from one or more upstreams."""

    # Keys beyond these are the route options its dialect declares (``route_options``),
    # validated in ``_dialect_options``.
    model_config = ConfigDict(extra="allow", frozen=True, json_schema_extra=_route_schema)

    path: str
    """Where clients POST (a dialect with a stream path also serves ``path + "/stream"``)."""
    dialect: DialectName
    """The dialect clients of this path speak."""
    upstream: str | list[str | RouteUpstream]
    """An upstream's name, or a list of names or ``{name, weight}``, of any dialects."""
    strategy: Literal["failover", "round-robin", "weighted"] = "failover"
    """How a request picks among several upstreams."""
    retries: RetryConfig = RetryConfig()
    """Further attempts on other upstreams when one fails before answering."""
    content_type: Literal["application/json-lines", "application/jsonl"] | None = None
    """JSON-lines routes only: the stream's Content-Type (default application/json-lines)."""
    on_unsupported: Literal["reject", "drop"] | dict[GovernedField, Literal["reject", "drop"]] \
        = Field(default_factory=dict)
    """What a request or an answer carries that the other side's dialect cannot (tools, a
    provider's built-in tools, tool calls, images and other content parts, reasoning, structured
    output, and the request fields a dialect's field table leaves to the policy, such as ``n``
    or ``mcp_servers``: field ``request_fields``): ``reject`` answers an error naming the field
    (400 for a request, 502 for an answer); ``drop`` takes it out, counts it in
    ``gateway_dropped_fields_total``, logs it and names it in the answer's ``X-Gateway-Dropped``
    header. One word for every field, or a mapping of field to policy (``{hosted_tools:
    reject}``; ``default`` for the fields not named). Fields neither names follow the gateway's
    defaults: ``tools``, ``hosted_tools``, ``tool_choice`` and ``reasoning_effort`` (what the
    client offers the model, and how hard it asks it to think) are dropped, the others rejected
    (docs/translation.md#what-is-dropped-and-why). A request field whose loss changes nothing
    the client reads back (``cache_control``, ``logit_bias``, ``metadata``...) is left out and
    reported whatever the policy (docs/translation.md, "Every request field, per pair")."""
    mint_session_state: bool = False
    """Routes whose dialect carries session state only. A request whose session state is null or
    absent gets a new one from the gateway (32 random hex characters, 128 bits from the OS's
    random source) before the upstream call: sent upstream where the upstream's dialect carries
    session state, and given back to the client in its answer (whole and streamed), so that its
    next turn sends it back. A session state the upstream answers with wins. For frontends that
    keep no history without one (the RAG demo app sends ``session_state: null``)."""

    responses_state: Literal["gateway", "upstream"] | None = None
    """Routes whose dialect's API keeps its answers (OpenAI Responses: ``store``,
    ``previous_response_id``, ``item_reference``, ``GET``/``DELETE`` of a response) only. Who
    keeps them: ``gateway``, the gateway itself in its ``responses_store`` (references are
    resolved into the upstream request, whatever its dialect); ``upstream``, the upstream (the
    request goes on as it came; a route with an upstream of another dialect then refuses
    references). Default: ``gateway`` when a ``responses_store`` section is set and an upstream
    of the route speaks another dialect, else ``upstream``."""

    @model_validator(mode="after")
    def _keeps_what_its_dialect_stores(self) -> RouteConfig:
        from gateway.dialects.stored import stored_responses_of

        if self.responses_state is not None and self.dialect in DIALECTS \
                and stored_responses_of(get(self.dialect)) is None:
            raise ValueError(f"responses_state: the {self.dialect} dialect's API keeps no "
                             "answers")
        return self

    @model_validator(mode="after")
    def _mints_a_state_it_can_carry(self) -> RouteConfig:
        if self.mint_session_state and self.dialect in DIALECTS \
                and get(self.dialect).capabilities.session_state == "none":
            raise ValueError(f"mint_session_state: the {self.dialect} dialect carries no "
                             "session state")
        return self

    @model_validator(mode="after")
    def _dialect_options(self) -> RouteConfig:
        extra = dict(self.model_extra or {})
        if not extra:
            return self
        model = get(self.dialect).route_options if self.dialect in DIALECTS else None
        (model or _NoRouteOptions).model_validate(extra)  # its errors name the key
        return self

    @cached_property
    def options(self) -> dict[str, Any]:
        """The dialect's route options, validated, with their defaults."""
        model = get(self.dialect).route_options
        if model is None:
            return {}
        return model.model_validate(dict(self.model_extra or {})).model_dump()

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with /")
        v = v.rstrip("/") or "/"
        if v in RESERVED_PATHS:
            raise ValueError(f"{v} is served by the gateway itself")
        return v

    @cached_property
    def policies(self) -> Policies:
        """:attr:`on_unsupported` resolved: one policy, or one per governed field."""
        given = self.on_unsupported
        if isinstance(given, str):
            return given
        base = dict(DEFAULT_POLICIES)
        if "default" in given:
            base = dict.fromkeys(GOVERNED, given["default"])
        base.update({k: v for k, v in given.items() if k != "default"})
        return base

    @cached_property
    def upstreams(self) -> tuple[RouteUpstream, ...]:
        """The upstreams in one shape. Cached: the balancer reads it on every request, and a
        frozen model's answer never changes."""
        items = self.upstream if isinstance(self.upstream, list) else [self.upstream]
        return tuple(RouteUpstream(name=u) if isinstance(u, str) else u for u in items)


class HistoryConfig(_Model):
    """The Chat UI history API (docs/history.md). No ``history`` section: no history endpoints."""

    path: str = "/chat-history"
    """Where the API is served: ``{path}``, ``{path}/{chatId}``, ``{path}/{chatId}/messages``."""
    store: str = "sqlite:///data/history.db"
    """``sqlite:///relative/file.db``, ``sqlite:////absolute/file.db`` or
    ``postgresql://user:password@host:5432/db`` (several replicas share one PostgreSQL)."""
    pool_size: int = Field(5, ge=1, le=100)
    """Most database connections one gateway process holds open."""
    timeout: Seconds = 5.0
    """Bound on connecting, on waiting for a pooled connection and on one statement; past it
    the history answers 503."""

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        v = v.rstrip("/")
        if not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", v):
            raise ValueError("must be a path like /chat-history (letters, digits, . _ ~ -)")
        if v in RESERVED_PATHS:
            raise ValueError(f"{v} is served by the gateway itself")
        return v

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        from gateway.history.url import parse_store_url  # SQLAlchemy only when configured

        parse_store_url(v)
        return v


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(v: Any) -> Any:
    """``30d``, ``12h``, ``45m``, ``90s`` or a number of seconds, as seconds."""
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m is None:
            raise ValueError("must be a duration like 30d, 12h, 45m, 90s (or seconds)")
        return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    return v


def _duration_schema(schema: dict[str, Any]) -> None:
    # seconds, a duration with its unit, or a ${VAR} like any other value
    number = {"type": "number", "exclusiveMinimum": 0}
    for key in number:
        schema.pop(key, None)
    schema["anyOf"] = [number, {"type": "string", "pattern": _DURATION.pattern},
                       dict(ENV_REFERENCE_SCHEMA)]


Duration = Annotated[float, BeforeValidator(_duration),
                     Field(gt=0, json_schema_extra=_duration_schema)]
"""Seconds, or a duration with its unit (``30d``, ``12h``, ``45m``, ``90s``)."""


class ResponsesStoreConfig(_Model):
    """Where the gateway keeps a stateful client API's answers (OpenAI Responses with
    ``store``) for the routes that keep them at the gateway (``responses_state``;
    docs/translation.md#stored-responses). No section: the gateway keeps none."""

    store: str | None = None
    """The database, as ``history.store`` (the history's own database when unset and a
    ``history`` section is set, else ``sqlite:///data/history.db``); tables of its own, migrated
    at start like the history's. Several replicas share one PostgreSQL."""
    retention: Duration = 30 * 86400.0
    """How long a stored response and its items are kept (``30d``, ``12h``, ``90m``, or
    seconds): older ones are never served, and are purged every hour and at start."""
    pool_size: int = Field(5, ge=1, le=100)
    """Most database connections one gateway process holds open for it."""
    timeout: Seconds = 5.0
    """Bound on connecting, on waiting for a pooled connection and on one statement; past it
    a request that needs the store answers 503."""

    @field_validator("store")
    @classmethod
    def _store(cls, v: str | None) -> str | None:
        from gateway.history.url import parse_store_url  # SQLAlchemy only when configured

        if v is not None:
            parse_store_url(v)
        return v

    def history_config(self, history: HistoryConfig | None) -> HistoryConfig:
        """The settings its store opens with (the history store's class serves both)."""
        url = self.store or (history.store if history is not None else HistoryConfig().store)
        return HistoryConfig(store=url, pool_size=self.pool_size, timeout=self.timeout)


class TracingConfig(_Model):
    """OpenTelemetry traces over OTLP/HTTP (docs/operations.md#tracing). A key left out is read
    from the standard ``OTEL_*`` environment variables, then from the default. Read at start."""

    enabled: bool = True
    """``false`` turns tracing off, also when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set."""
    otlp_endpoint: str | None = None
    """The collector's OTLP/HTTP base URL (``http://collector:4318``; ``/v1/traces`` is
    appended unless the URL already ends with it). Default: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    or ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``."""
    service_name: str | None = None
    """``service.name`` of the spans. Default: ``OTEL_SERVICE_NAME``, else ``chat-gateway``."""
    sample_ratio: float | None = Field(None, ge=0, le=1)
    """Share of new traces recorded (a request with a ``traceparent`` follows its sampled
    flag). Default: ``OTEL_TRACES_SAMPLER_ARG``, else 1.0."""
    headers: dict[str, str] | None = None
    """Headers sent to the collector (``Authorization: Bearer ${OTLP_TOKEN}``). Default:
    ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` or ``OTEL_EXPORTER_OTLP_HEADERS``."""
    timeout: Seconds = 10.0
    """Bound on one export to the collector (spans are exported in the background)."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an absolute http:// or https:// URL")
        return v


class GatewayConfig(_Model):
    """The chat-gateway config file. ``${VAR}`` and ``${VAR:-default}`` in any value are read
    from the environment."""

    server: ServerConfig = ServerConfig()
    """The listener."""
    logging: LoggingConfig = LoggingConfig()
    """The log."""
    auth: AuthConfig = AuthConfig()
    """Client API keys."""
    health: HealthConfig = HealthConfig()
    """Passive health checks of the upstreams."""
    upstreams: dict[str, UpstreamConfig]
    """The backends, by name."""
    routes: list[RouteConfig] = Field(min_length=1)
    """The paths the gateway serves."""
    history: HistoryConfig | None = None
    """The Chat UI history API (absent: not served)."""
    tracing: TracingConfig | None = None
    """OpenTelemetry traces; off unless this section (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) is
    set."""
    responses_store: ResponsesStoreConfig | None = None
    """Stored responses kept by the gateway (absent: none; a route's ``responses_state:
    gateway`` needs it)."""
    limits: LimitsConfig = LimitsConfig()
    """Where the named keys' limits are counted (``auth.keys``)."""

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        problems = _cross_references(self.upstreams, enumerate(self.routes))
        if self.responses_store is None:
            problems.extend((f"routes[{i}].responses_state", "gateway needs a responses_store "
                             "section (where the gateway keeps them)")
                            for i, r in enumerate(self.routes) if r.responses_state == "gateway")
        paths = {route.path for route in self.routes}
        for i, key in enumerate(self.auth.keys):
            for j, path in enumerate(key.routes or ()):
                if path not in paths:
                    problems.append((f"auth.keys[{i}].routes[{j}]",
                                     f"no route serves {path} (routes: "
                                     f"{', '.join(sorted(paths))})"))
        if self.history is not None:
            served = {p: i for i, route in enumerate(self.routes)
                      for p in self.served_paths(route)}
            problems.extend(self._history_collisions(self.history.path, served))
        if problems:
            raise _References(problems)
        return self

    @staticmethod
    def _history_collisions(path: str, routes: dict[str, int]) -> list[tuple[str, str]]:
        """The history API serves ``path`` and everything under it."""
        def under(p: str) -> bool:
            return p == path or p.startswith(path + "/")

        own = [p for p in sorted(RESERVED_PATHS) if p != "/" and under(p)]
        out = [("history.path", f"{path} would shadow the gateway's own {', '.join(own)}")] \
            if own else []
        out += [("history.path", f"{path} would shadow routes[{i}] ({p})")
                for p, i in routes.items() if under(p)]
        return out

    @staticmethod
    def served_paths(route: RouteConfig) -> list[str]:
        suffix = get(route.dialect).stream_path
        return [route.path, route.path.rstrip("/") + suffix] if suffix else [route.path]


def _cross_references(upstreams: Collection[str],
                      routes: Iterable[tuple[int, RouteConfig]]) -> list[tuple[str, str]]:
    """What the routes name that does not exist, and paths two routes both serve. A function of
    its own so that ``check`` can run it on the routes that validated when others did not."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for i, route in routes:
        if not route.upstreams:
            problems.append((f"routes[{i}].upstream", "names no upstream"))
        for j, u in enumerate(route.upstreams):
            if u.name not in upstreams:
                where = f"routes[{i}].upstream" + (
                    f"[{j}]" if isinstance(route.upstream, list) else "")
                known = ", ".join(sorted(upstreams)) or "none"
                problems.append((where, f"unknown upstream {u.name!r} (known: {known})"))
        for p in GatewayConfig.served_paths(route):
            if p in seen:
                problems.append((f"routes[{i}].path",
                                 f"{p} is already served by routes[{seen[p]}]"))
            seen[p] = i
    return problems


class _References(ValueError):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{w}: {m}" for w, m in problems))
        self.problems = problems


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
ENV_REFERENCE = _VAR
"""A ``${VAR}`` or ``${VAR:-default}`` reference inside a string value."""
ENV_REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": ENV_REFERENCE.pattern,
    "description": "Read from the environment when the config is loaded: ${VAR} or "
                   "${VAR:-default}.",
}
"""The JSON Schema of such a reference: allowed beside every non-string value."""


def _interpolate(value: Any, where: str, env: dict[str, str],
                 problems: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env and (env[name] or default is None):
                return env[name]
            if default is not None:
                return default
            problems.append((where, f"environment variable {name} is not set"))
            return ""
        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, _join(where, k), env, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{where}[{i}]", env, problems) for i, v in enumerate(value)]
    return value


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "RouteUpstream", "list[union[str,RouteUpstream]]") or "[" in str(part):
            continue  # pydantic's name for a union branch, not a YAML key
        else:
            out = _join(out, part)
    return out


def parse_config(data: Any, env: dict[str, str] | None = None) -> GatewayConfig:
    """A validated config from parsed YAML; :class:`ConfigError` lists every problem with its
    YAML path (``routes[2].upstream``)."""
    config, problems = _validate(data, dict(os.environ) if env is None else env)
    if problems or config is None:
        raise ConfigError(problems)
    return config


def check_structure(data: Any) -> list[str]:
    """Validate parsed YAML without the environment (``check --no-env``): a value holding a
    ``${VAR}`` reference is accepted as it stands, since only the environment the config is
    loaded in can say what it becomes; everything else is checked as :func:`parse_config` checks
    it. Raises :class:`ConfigError` listing every problem; returns the YAML paths of the values
    left to the environment."""
    _, problems = _validate(data, None)
    if problems:
        raise ConfigError(problems)
    from_env: list[str] = []
    _env_paths(data, "", from_env)
    return from_env


def _validate(data: Any, env: dict[str, str] | None
              ) -> tuple[GatewayConfig | None, list[tuple[str, str]]]:
    """The config and every problem found in one pass; ``env=None`` leaves ``${VAR}`` as it is."""
    if not isinstance(data, dict):
        return None, [("", "the config must be a YAML mapping")]
    problems: list[tuple[str, str]] = []
    from_env: list[str] = []
    if env is None:
        _env_paths(data, "", from_env)
    else:
        data = _interpolate(data, "", env, problems)
        from_env = [where for where, _ in problems]
    try:
        return GatewayConfig.model_validate(data), problems
    except ValidationError as e:
        found, references_ran = _problems(e)
    if not references_ran:
        # pydantic runs the cross-reference checks only on a config whose every field is
        # valid: run them on the routes that are, so one run of `check` shows those problems too.
        found += _partial_cross_references(data)
    # A value from the environment is judged by its own problem (or, unresolved, not at all): the
    # errors an empty or unresolved value then raises where it stands, or in the union or list
    # that holds it, would only repeat it, or blame a value the environment has yet to give.
    hidden = {a for where in from_env for a in _ancestors(where)} | set(from_env)
    problems += [p for p in found if p[0] not in hidden]
    return None, _dedupe(problems)


def _problems(e: ValidationError) -> tuple[list[tuple[str, str]], bool]:
    """pydantic's errors as (YAML path, message), and whether the cross-reference checks ran."""
    problems: list[tuple[str, str]] = []
    references_ran = False
    for err in e.errors():
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _References):
            problems.extend(ctx_err.problems)
            references_ran = True
            continue
        where = _loc(tuple(err["loc"]))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "is required"
        problems.append((where, msg.removeprefix("Value error, ")))
    return problems, references_ran


# The route keys the cross-reference checks read: a route whose other keys are wrong still names
# its upstreams and its path.
_ROUTE_REFERENCE_KEYS = ("path", "dialect", "upstream")


def _partial_cross_references(data: dict[str, Any]) -> list[tuple[str, str]]:
    upstreams, routes = data.get("upstreams"), data.get("routes")
    if not isinstance(upstreams, dict) or not isinstance(routes, list):
        return []
    valid: list[tuple[int, RouteConfig]] = []
    for i, raw in enumerate(routes):
        if not isinstance(raw, dict):
            continue
        try:
            valid.append((i, RouteConfig.model_validate(
                {k: raw[k] for k in _ROUTE_REFERENCE_KEYS if k in raw})))
        except ValidationError:
            continue  # its own errors are reported already
    return _cross_references([str(name) for name in upstreams], valid)


def _env_paths(value: Any, where: str, out: list[str]) -> None:
    """Appends to ``out`` the YAML path of every string holding a ``${VAR}`` reference."""
    if isinstance(value, str):
        if _VAR.search(value):
            out.append(where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _env_paths(v, _join(where, k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _env_paths(v, f"{where}[{i}]", out)


def _ancestors(where: str) -> list[str]:
    """``routes[0].upstream[1]`` -> ``routes``, ``routes[0]``, ``routes[0].upstream``."""
    return [where[:m.start()] for m in re.finditer(r"[.\[]", where) if m.start() > 0]


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))


RETIRED_SERVER_VALUES = {
    ("http_layer", "fast"): "the gateway's own HTTP lane is retired; served as 'aiohttp' "
                            "(aiohttp's public API, the edge's limits unchanged)",
}
"""Values of ``server`` keys that are still accepted but no longer exist, and what serves them
now: public config keys are extended, never broken."""


def retired_settings(data: Any) -> list[tuple[str, str]]:
    """``(YAML path, what replaced it)`` for each retired value a config's parsed YAML (or a
    config's own ``server.model_dump(exclude_unset=True)`` under ``server``) sets."""
    server = data.get("server") if isinstance(data, dict) else None
    if not isinstance(server, dict):
        return []
    return [(f"server.{key}", note) for (key, value), note in RETIRED_SERVER_VALUES.items()
            if server.get(key) == value]


def load_config(path: str | Path, env: dict[str, str] | None = None) -> GatewayConfig:
    """The validated config in a YAML file (see :func:`parse_config`)."""
    return parse_config(read_config_file(path), env)


def read_config_file(path: str | Path) -> Any:
    """A config file's parsed YAML, not yet validated; :class:`ConfigError` when it cannot be
    read or is not YAML."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([("", f"cannot read {path}: {e.strerror}")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([(where, f"not valid YAML: {getattr(e, 'problem', e)}")]) from None
    return data
