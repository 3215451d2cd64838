"""Read torch.profiler (Kineto) Chrome-trace JSON: a file, a .json.gz, or a directory of
per-rank files.

The file is read a MiB at a time and decoded one event at a time (the standard library's C
scanner on each event), and each event is reduced to an `Event` at once (the names and keys
that events repeat kept once), so memory holds a window of the text and the kept events,
never the whole text nor the parsed document. Anything malformed is reported in one line
with the file, the event number and the byte offset.
"""

from __future__ import annotations

import gc
import json
import math
import os
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from ceiling.errors import InvalidInput, MalformedFile, argument
from ceiling.files import TRACE_BYTES, name_is_usable, read_text, text_chunks
from ceiling.text import shortened
from ceiling.trace.events import CATEGORY, Event, RankTrace

_WS = " \t\n\r"
_WS_OR_COMMA = " \t\n\r,"
# Characters past a failed decode that tell a wrong value from one the window's end cut short
# (longer than any JSON literal, escape or number's tail).
_MARGIN = 64
_US = 1e-6  # Kineto timestamps and durations are microseconds
TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(path: str | Path) -> list[Path]:
    """The trace files at `path`: the file itself, or every *.json / *.json.gz in a folder."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidInput(
            f"{argument('path')} must be a trace file or folder, got {shortened(path)}"
        )
    p = Path(path)
    if not name_is_usable(p):
        read_text(p, "trace")  # says what is wrong with the name
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise MalformedFile(f"{p}: no .json or .json.gz trace files in this folder")
        return files
    if not p.exists():
        raise MalformedFile(f"{p}: no such file or folder")
    return [p]


class NotATrace(MalformedFile):
    """Valid JSON, but not a profiler trace."""


def read_trace(path: str | Path) -> RankTrace:
    path = Path(path)
    return parse_trace(text_chunks(path, "trace", TRACE_BYTES), path)


def parse_trace(chunks: Iterable[str], path: Path) -> RankTrace:
    """The trace whose text comes in `chunks` (any size), read from the file at `path`."""
    parser = _Parser(chunks, str(path))
    with without_gc():
        header, events = parser.document()
        parser.finish()
    if not events:
        raise MalformedFile(f"{path}: the trace holds no events (empty or not a profiler trace)")
    dist = _header_field(header, "distributedInfo", dict, path) or {}
    devices = _header_field(header, "deviceProperties", list, path) or []
    shapes = header.get("record_shapes")
    backend, host = dist.get("backend"), header.get("host_name")
    return RankTrace(
        path=str(path),
        events=events,
        rank=_whole_or_none(dist.get("rank"), "distributedInfo.rank", path),
        world_size=_whole_or_none(dist.get("world_size"), "distributedInfo.world_size", path),
        backend=None if backend is None else str(backend),
        device_names=[str(d.get("name")) for d in devices if isinstance(d, dict) and d.get("name")],
        devices=[d for d in devices if isinstance(d, dict)],
        host_name=None if host is None else str(host),
        record_shapes=None if shapes is None else bool(shapes),
    )


@contextmanager
def without_gc():
    """Events are long-lived containers, made by the hundred thousand: a cyclic collection
    pass every few thousand of them would make reading and analysis quadratic."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _header_field(header: dict, key: str, kind: type, path: Path):
    value = header.get(key)
    if value is not None and not isinstance(value, kind):
        want = "an object" if kind is dict else "a list"
        raise MalformedFile(f"{path}: header field {key} must be {want}, got {shortened(value)}")
    return value


def _whole_or_none(value, field: str, path: Path) -> int | None:
    """A rank or world size: a whole number from 0, or absent."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit() and len(value) < 10:
        value = int(value)
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or not 0 <= value < 2**31:
        raise MalformedFile(
            f"{path}: header field {field} must be a whole number from 0, got {shortened(value)}"
        )
    return int(value)


class _Parser:
    """The top-level object, key by key; the `traceEvents` array, event by event, in a window
    of the document that moves on as it is read."""

    def __init__(self, chunks: Iterable[str], where: str) -> None:
        self.chunks = iter(chunks)
        self.where = where
        self.text = ""  # the window: the document from character `base` on
        self.base = 0
        self.pos = 0  # in the window
        self.ended = False
        self.size: int | None = None
        self.decoder = json.JSONDecoder()
        self.n_events = 0
        self.shared: dict = {}  # one object for each distinct shape list (`_share`)
        self.strings: dict = {}

    def grow(self) -> bool:
        """More of the document in the window (as much again at least), the text before
        `pos` let go; False where the document has ended."""
        if self.ended:
            return False
        keep = self.text[self.pos :]
        parts, got = [keep], 0
        while got < max(len(keep), 1):
            chunk = next(self.chunks, None)
            if chunk is None:
                self.ended = True
                break
            parts.append(chunk)
            got += len(chunk)
        if not got:
            return False
        self.base, self.text, self.pos = self.base + self.pos, "".join(parts), 0
        return True

    def cut(self, at: int, msg: str = "") -> bool:
        """Whether a value that failed to decode at `at` may have been cut short by the
        window's end rather than be wrong: then the window has grown to try again."""
        near_end = at + _MARGIN >= len(self.text) or msg.startswith("Unterminated")
        return near_end and self.grow()

    def finish(self) -> int:
        """The document's length in characters, the rest of it read (and what is wrong with
        the file there, its size or its compression, said)."""
        if self.size is None:
            rest = sum(len(chunk) for chunk in self.chunks)
            self.size, self.ended = self.base + len(self.text) + rest, True
        return self.size

    def fail(self, what: str) -> MalformedFile:
        at = f"byte {self.base + self.pos:,} of {self.finish():,}"
        if self.n_events:
            at += f", after event {self.n_events:,}"
        return MalformedFile(f"{self.where}: {what} at {at}")

    def decode_fault(self, exc: json.JSONDecodeError) -> MalformedFile:
        self.pos = exc.pos
        truncated = exc.pos >= len(self.text) - 1 or "Unterminated" in exc.msg
        return self.fail("truncated: the JSON ends early" if truncated else exc.msg)

    def at_end(self) -> bool:
        """Past the whitespace at `pos`: whether the document ends there."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _WS:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return False
            if not self.grow():
                return True

    def skip(self) -> str:
        if self.at_end():
            raise self.fail("truncated: the JSON ends early")
        return self.text[self.pos]

    def expect(self, char: str) -> None:
        if self.skip() != char:
            raise self.fail(f"expected {char!r}, found {self.text[self.pos]!r}")
        self.pos += 1

    def value(self):
        while True:
            self.skip()
            try:
                obj, end = self.decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.cut(exc.pos, exc.msg):
                    continue
                raise self.decode_fault(exc) from None
            except RecursionError:
                raise self.fail("a header value nested deeper than the parser goes") from None
            except ValueError:  # Python's own cap on the digits of an integer
                raise self.fail("a number of thousands of digits in the header") from None
            if not self.cut(end):  # a number the window ends in may go on past it
                self.pos = end
                return obj

    def document(self) -> tuple[dict, list[Event]]:
        if self.at_end():
            raise MalformedFile(f"{self.where}: empty file")
        if self.skip() == "[":  # the bare-array form of the Chrome format
            return {}, self.events()
        self.expect("{")
        header: dict = {}
        events: list[Event] | None = None
        while self.skip() != "}":
            key = self.value()
            if not isinstance(key, str):
                raise self.fail("expected a key")
            self.expect(":")
            if key == "traceEvents":
                if self.skip() != "[":
                    raise self.fail("traceEvents is not a list")
                events = self.events()
            else:
                header[key] = self.value()
            if self.skip() == ",":
                self.pos += 1
        if events is None:
            raise NotATrace(f"{self.where}: not a profiler trace (no traceEvents)")
        return header, events

    def events(self) -> list[Event]:
        self.expect("[")
        out: list[Event] = []
        while not self.window_events(out):
            pass
        return out

    def window_events(self, out: list[Event]) -> bool:
        """The hot loop: the window's events into `out`, one C scanner call each, the rest
        kept to a minimum. True at the array's end; False where the window ended first and
        has grown."""
        kept, text, scan = CATEGORY, self.text, self.decoder.scan_once
        pos, n = self.pos, self.n_events
        try:
            while True:
                c = text[pos]
                while c in _WS_OR_COMMA:
                    pos += 1
                    c = text[pos]
                if c == "]":
                    break
                self.pos = pos
                e, pos = scan(text, pos)
                n += 1
                if e.__class__ is not dict:
                    self.n_events = n
                    raise self.fail("an event is not an object")
                if e.get("cat") in kept and e.get("ph") == "X":
                    out.append(self.event(e))
        except IndexError:
            self.pos, self.n_events = len(text), n
            if self.grow():
                return False
            raise self.fail("truncated: the JSON ends early") from None
        except StopIteration as exc:
            self.n_events = n
            if self.cut(exc.value):
                return False
            self.pos = exc.value
            raise self.fail(
                "truncated: the JSON ends early" if exc.value >= len(text) else "not a JSON value"
            ) from None
        except json.JSONDecodeError as exc:
            self.n_events = n
            if self.cut(exc.pos, exc.msg):
                return False
            raise self.decode_fault(exc) from None
        except RecursionError:
            self.n_events = n
            raise self.fail("an event nested deeper than the parser goes") from None
        except TypeError:  # a category that is no text cannot be looked up
            self.n_events = n
            raise self.fail("an event whose cat is not text") from None
        except ValueError:  # Python's own cap on the digits of an integer
            self.n_events = n
            raise self.fail("a number of thousands of digits in an event") from None
        self.pos, self.n_events = pos + 1, n
        return True

    def event(self, e: dict) -> Event:
        try:
            start, dur = float(e["ts"]) * _US, float(e.get("dur", 0.0)) * _US
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise self.fail(f"event without a valid ts/dur ({exc})") from None
        if not (math.isfinite(start) and math.isfinite(dur)):
            raise self.fail("event with a non-finite ts or dur")
        args = e.get("args")
        if args.__class__ is not dict:
            args = {}
        else:
            if "External id" not in args:
                _respell(args, _OLD_EXTERNAL_ID, "External id")
            if "Input dims" in args:  # PyTorch 1.8-1.9 spell the shapes so
                _respell(args, ("Input dims",), "Input Dims")
                _respell(args, ("Input types",), "Input type")
        for key in _LINKS:  # ids that index tables later: hashable or dropped
            if key in args and args[key].__class__ not in (int, str):
                del args[key]
        for key in _UNREAD:
            args.pop(key, None)
        for key in _SHAPES:
            if args.get(key).__class__ is list:
                args[key] = _share(self.shared, args[key])
        once = self.strings.setdefault  # the names and keys every event repeats, kept once
        name = str(e.get("name", ""))
        return Event(
            once(name, name),
            CATEGORY[e["cat"]],
            start,
            max(dur, 0.0),
            _hashable(e.get("pid", 0)),
            _hashable(e.get("tid", 0)),
            {once(k, k): v for k, v in args.items()},
        )


_LINKS = ("External id", "correlation")
# What no analysis reads and a trace repeats on every op: the Python call stack (with_stack),
# the trace's own name and iteration, the autograd sequence numbers. Dropped as each event is
# read, they are a quarter of a rank's memory.
_UNREAD = ("Call stack", "Trace name", "Trace iteration", "external ts", "Sequence number",
           "Fwd thread id")  # fmt: skip
# The shapes and dtypes of an op's inputs (record_shapes), the same few hundred lists over
# tens of thousands of ops: each distinct list is kept once and shared. Nothing changes them.
_SHAPES = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def _share(shared: dict, value: list) -> list:
    """The first list read equal to `value` (itself when it is the first)."""
    try:
        return shared.setdefault(_frozen(value), value)
    except TypeError:  # a dict or another unhashable value inside: kept as read
        return value


def _frozen(value):
    """A key equal only for equal lists of values of the same types (1, 1.0 and true apart)."""
    if value.__class__ is list:
        return tuple(_frozen(v) for v in value)
    return value.__class__, value


_OLD_EXTERNAL_ID = ("external id", "External ID")


def _respell(args: dict, old: tuple[str, ...], new: str) -> None:
    """Today's key for a value an older profiler wrote under another spelling."""
    for key in old:
        if key in args and new not in args:
            args[new] = args.pop(key)
            return


def _hashable(value):
    return value if value.__class__ in (int, str) else str(value)
