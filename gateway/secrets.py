"""Scrubbing what an upstream must not hand back: its own credentials and addresses.

An upstream's error text (an error body's message, a mid-stream error event) is the upstream's
words, and upstreams echo what they were sent: a proxy's 401 quotes the key it refused, a
framework's 500 names the address it could not reach. Before such text becomes an error the client
sees or a log field, it goes through the upstream's :class:`Scrubber`, built once from its config
(:attr:`gateway.config.UpstreamConfig.scrubber`). Each of these is replaced by :data:`REDACTED`:

- every header value configured for the upstream (``${VAR}`` values included: the config holds
  them interpolated), whole and each word of it that could be a token (``Bearer <token>``);
- each URL's userinfo (``user:password``, its password alone, raw and percent-decoded, and the
  Base64 form Basic auth sends), its query string and each query value;
- each URL itself (with and without its query), its ``scheme://host:port``, ``host:port`` and
  host;
- any IPv4 address (with its port) and any bracketed IPv6 address, whoever's: an upstream's error
  text has no business naming the network behind it.

Text only: cheap (one compiled alternation, longest secret first), and used off the hot path (on
errors).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["REDACTED", "Scrubber", "secrets_of"]

REDACTED = "[redacted]"

_MIN_SECRET = 4
"""Shorter configured values are not scrubbed (a 3-character value would maim words)."""
_MIN_WORD = 6
"""Words of a header value this long or longer are scrubbed on their own too."""
_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "apikey", "key"})
"""Authorization scheme names: words of a header value that are not secrets."""
_ADDRESSES = (
    r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])"  # IPv4[:port]
    r"|\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](?::\d{1,5})?"  # [IPv6][:port]
)


def secrets_of(urls: Iterable[str | None], headers: Mapping[str, str]) -> list[str]:
    """What :class:`Scrubber` must hide for an upstream with these URLs and headers."""
    found: set[str] = set()
    for value in headers.values():
        value = value.strip()
        found.add(value)
        for word in re.split(r"[\s,;]+", value):
            if len(word) >= _MIN_WORD and word.lower() not in _SCHEMES:
                found.add(word)
    for url in urls:
        if url:
            found.update(_url_secrets(url))
    return [s for s in found if len(s) >= _MIN_SECRET]


def _url_secrets(url: str) -> set[str]:
    found = {url}
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        user, _, password = userinfo.partition(":")
        plain = f"{unquote(user)}:{unquote(password)}"
        found.update({userinfo, password, unquote(password), unquote(userinfo), plain,
                      base64.b64encode(plain.encode()).decode()})
    bare = f"{parts.scheme}://{hostport}{parts.path}"  # as the upstream itself may print it
    found.update({hostport, f"{parts.scheme}://{hostport}", url.split("?", 1)[0], bare,
                  f"{bare}?{parts.query}" if parts.query else bare})
    if parts.hostname:
        found.add(parts.hostname)
    if parts.query:
        found.add(parts.query)
        for _, value in parse_qsl(parts.query, keep_blank_values=True):
            found.add(value)
        for piece in parts.query.split("&"):
            found.add(piece.partition("=")[2])
    return found


class Scrubber:
    """``scrub(text) -> text`` with every secret and address replaced by :data:`REDACTED`."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first: a URL is replaced whole before its host alone could match inside it.
        alternatives = [re.escape(s) for s in sorted(set(secrets), key=len, reverse=True)]
        self._pattern = re.compile("|".join([*alternatives, _ADDRESSES]))

    def __call__(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text)

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self._pattern.sub(REDACTED, text)
