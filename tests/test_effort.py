"""A reasoning effort through the pipeline, for every ordered pair of registered dialects that
declare reasoning (:attr:`Capabilities.reasoning`): the client's effort reaches the upstream in the
upstream's own field, the same where both sides have the value, the nearest where the upstream has
not, and never replaced by a default. No dialect is named: the capabilities decide.
"""

from __future__ import annotations

import pytest

from gateway.canonical import ChatRequest, Message, ReasoningRequest
from gateway.dialects import DIALECTS, Dialect
from gateway.pipeline import translate_request

REASONING = [d for d in DIALECTS.values() if d.capabilities.reasoning]
PAIRS = [(cl, up) for cl in REASONING for up in REASONING]
IDS = [f"{cl.name}->{up.name}" for cl, up in PAIRS]

SHARED = ("low", "medium", "high", "xhigh", "max")
"""The efforts most reasoning dialects have (one may lack some: :func:`_says`)."""
BELOW = ("none", "minimal")
"""The efforts below ``low`` that some dialects lack: there the nearest, ``low``, arrives."""
LOWEST = ("none", "minimal", "low")
ORDER = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def client_body(cl: Dialect, effort: str) -> object:
    req = ChatRequest(messages=[Message("user", "hi")],
                      reasoning=ReasoningRequest(effort=effort))
    return cl.render_request(req, stream=False, model="m")


def upstream_effort(cl: Dialect, up: Dialect, effort: str) -> str | None:
    _, sent, lost = translate_request(client_body(cl, effort), cl, up, stream=False, model="m")
    assert "reasoning" not in lost
    reasoning = up.parse_request(sent).reasoning
    assert reasoning is not None, "the effort was lost"
    if reasoning.effort is None and not reasoning.enabled:
        return "none"  # reasoning turned off, where a dialect has no effort "none"
    return reasoning.effort


def _says(cl: Dialect, effort: str) -> bool:
    """Whether a client of ``cl`` can ask for ``effort`` at all."""
    said = cl.parse_request(client_body(cl, effort)).reasoning
    return said is not None and said.effort == effort


BOTH = [(cl, up, e) for cl, up in PAIRS for e in SHARED if _says(cl, e) and _says(up, e)]
ONE = [(cl, up, e) for cl, up in PAIRS for e in SHARED if _says(cl, e) and not _says(up, e)]
"""The pairs whose upstream lacks an effort of ``SHARED`` its client can ask for."""


@pytest.mark.parametrize(("cl", "up", "effort"), BOTH,
                         ids=[f"{c.name}->{u.name}-{e}" for c, u, e in BOTH])
def test_an_effort_both_sides_have_arrives_unchanged(cl: Dialect, up: Dialect,
                                                      effort: str) -> None:
    assert upstream_effort(cl, up, effort) == effort


@pytest.mark.parametrize(("cl", "up", "effort"), ONE,
                         ids=[f"{c.name}->{u.name}-{e}" for c, u, e in ONE])
def test_an_effort_the_upstream_lacks_arrives_as_the_nearest(cl: Dialect, up: Dialect,
                                                              effort: str) -> None:
    got = upstream_effort(cl, up, effort)
    assert got is not None and _says(up, got), got
    nearest = min((e for e in ORDER if _says(up, e)),
                  key=lambda e: abs(ORDER.index(e) - ORDER.index(effort)))
    assert abs(ORDER.index(got) - ORDER.index(effort)) == \
        abs(ORDER.index(nearest) - ORDER.index(effort)), (got, nearest)


def test_most_pairs_have_every_shared_effort() -> None:
    assert len(BOTH) > len(ONE), "the shared efforts are no longer shared"


BELOW_CASES = [(cl, up, e) for cl, up in PAIRS for e in BELOW if _says(cl, e)]
"""The pairs whose client has an effort below ``low``: only those can send one."""


def test_some_client_asks_below_low() -> None:
    assert BELOW_CASES, "no reasoning dialect has an effort below low: the next test is empty"


@pytest.mark.parametrize(("cl", "up", "effort"), BELOW_CASES,
                         ids=[f"{c.name}->{u.name}-{e}" for c, u, e in BELOW_CASES])
def test_an_effort_below_low_arrives_as_the_nearest(cl: Dialect, up: Dialect,
                                                     effort: str) -> None:
    assert upstream_effort(cl, up, effort) in LOWEST
