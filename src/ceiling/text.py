"""Text that is safe to show in a terminal: user strings (model names, `custom:` values,
target and file names) may carry control characters; shown raw, an escape sequence could
recolour, retitle or rewrite the terminal. Each is shown as a visible escape instead."""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls, the bidirectional overrides that can
# make text read differently from what it is, and lone surrogates (a JSON "\ud800" decodes
# to one: no UTF-8 terminal, page or file can hold it).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape: '\\x1b', '\\u202e'."""
    return _UNSAFE.sub(_escape, text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with each lone surrogate written as its escape ('\\ud800'), every other
    character kept: what a JSON record or a UTF-8 file can hold."""
    return _SURROGATE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shortened(value: object, most: int = 40) -> str:
    """`repr(value)`, cut short when it runs long (a 5,000-digit number, a whole file)."""
    text = repr(value)
    if len(text) <= most:
        return text
    return f"{text[: most - 10]}… ({len(text):,} characters)"
