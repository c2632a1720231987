"""The protocol's *recommended response context* (``data_points``, ``thoughts``,
``followup_questions``), read and written as its specification describes it, for the readers of
the dialects that carry it.
"""

from __future__ import annotations

from typing import Any

from strict.observed import Observed

__all__ = ["THOUGHTS", "flatten", "merge", "read_context", "snippet_of", "write_context"]

THOUGHTS = [{"title": "Generated search query", "description": "what is covered 🔎",
             "props": {"top": 3}}]
"""The thoughts the writers send when a case has any."""


def flatten(ctx: Any) -> Any:
    """The reference backend's last stream line nests the context (``context.context`` beside
    ``followup_questions``) and its frontend reads both levels: inner keys first, outer win."""
    if isinstance(ctx, dict) and isinstance(ctx.get("context"), dict):
        inner = flatten(ctx["context"])
        return {**inner, **{k: v for k, v in ctx.items() if k != "context"}}
    return ctx


def merge(old: Any, new: Any) -> Any:
    """Context sent again later in a stream: later keys win."""
    new = flatten(new)
    if not isinstance(old, dict):
        return new
    if not isinstance(new, dict):
        return old
    return {**old, **new}


def read_context(ctx: Any, obs: Observed) -> None:
    """Fill ``obs.citations`` (each ``data_points.text`` entry's name, the part before the first
    ``": "``, then each ``data_points.citations`` entry not named yet), ``obs.followups`` and
    ``obs.thoughts``."""
    ctx = flatten(ctx)
    if ctx is None:
        return
    assert isinstance(ctx, dict), f"context must be an object: {ctx!r}"
    points = ctx.get("data_points")
    names: list[str] = []
    if points is not None:
        assert isinstance(points, dict), f"data_points must be an object: {points!r}"
        for entry in points.get("text") or []:
            assert isinstance(entry, str), f"data_points.text holds a non-string: {entry!r}"
            names.append(entry.split(": ", 1)[0].strip())
        seen = set(names)
        for entry in points.get("citations") or []:
            assert isinstance(entry, str), f"data_points.citations holds a non-string: {entry!r}"
            if entry not in seen:
                seen.add(entry)
                names.append(entry)
    obs.citations = names
    followups = ctx.get("followup_questions")
    assert followups is None or (isinstance(followups, list)
                                 and all(isinstance(q, str) for q in followups)), followups
    obs.followups = list(followups or [])
    obs.thoughts = bool(ctx.get("thoughts"))


def snippet_of(obs: Observed, name: str) -> str | None:
    """The snippet a case gives a source (``extra["snippets"]``; ``None``: a source named only)."""
    snippets = obs.extra.get("snippets", {})
    return snippets.get(name, f"what {name} says")


def write_context(obs: Observed, *, followups: bool = True) -> dict[str, Any] | None:
    ctx: dict[str, Any] = {}
    if obs.citations:
        text = [f"{n}: {snippet_of(obs, n)}" for n in obs.citations
                if snippet_of(obs, n) is not None]
        ctx["data_points"] = {"text": text, "citations": list(obs.citations)}
    if obs.thoughts:
        ctx["thoughts"] = THOUGHTS
    if followups and obs.followups:
        ctx["followup_questions"] = list(obs.followups)
    return ctx or None
