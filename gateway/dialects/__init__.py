"""The dialect registry: one module per dialect, one line each below.

Adding a dialect means one new module implementing :class:`Dialect` and one entry in
``_BUILTIN``; everything else (the config's ``dialect:`` values, the CLI's choices, the demo, the
JSON Schema, the tests) reads this registry. A dialect shipped in another package registers itself
through the ``chat_gateway.dialects`` entry point group (its value names a :class:`Dialect`
class), and a test registers a fixture dialect with :func:`register`.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from gateway.dialects.ag_ui import AgUiDialect
from gateway.dialects.ai_sdk_ui import AISDKUIDialect
from gateway.dialects.anthropic import AnthropicDialect
from gateway.dialects.base import (
    Capabilities,
    Dialect,
    StreamDecoder,
    StreamEncoder,
    Target,
    TokenCount,
    client_path,
    count_path,
    routes_by_prefix,
    upstream_url_of,
)
from gateway.dialects.chatui import ChatUIDialect
from gateway.dialects.gemini import GeminiDialect
from gateway.dialects.ollama import OllamaDialect
from gateway.dialects.openai import OpenAIDialect
from gateway.dialects.openai_responses import OpenAIResponsesDialect
from gateway.dialects.protocol_2024_01_28 import Protocol20240128
from gateway.dialects.protocol_2024_05_29 import Protocol20240529

__all__ = ["DIALECTS", "Capabilities", "Dialect", "StreamDecoder", "StreamEncoder", "Target",
           "TokenCount", "client_path", "count_path", "get", "names", "register",
           "routes_by_prefix", "upstream_url_of"]

_BUILTIN: tuple[Dialect, ...] = (
    Protocol20240128(),
    Protocol20240529(),
    ChatUIDialect(),
    OpenAIDialect(),
    AnthropicDialect(),
    OpenAIResponsesDialect(),
    GeminiDialect(),
    OllamaDialect(),
    AISDKUIDialect(),
    AgUiDialect(),
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in _BUILTIN}


def register(dialect: Dialect) -> None:
    """Add a dialect (a plugin's, or a test's fixture dialect) under its name."""
    if dialect.name in DIALECTS and DIALECTS[dialect.name] is not dialect:
        raise ValueError(f"dialect {dialect.name!r} is already registered")
    DIALECTS[dialect.name] = dialect


def names() -> tuple[str, ...]:
    """Every registered dialect's name, in registration order."""
    return tuple(DIALECTS)


def get(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(DIALECTS)}") from None


def _load_plugins() -> None:
    for ep in entry_points(group="chat_gateway.dialects"):
        register(ep.load()())


_load_plugins()
