"""Whether tracing is on, and with what, from the config's ``tracing`` section and the standard
OpenTelemetry environment variables. Kept apart from :mod:`gateway.tracing` so that a gateway
without tracing never imports OpenTelemetry (about 150 ms and a few MiB per worker).

On when the config has a ``tracing`` section (unless ``enabled: false``), or, without one, when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (as an
OpenTelemetry operator injects them into a pod). ``OTEL_SDK_DISABLED=true`` and
``OTEL_TRACES_EXPORTER=none`` turn it off in every case. Keys the section leaves out are read
from the environment by the OpenTelemetry SDK itself (endpoint, headers, sampler, service name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import TracingConfig

__all__ = ["DEFAULT_SERVICE_NAME", "TracingSettings", "tracing_settings"]

DEFAULT_SERVICE_NAME = "chat-gateway"
_TRACES_PATH = "/v1/traces"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """What :class:`gateway.tracing.Tracing` is built with; ``None`` fields are left to the
    SDK's reading of the ``OTEL_*`` variables."""

    endpoint: str | None = None
    """The full OTLP/HTTP traces URL (``…/v1/traces``)."""
    service_name: str | None = None
    sample_ratio: float | None = None
    """Parent-based ratio sampling; ``None``: ``OTEL_TRACES_SAMPLER`` (default: every trace)."""
    headers: Mapping[str, str] | None = None
    timeout: float | None = None


def tracing_settings(config: TracingConfig | None,
                     environ: Mapping[str, str]) -> TracingSettings | None:
    """The settings, or ``None`` when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if config is None:
        if not any(environ.get(v, "").strip() for v in _ENDPOINT_VARS):
            return None
        return TracingSettings()
    if not config.enabled:
        return None
    endpoint = config.otlp_endpoint
    if endpoint is not None:
        endpoint = endpoint.rstrip("/")
        if not endpoint.endswith(_TRACES_PATH):
            endpoint += _TRACES_PATH
    return TracingSettings(endpoint, config.service_name, config.sample_ratio, config.headers,
                           config.timeout)
