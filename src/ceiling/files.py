"""Every file ceiling takes from a user comes in here: traces (.json, .json.gz), device
TOML, `hf:` config.json, machine profiles, CSV and JSON measurements.

A file is checked before it is opened (a regular file, not a FIFO that blocks forever or a
device like /dev/zero that never ends), read with a size cap and, compressed, with caps on
its decompressed size and its ratio (a small .gz can hold gigabytes of whitespace), then
parsed so that hostile content gives one line naming the file: nesting past the parser's
depth, integers of thousands of digits, numbers past 1e300 (named by their field).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ceiling.errors import MalformedFile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# Profiles, specs, configs and measurements are kilobytes; a file far larger is the wrong
# file. Traces of long runs reach hundreds of MiB, and are read whole as text.
SMALL_FILE_BYTES = 8 * 2**20
TRACE_BYTES = 2 * 2**30
MAX_BYTES_ENV = "CEILING_MAX_INPUT_MB"
# Profiler JSON compresses about 10-30x; a much higher ratio is padding, not a trace. Small
# outputs are not judged: a short file of repeated events may compress far better.
GZIP_RATIO = 200
GZIP_RATIO_ENV = "CEILING_MAX_GZIP_RATIO"
_RATIO_JUDGED_FROM = 16 * 2**20
_CHUNK = 2**20
# No quantity ceiling models comes near this; a number past it is a corrupt or hostile file.
LARGEST_NUMBER = 1e300


def _cap_from_env(default: int) -> int:
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return default
    try:
        mib = float(text)
    except ValueError:
        raise MalformedFile(f"{MAX_BYTES_ENV}={text!r} is not a number of MiB") from None
    if not 0 < mib < 2**40:
        raise MalformedFile(f"{MAX_BYTES_ENV}={text!r} must be a positive number of MiB")
    return int(mib * 2**20)


def _ratio_from_env() -> float:
    text = os.environ.get(GZIP_RATIO_ENV, "").strip()
    try:
        ratio = float(text) if text else GZIP_RATIO
    except ValueError:
        ratio = float("nan")
    if not ratio > 1:
        raise MalformedFile(f"{GZIP_RATIO_ENV}={text!r} must be a number above 1")
    return ratio


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def regular_file(path: str | Path, what: str) -> Path:
    """`path` when it names a regular file (through links); else one line saying what it is.

    Nothing is opened: a FIFO would block the open, a device would stream forever."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        raise _unreadable(p, what, exc) from None
    except ValueError as exc:  # an embedded NUL byte
        raise MalformedFile(f"cannot read {what}: the file name is not valid ({exc})") from None
    if stat.S_ISREG(mode):
        return p
    if stat.S_ISDIR(mode):
        raise MalformedFile(f"{p} is a folder, not a {what}")
    kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or special file"
    raise MalformedFile(f"{p} is {kind}, not a {what}: give a regular file")


def _unreadable(p: Path, what: str, exc: OSError) -> MalformedFile:
    if exc.errno == errno.ENAMETOOLONG:
        name = str(p)
        return MalformedFile(
            f"cannot read {what}: the file name is too long ({len(name):,} characters: "
            f"{name[:40]}…)"
        )
    if exc.errno == errno.ENOENT:
        return MalformedFile(f"no such file: {p} (a {what} was expected)")
    return MalformedFile(f"cannot read {what} {p}: {exc.strerror or exc}")


def name_is_usable(path: str | Path) -> bool:
    """False for a name the system refuses outright (too long, NUL bytes), so look-ups that
    only ask whether a file exists answer 'no' instead of raising."""
    try:
        os.stat(path)
    except ValueError:
        return False
    except OSError as exc:
        return exc.errno != errno.ENAMETOOLONG
    return True


def read_bytes(path: str | Path, what: str, limit_bytes: int = SMALL_FILE_BYTES) -> bytes:
    """The file's bytes, decompressed when its name ends in .gz, within the caps."""
    p = regular_file(path, what)
    limit = _cap_from_env(limit_bytes)
    try:
        with open(p, "rb") as f:
            if p.name.lower().endswith(".gz"):
                return b"".join(_gunzip(f, p, what, limit))
            data = f.read(limit + 1)
    except OSError as exc:
        raise _unreadable(p, what, exc) from None
    if len(data) > limit:
        raise _too_large(p, what, limit, "is larger than")
    return data


def _too_large(p: Path, what: str, limit: int, how: str) -> MalformedFile:
    return MalformedFile(
        f"{p}: {how} {_mib(limit)}, the cap for a {what}; if it truly is one, raise the cap "
        f"with {MAX_BYTES_ENV}=<MiB>"
    )


def _gunzip(f, p: Path, what: str, limit: int) -> Iterator[bytes]:
    """Decompress in chunks, stopping at the size cap or a ratio no real file has."""
    ratio_cap = _ratio_from_env()
    out = consumed = 0
    decoder = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
    pending, fed = b"", False
    while True:
        if not pending:
            pending = f.read(_CHUNK)
            consumed += len(pending)
        if not pending and not fed:
            break
        try:
            # with no input left, this drains what the output cap held back
            piece = decoder.decompress(pending, _CHUNK)
        except zlib.error as exc:
            raise MalformedFile(f"{p}: not a readable gzip file ({exc})") from None
        if not pending and not piece and not decoder.eof:
            break  # truncated: said below
        out += len(piece)
        fed = True
        pending = decoder.unconsumed_tail
        if decoder.eof:  # another gzip member may follow
            pending = decoder.unused_data + pending
            decoder, fed = zlib.decompressobj(wbits=47), False
        if out > limit:
            raise _too_large(p, what, limit, "decompresses to more than")
        if out > _RATIO_JUDGED_FROM and out > ratio_cap * max(consumed, 1):
            raise MalformedFile(
                f"{p}: decompresses more than {ratio_cap:g}x ({_mib(out)} from "
                f"{_mib(consumed)} so far), far beyond any {what}; if it truly is one, "
                f"raise the ratio cap with {GZIP_RATIO_ENV}=<ratio>"
            )
        if piece:
            yield piece
    if fed and not decoder.eof:
        raise MalformedFile(f"{p}: the gzip file is truncated")


def read_chunks(
    path: str | Path, what: str, limit_bytes: int = SMALL_FILE_BYTES
) -> Iterator[bytes]:
    """`read_bytes`'s bytes a chunk at a time (a MiB at most), with the same caps and
    messages; what is wrong with the file past the chunks read so far is said when reached."""
    p = regular_file(path, what)
    limit = _cap_from_env(limit_bytes)
    try:
        with open(p, "rb") as f:
            if p.name.lower().endswith(".gz"):
                yield from _gunzip(f, p, what, limit)
                return
            total = 0
            while chunk := f.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise _too_large(p, what, limit, "is larger than")
                yield chunk
    except OSError as exc:
        raise _unreadable(p, what, exc) from None


def text_chunks(path: str | Path, what: str, limit_bytes: int = SMALL_FILE_BYTES) -> Iterator[str]:
    """`read_text`'s text a chunk at a time (a MiB of the file's bytes at most)."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    offset = 0  # bytes of the file given to the decoder
    for data in read_chunks(path, what, limit_bytes):
        if b"\x00" in data:
            raise _binary(path, what)
        held = len(decoder.getstate()[0])
        try:
            yield decoder.decode(data)
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc.object, exc.start, offset - held) from None
        offset += len(data)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc.object, exc.start, offset - len(exc.object)) from None


def _binary(path, what: str) -> MalformedFile:
    return MalformedFile(f"{path}: a binary file, not a text {what}")


def _not_utf8(path, data: bytes, start: int, before: int = 0) -> MalformedFile:
    """`data[start]` is not UTF-8; `before`: the file's bytes before `data`."""
    return MalformedFile(
        f"{path}: not UTF-8 text (byte 0x{data[start]:02x} at offset {before + start:,})"
    )


def read_text(path: str | Path, what: str = "file", limit_bytes: int = SMALL_FILE_BYTES) -> str:
    """A UTF-8 text file within its cap; one line naming the file when it is missing, a
    folder or special file, too large, binary or not UTF-8."""
    data = read_bytes(path, what, limit_bytes)
    if b"\x00" in data:
        raise _binary(path, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, data, exc.start) from None


class _OutOfRange:
    """A number the parser met that no field can hold, kept to be named by its field."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return _shown_number(self.text)


def _shown_number(text: str) -> str:
    if len(text) <= 24:
        return text
    return f"{text[:12]}… ({len(text):,} characters)"


def _int_or_out_of_range(text: str):
    # int() of thousands of digits is refused by Python itself, and slow before that
    return int(text) if len(text.lstrip("-")) <= 300 else _OutOfRange(text)


def _float_or_out_of_range(text: str):
    value = float(text)
    return value if abs(value) <= LARGEST_NUMBER else _OutOfRange(text)


def parse_json(text: str, where: str) -> Any:
    """JSON text to Python values; too deep nesting or out-of-range numbers are one line."""
    try:
        data = json.loads(text, parse_int=_int_or_out_of_range, parse_float=_float_or_out_of_range)
    except json.JSONDecodeError as exc:
        raise MalformedFile(
            f"{where}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise _too_deep(where, "JSON") from None
    _refuse_out_of_range(data, where)
    return data


def _too_deep(where: str, language: str) -> MalformedFile:
    return MalformedFile(
        f"{where}: {language} nested deeper than the parser goes (about "
        f"{sys.getrecursionlimit():,} levels); no file ceiling reads is"
    )


def _first_field(data: Any, wanted) -> tuple[str, Any] | None:
    """The path and value of the first item `wanted` accepts. Iterative: a document the
    parser accepted may still be deeper than a recursive walk could go."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        at, value = stack.pop()
        if wanted(value):
            return at.lstrip(".") or "the document", value
        if isinstance(value, dict):
            stack.extend((f"{at}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{at}[{i}]", v) for i, v in enumerate(value))
    return None


def _refuse_out_of_range(data: Any, where: str) -> None:
    found = _first_field(data, lambda v: isinstance(v, _OutOfRange))
    if found is not None:
        raise _beyond(where, found[0], repr(found[1]))


def _beyond(where: str, field: str, shown: str) -> MalformedFile:
    return MalformedFile(
        f"{where}: field {field} holds {shown}, beyond any real figure (numbers up to "
        f"{LARGEST_NUMBER:g} are read)"
    )


def read_json(path: str | Path, what: str, limit_bytes: int = SMALL_FILE_BYTES) -> Any:
    """A JSON file through the caps and checks above."""
    return parse_json(read_text(path, what, limit_bytes), str(path))


_LONG_DIGITS = re.compile(r"\d{301,}")


def parse_toml(text: str, where: str) -> dict:
    """TOML text to a table; too deep nesting or out-of-range numbers are one line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MalformedFile(f"{where}: not valid TOML ({exc})") from None
    except RecursionError:
        raise _too_deep(where, "TOML") from None
    except ValueError:  # Python's own limit on the digits of an integer
        raise _long_number(text, where) from None
    _refuse_huge_toml(data, where)
    return data


def _long_number(text: str, where: str) -> MalformedFile:
    match = _LONG_DIGITS.search(text)
    line = text.count("\n", 0, match.start()) + 1 if match else 0
    said = text.splitlines()[line - 1].split("=", 1)[0].strip() if line else "a number"
    return _beyond(where, f"{said[:40]} (line {line})", "a number of thousands of digits")


def _refuse_huge_toml(data: Any, where: str) -> None:
    def huge(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) > LARGEST_NUMBER

    found = _first_field(data, huge)
    if found is not None:
        raise _beyond(where, found[0], f"a {len(str(abs(found[1]))):,}-digit number")


def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file through the caps and checks above."""
    return parse_toml(read_text(path, what), f"{what} {path}")
