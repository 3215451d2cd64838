"""The terminal as it really is: a stdout that cannot encode "×", a 5-column window, a full disk.

Output keeps its meaning on any of them: characters a stream cannot encode become ASCII
look-alikes ("≥" becomes ">=", a lone surrogate "\\ud800", anything else "?"), tables are
laid out at least MIN_COLUMNS wide (a narrower window wraps them), and a stdout that refuses
bytes (a full disk, a closed pipe) ends the command with one line instead of a traceback.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys
from collections.abc import Iterator

# Below this width no table can show a number next to its label.
MIN_COLUMNS = 40

# Errors that mean "the place the output goes to refuses it", not a fault of the command.
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EROFS}

# What a stream that cannot encode these characters shows instead.
_ASCII = {
    "×": "x",
    "≥": ">=",
    "≤": "<=",
    "µ": "u",
    "—": "-",
    "–": "-",
    "…": "...",
    "→": "->",
    "Δ": "d",
    "·": "*",
    "²": "^2",
    "≈": "~",
    "±": "+/-",
    "−": "-",
    "‖": "||",
}
_SAMPLE = "×≥µ—…→"


def _transliterate(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(_ASCII.get(ch) or _unknown(ch) for ch in bad), exc.end


def _unknown(ch: str) -> str:
    """A lone surrogate as its escape ('\\ud800'); any other character as '?'."""
    return f"\\u{ord(ch):04x}" if 0xD800 <= ord(ch) <= 0xDFFF else "?"


codecs.register_error("ceiling-ascii", _transliterate)


def _cannot_encode(stream) -> bool:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        _SAMPLE.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


@contextlib.contextmanager
def tolerant_terminal() -> Iterator[None]:
    """Within: unencodable characters replaced, COLUMNS at least MIN_COLUMNS; restored after."""
    restore = []
    for stream in (sys.stdout, sys.stderr):
        if not hasattr(stream, "reconfigure"):
            continue
        if _cannot_encode(stream) or stream.errors == "strict":
            # a UTF-8 stream still cannot write a lone surrogate: shown as its escape
            restore.append((stream, stream.errors))
            stream.reconfigure(errors="ceiling-ascii")
    columns = os.environ.get("COLUMNS")
    narrow = columns is not None and columns.isdigit() and int(columns) < MIN_COLUMNS
    if narrow:
        os.environ["COLUMNS"] = str(MIN_COLUMNS)
    try:
        yield
    finally:
        if narrow:
            os.environ["COLUMNS"] = columns
        for stream, errors in restore:
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(errors=errors)


def flush_stdout() -> None:
    """Flush now, so a refused write surfaces while the error can still be reported."""
    sys.stdout.flush()


def is_output_failure(exc: OSError) -> bool:
    return exc.errno in OUTPUT_ERRNOS


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
