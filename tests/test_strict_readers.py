"""The strict readers themselves (tests/strict): each registered dialect has one, it accepts what
the gateway writes, and it refuses the framing faults a real client would trip on. (Each
dialect's own rules are tried in tests/dialects.)"""

from __future__ import annotations

import pytest
from observe import client_request, run_stream, strict
from strict import reader_for

from gateway.dialects import DIALECTS

NAMES = list(DIALECTS)


def gateway_stream(name: str) -> bytes:
    """What a client of ``name`` gets for another dialect's ``text`` sample."""
    c = DIALECTS[name]
    u = next(d for d in DIALECTS.values() if d is not c)
    req, _ = client_request(c, stream=True)
    t, out = run_stream(u, c, req, [u.samples.streams["text"]], policy="drop")
    assert t.error is None
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_dialect_has_a_strict_reader(name: str) -> None:
    module = reader_for(DIALECTS[name])
    for fn in ("read_request", "read_whole", "read_stream", "read_error"):
        assert callable(getattr(module, fn)), (name, fn)


@pytest.mark.parametrize("name", NAMES)
def test_framing_faults_are_refused(name: str) -> None:
    read = strict(DIALECTS[name]).read_stream
    out = gateway_stream(name)
    read(out)  # the gateway's own stream is accepted
    sep = b"\n\n" if out.endswith(b"\n\n") else b"\n"
    second = out.index(sep) + len(sep)
    faults = {
        "empty body": b"",
        "no final terminator": out[:-1],
        "CRLF line ends": out.replace(b"\n", b"\r\n"),
        "a frame cut short": out[:second] + out[second:second + 12] + sep,
        "not UTF-8": out[:second] + out[second:].replace(b'"', b'"\xff', 1),
    }
    for fault, body in faults.items():
        # AssertionError by the interface; a reader may let the JSON or UTF-8 decoder say it
        with pytest.raises((AssertionError, ValueError)):
            read(body)
            pytest.fail(f"{name}: {fault} accepted")


@pytest.mark.parametrize("name", NAMES)
def test_bodies_of_the_wrong_shape_are_refused(name: str) -> None:
    module = strict(DIALECTS[name])
    for body in ("text", 42, None, {}):
        for read in (module.read_request, module.read_whole, module.read_error):
            with pytest.raises(AssertionError):
                read(body)
