"""Writing many payloads at once (gateway.framing.frames_writer) gives the bytes that writing
each in turn gives, for every framing and every mix of named and unnamed payloads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.framing import Named, Payload, encoder_for, frames_writer

_PAYLOADS = st.lists(
    st.one_of(st.binary(max_size=12),
              st.builds(Named, st.sampled_from(["message", "delta", "é"]), st.binary(max_size=8))),
    max_size=6)


@given(payloads=_PAYLOADS)
def test_frames_at_once_are_the_frames_one_by_one(payloads: list[Payload]) -> None:
    for framing in ("jsonlines", "sse"):
        frame = encoder_for(framing)
        assert frames_writer(frame)(payloads) == b"".join(frame(p) for p in payloads)


@given(name=st.sampled_from(["delta", "é"]), datas=st.lists(st.binary(max_size=8), min_size=1,
                                                            max_size=6),
       after=st.sampled_from([None, b"x", Named("other", b"y"), Named("delta", b"z")]))
def test_events_of_one_name_at_once_are_the_events_one_by_one(
        name: str, datas: list[bytes], after: Payload | None) -> None:
    """A run of events of one name (written at once), alone or followed by another payload."""
    payloads: list[Payload] = [Named(name, d) for d in datas]
    if after is not None:
        payloads.append(after)
    frame = encoder_for("sse")
    assert frames_writer(frame)(payloads) == b"".join(frame(p) for p in payloads)


def test_a_json_array_writer_is_written_through_payload_by_payload() -> None:
    one, many = encoder_for("jsonarray"), encoder_for("jsonarray")
    payloads: list[Payload] = [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    want = b"".join(one(p) for p in payloads[:1]) + b"".join(one(p) for p in payloads[1:])
    write = frames_writer(many)
    assert write(payloads[:1]) + write(payloads[1:]) == want
    assert write([]) == b""


def test_nothing_to_write_is_no_bytes() -> None:
    for framing in ("jsonlines", "sse"):
        assert frames_writer(encoder_for(framing))([]) == b""
