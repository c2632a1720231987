"""The YAML config: pydantic models, ``${VAR}`` interpolation, errors that name their YAML path.

The keys of the minimum shape (``server.host/port``, ``upstreams.<name>.dialect/url/stream_url/
model/headers/timeout``, ``routes[].path/dialect/upstream``) are a public contract: extend, never
rename.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.dialects import DIALECT_NAMES, get
from gateway.errors import ConfigError

__all__ = [
    "RESERVED_PATHS",
    "AuthConfig",
    "CorsConfig",
    "GatewayConfig",
    "HealthConfig",
    "RetryConfig",
    "RouteConfig",
    "RouteUpstream",
    "ServerConfig",
    "UpstreamConfig",
    "load_config",
    "parse_config",
]

DialectName = Literal["protocol-2024-01-28", "protocol-2024-05-29", "chatui", "openai"]
assert set(DialectName.__args__) == set(DIALECT_NAMES)  # type: ignore[attr-defined]
RESERVED_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/admin/reload",
                            "/api/status"})
Seconds = Annotated[float, Field(gt=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CorsConfig(_Model):
    """Off unless ``allow_origins`` names at least one origin (``"*"`` for any)."""

    allow_origins: list[str] = []
    allow_headers: list[str] = ["Content-Type", "Authorization", "X-Request-ID", "api-key"]
    allow_credentials: bool = False
    max_age: int = 600


class ServerConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(1024 * 1024, gt=0)
    """Request bodies past this get 413."""
    shutdown_grace: Seconds = 30.0
    """On SIGTERM, how long in-flight streams may take to finish."""
    cors: CorsConfig = CorsConfig()
    admin: bool = True
    """Serve ``POST /admin/reload`` (answered only to loopback clients)."""


class LoggingConfig(_Model):
    format: Literal["json", "console"] = "json"
    level: Literal["debug", "info", "warning", "error"] = "info"


class AuthConfig(_Model):
    api_keys: list[str] = []
    """When set, every route requires ``Authorization: Bearer <key>`` or ``api-key: <key>``."""

    @field_validator("api_keys")
    @classmethod
    def _no_blank(cls, v: list[str]) -> list[str]:
        if any(not k.strip() for k in v):
            raise ValueError("an API key is empty (is its environment variable set?)")
        return v


class HealthConfig(_Model):
    failure_threshold: int = Field(5, ge=1)
    """Consecutive failures that take an upstream out."""
    ejection_seconds: Seconds = 30.0
    """How long it stays out before one trial request."""


class UpstreamConfig(_Model):
    dialect: DialectName
    url: str
    """The chat endpoint, full URL."""
    stream_url: str | None = None
    """Where streamed requests go (protocol-2024-05-29: ``url + "/stream"``; others: ``url``)."""
    model: str | None = None
    """Sent to OpenAI upstreams when the client names no model."""
    headers: dict[str, str] = {}
    timeout: Seconds = 60.0
    """Bound on a whole answer, and on the wait for a stream's first byte."""
    connect_timeout: Seconds = 5.0
    first_byte_timeout: Seconds | None = None
    """Defaults to ``timeout``."""
    idle_timeout: Seconds | None = None
    """Longest silence between two chunks of a stream; defaults to ``timeout``."""
    streaming: Literal["auto", "always", "never"] = "auto"
    """auto: stream when the client does; always: the upstream only streams; never: it never
    does."""
    max_inflight: int | None = Field(None, ge=1)
    queue_timeout: Seconds = 5.0
    """How long a request waits for a ``max_inflight`` slot before 503."""
    health_url: str | None = None
    health_interval: Seconds = 10.0
    max_line_bytes: int = Field(8 * 1024 * 1024, gt=0)
    """Longest stream line or event accepted from the upstream."""

    @field_validator("url", "stream_url", "health_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an absolute http:// or https:// URL")
        return v

    @property
    def effective_stream_url(self) -> str:
        if self.stream_url:
            return self.stream_url
        suffix = get(self.dialect).stream_path
        return self.url.rstrip("/") + suffix if suffix else self.url


class RouteUpstream(_Model):
    name: str
    weight: float = Field(1.0, gt=0)


class RetryConfig(_Model):
    attempts: int | None = Field(None, ge=1)
    """Total attempts per request; defaults to one per upstream of the route."""
    total_timeout: Seconds = 120.0
    """Bound on all attempts of one request before its first byte."""
    retry_after_max: float = Field(5.0, ge=0)
    """Longest ``Retry-After`` honoured before the next attempt."""


class RouteConfig(_Model):
    path: str
    dialect: DialectName
    upstream: str | list[str | RouteUpstream]
    strategy: Literal["failover", "round-robin", "weighted"] = "failover"
    retries: RetryConfig = RetryConfig()
    content_type: Literal["application/json-lines", "application/jsonl"] | None = None
    """JSON-lines routes only: the stream's Content-Type (default application/json-lines)."""

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
    def upstreams(self) -> tuple[RouteUpstream, ...]:
        """The upstreams in one shape. Cached: the balancer reads it on every request, and a
        frozen model's answer never changes."""
        items = self.upstream if isinstance(self.upstream, list) else [self.upstream]
        return tuple(RouteUpstream(name=u) if isinstance(u, str) else u for u in items)


class GatewayConfig(_Model):
    server: ServerConfig = ServerConfig()
    logging: LoggingConfig = LoggingConfig()
    auth: AuthConfig = AuthConfig()
    health: HealthConfig = HealthConfig()
    upstreams: dict[str, UpstreamConfig]
    routes: list[RouteConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        problems: list[tuple[str, str]] = []
        seen: dict[str, int] = {}
        for i, route in enumerate(self.routes):
            upstreams = route.upstreams
            if not upstreams:
                problems.append((f"routes[{i}].upstream", "names no upstream"))
            for j, u in enumerate(upstreams):
                if u.name not in self.upstreams:
                    where = f"routes[{i}].upstream" + (
                        f"[{j}]" if isinstance(route.upstream, list) else "")
                    known = ", ".join(sorted(self.upstreams)) or "none"
                    problems.append((where, f"unknown upstream {u.name!r} (known: {known})"))
            for p in self.served_paths(route):
                if p in seen:
                    problems.append((f"routes[{i}].path",
                                     f"{p} is already served by routes[{seen[p]}]"))
                seen[p] = i
        if problems:
            raise _References(problems)
        return self

    @staticmethod
    def served_paths(route: RouteConfig) -> list[str]:
        suffix = get(route.dialect).stream_path
        return [route.path, route.path.rstrip("/") + suffix] if suffix else [route.path]


class _References(ValueError):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{w}: {m}" for w, m in problems))
        self.problems = problems


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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
        elif part in ("str", "list[union[str,RouteUpstream]]") or "[" in str(part):
            continue  # pydantic's name for a union branch, not a YAML key
        else:
            out = _join(out, part)
    return out


def parse_config(data: Any, env: dict[str, str] | None = None) -> GatewayConfig:
    """A validated config from parsed YAML; :class:`ConfigError` lists every problem with its
    YAML path (``routes[2].upstream``)."""
    if not isinstance(data, dict):
        raise ConfigError([("", "the config must be a YAML mapping")])
    problems: list[tuple[str, str]] = []
    data = _interpolate(data, "", dict(os.environ) if env is None else env, problems)
    if problems:
        raise ConfigError(problems)
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, _References):
                problems.extend(ctx_err.problems)
                continue
            where = _loc(tuple(err["loc"]))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "is required"
            problems.append((where, msg.removeprefix("Value error, ")))
        raise ConfigError(_dedupe(problems)) from None


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))


def load_config(path: str | Path, env: dict[str, str] | None = None) -> GatewayConfig:
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
    return parse_config(data, env)
