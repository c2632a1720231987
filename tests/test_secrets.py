"""The scrubber built from an upstream's config (:mod:`gateway.secrets`)."""

from __future__ import annotations

import base64

from gateway.config import parse_config
from gateway.dialects import names
from gateway.secrets import REDACTED, Scrubber, secrets_of


def _upstream(url: str, headers: dict[str, str]) -> object:
    config = parse_config({
        "upstreams": {"up": {"dialect": names()[0], "url": url, "headers": headers}},
        "routes": [{"path": "/chat", "dialect": names()[0], "upstream": "up"}],
    }, env={"KEY": "sk-live-abcdef123456"})
    return config.upstreams["up"]


def test_every_configured_secret_and_address_is_redacted() -> None:
    up = _upstream("https://bob:p%40ss-w0rd@llm.internal:8443/v1/chat?api_key=tok-998877&x=1",
                   {"Authorization": "Bearer ${KEY}", "x-team": "team-secret-7"})
    scrub = up.scrubber  # type: ignore[attr-defined]
    basic = base64.b64encode(b"bob:p@ss-w0rd").decode()
    text = (f"401: key sk-live-abcdef123456 (Bearer sk-live-abcdef123456) refused for bob, "
            f"Basic {basic}, password p@ss-w0rd / p%40ss-w0rd, token tok-998877, team-secret-7, "
            f"at https://llm.internal:8443/v1/chat?api_key=tok-998877&x=1 and llm.internal:8443 "
            f"via 10.0.0.7:9000 and [fd00::1]:80")
    out = scrub(text)
    for secret in ("sk-live-abcdef123456", basic, "p@ss-w0rd", "p%40ss-w0rd", "tok-998877",
                   "team-secret-7", "llm.internal", "8443", "10.0.0.7", "fd00::1"):
        assert secret not in out, (secret, out)
    assert out.startswith("401: key [redacted] ([redacted]) refused for bob")
    assert f"at {REDACTED} and" in out  # the URL as the upstream prints it: whole
    assert scrub is up.scrubber  # type: ignore[attr-defined]  # built once


def test_longest_first_and_words_that_are_not_secrets() -> None:
    scrub = Scrubber(secrets_of(["http://host.example:8080/chat"], {"x-key": "Bearer abc"}))
    # the URL goes whole, not its host alone inside it; "Bearer" and 3-letter values stay
    assert scrub("see http://host.example:8080/chat now") == f"see {REDACTED} now"
    assert scrub("Bearer abc") == REDACTED  # the whole value
    assert scrub("the Bearer scheme, abc") == "the Bearer scheme, abc"
    assert scrub("version 1.2.3 of model v2") == "version 1.2.3 of model v2"
