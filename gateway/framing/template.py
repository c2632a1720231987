"""A stream's text frames, read without parsing them. Knows nothing of dialects.

Nearly every frame of a model's stream is the frame before it with another piece of text, e.g.
``{"choices":[{"delta":{"content":"tok"},"index":0}],"id":"c1","created":1}``. Parsing one builds
its dicts and lists only for the caller to read one string and throw the rest away: most of what
a stream frame costs the gateway.

:class:`FrameTemplate` is the bytes before and after that string in one such frame, learned once
the frame was parsed (:func:`learn`). A later frame made of those same bytes around a plain string
body (no quote, no backslash, no control character, valid UTF-8, not empty) is, by JSON's
grammar, the same value with that string changed and nothing else: a string token ends at its
first unescaped quote, so the tokens before and after it are the learned frame's own. Its text is
then read from the bytes (:class:`Slot`). Any other frame is parsed as before.

Which string is the text is the caller's to say, as a path into the value. A template is learned
only where that string's JSON form occurs once in the frame and putting another string in its
place changes the value at that path and nothing else (checked by parsing the substituted frame
once): an upstream that spells its strings another way, or repeats the text elsewhere in the
frame, is simply parsed frame by frame.

What a :class:`Slot` means (a text-only event) is not this module's to say: the stream's decoder
confirms it (``gateway.pipeline.StreamDecoding``).
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

import orjson

__all__ = ["FrameTemplate", "Slot", "TemplateReader", "TextPath", "learn"]

TextPath: TypeAlias = tuple[str | int, ...]
"""Keys and list indexes from a frame's value to its text, e.g. ``("delta", "text")``."""

_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')
"""What a string body read from the bytes may not hold: a quote or a backslash (its token would
end, or need unescaping) or a control character (not valid in a JSON string)."""

_LEARN_TRIES = 4
"""Frames with text at the path that a stream may try to learn a template from: an upstream whose
frames never fit one costs a few parses more, not one per frame."""


class Slot:
    """A frame read by its template: its text and its raw JSON bytes, the SSE event it came in
    (``message`` when unnamed), and its parsed value when it was parsed anyway (the frame the
    template was learned from)."""

    __slots__ = ("event", "raw", "text", "value")

    def __init__(self, text: str, raw: bytes, event: str, value: Any = None) -> None:
        self.text = text
        self.raw = raw
        self.event = event
        self.value = value

    def parsed(self) -> Any:
        """The frame's JSON value (parsed now, if it was not)."""
        if self.value is None:
            self.value = orjson.loads(self.raw)
        return self.value

    def __repr__(self) -> str:
        return f"Slot({self.text!r}, {self.raw!r}, {self.event!r})"


class FrameTemplate:
    """The bytes around the text of one frame (see the module's docstring)."""

    __slots__ = ("_least", "_prefix", "_suffix", "event")

    def __init__(self, prefix: bytes, suffix: bytes, event: str) -> None:
        self._prefix = prefix
        self._suffix = suffix
        self._least = len(prefix) + len(suffix)
        self.event = event

    def match(self, raw: bytes) -> str | None:
        """The text of ``raw`` when it is the template's frame with another plain string."""
        if len(raw) <= self._least or not raw.startswith(self._prefix) \
                or not raw.endswith(self._suffix):
            return None
        body = raw[len(self._prefix):len(raw) - len(self._suffix)]
        if _NOT_PLAIN.search(body) is not None:
            return None
        try:
            return body.decode()
        except UnicodeDecodeError:
            return None


def _at(value: Any, path: TextPath) -> Any:
    for key in path:
        if isinstance(key, str):
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        else:
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                return None
            value = value[key]
    return value


def _put(value: Any, path: TextPath, text: str) -> bool:
    """Sets the string at ``path`` (which :func:`_at` found) to ``text``."""
    if not path:
        return False
    parent = _at(value, path[:-1])
    key = path[-1]
    if isinstance(key, str) and isinstance(parent, dict):
        parent[key] = text
        return True
    if isinstance(key, int) and isinstance(parent, list):
        parent[key] = text
        return True
    return False


def learn(raw: bytes, value: Any, path: TextPath, text: str, event: str) -> FrameTemplate | None:
    """The template of ``raw`` (whose parsed value is ``value``, with the non-empty ``text`` at
    ``path``) around that string, or ``None`` when it is not one to read from the bytes (see the
    module's docstring)."""
    literal = orjson.dumps(text)  # the string as a compact JSON writer spells it
    at = raw.find(literal)
    if at < 0 or raw.find(literal, at + 1) >= 0:
        return None
    prefix, suffix = raw[:at + 1], raw[at + len(literal) - 1:]
    probe = "z" if text == "q" else "q"  # not a JSON literal's first letter (true, false, null)
    try:
        substituted = orjson.loads(prefix + probe.encode() + suffix)
    except orjson.JSONDecodeError:
        return None
    # ``value`` with the probe in place, compared, then given its text back
    if not _put(value, path, probe):
        return None
    try:
        same = substituted == value
    except RecursionError:  # a value nested deeper than comparing can walk: no template
        same = False
    finally:
        _put(value, path, text)
    return FrameTemplate(prefix, suffix, event) if same else None


class TemplateReader:
    """What a framing reader calls for each complete frame's JSON bytes: a :class:`Slot` when
    the stream's template matches, else the parsed value, learning a template from it while
    tries are left (raises :class:`orjson.JSONDecodeError` as ``orjson.loads`` does)."""

    __slots__ = ("_path", "_tries", "template")

    def __init__(self, path: TextPath) -> None:
        self._path = path
        self._tries = _LEARN_TRIES
        self.template: FrameTemplate | None = None

    def read(self, raw: bytes, event: str) -> Any:
        template = self.template
        if template is not None and event == template.event:
            text = template.match(raw)
            if text is not None:
                return Slot(text, raw, event)
        value = orjson.loads(raw)
        if self._tries:
            # no template yet, or text frames of another shape (a new content block): learn
            found = _at(value, self._path)
            if isinstance(found, str) and found:
                self._tries -= 1
                learned = learn(raw, value, self._path, found, event)
                if learned is not None:
                    self.template = learned
                    return Slot(found, raw, event, value)
        return value

    def drop(self) -> None:
        """The decoder did not take a frame of the template as text alone: parse every frame
        from now on."""
        self.template = None
        self._tries = 0
