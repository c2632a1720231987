"""What a dialect whose API keeps its answers declares (OpenAI Responses: ``store``,
``previous_response_id``, ``item_reference`` items, ``GET /v1/responses/{id}``): pure functions of
its wire JSON, never storage. The gateway keeps the answers (:mod:`gateway.exchange.kept`, in the
history's database) and asks the dialect what a request refers to, how the stored items go back
into a request, and which answer a stream finished with.

A dialect declares it as the optional class attribute ``stored_responses``; read it with
:func:`stored_responses_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.canonical import JSON, ChatError, ChatRequest

__all__ = ["References", "StoredAnswer", "StoredResponses", "stored_responses_of"]


@dataclass(frozen=True, slots=True)
class References:
    """What a request refers to that the API keeps."""

    previous: str | None = None
    """The stored response the request continues (its whole conversation goes first)."""
    items: tuple[str, ...] = ()
    """Stored items it names, each once, in order."""
    store: bool = True
    """The request asks for its answer to be kept (the API's default is to keep it)."""

    def __bool__(self) -> bool:
        return self.previous is not None or bool(self.items)


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """A finished answer as the client got it, ready to keep."""

    id: str
    body: JSON
    """The response object."""
    output: list[JSON]
    """Its output items, each with an id."""


class StoredResponses(Protocol):
    """The wire side of an API that keeps its answers."""

    def references(self, body: JSON) -> References:
        """What the request body refers to (raises ``DialectError`` for a malformed one)."""
        ...

    def expand(self, body: JSON, earlier: Sequence[JSON],
               items: Mapping[str, JSON]) -> tuple[JSON, list[JSON]]:
        """The body with its references resolved: ``earlier`` (the continued conversation's
        items, in order) before its own input, each referenced item in place of its reference,
        nothing left that names stored state; and the request's own input items as they are
        kept (references resolved, each with an id)."""
        ...

    def mark(self, req: ChatRequest, previous: str | None, store: bool) -> None:
        """Note on the parsed request that the gateway keeps its state, so that the answer says
        so (``store``, ``previous_response_id``)."""
        ...

    def finished(self, payload: JSON) -> StoredAnswer | None:
        """A whole answer's body, or one stream payload (parsed JSON, or a named event): the
        answer to keep when it is a finished one (completed, or incomplete at a limit), else
        ``None`` (an error, a failed answer, any other stream event)."""
        ...

    def not_found(self, what: str, ident: str) -> ChatError:
        """The API's own error for a reference to nothing this client may read: ``what`` is
        ``response`` (a ``previous_response_id``), ``item`` (an ``item_reference``) or
        ``stored`` (``GET``/``DELETE`` of a response)."""
        ...

    def deleted(self, ident: str) -> JSON:
        """The body answering ``DELETE`` of a stored response."""
        ...

    def item_list(self, items: Sequence[JSON], has_more: bool) -> JSON:
        """A page of a response's input items, in the API's list shape."""
        ...


def stored_responses_of(dialect: object) -> StoredResponses | None:
    """The dialect's declaration, or ``None`` when its API keeps nothing."""
    found: StoredResponses | None = getattr(dialect, "stored_responses", None)
    return found
