"""The one HTTP client that talks to servers: JSON reads and server-sent-event streams,
each bounded by deadlines and size caps (httpx underneath).

Deadlines (`Deadlines`, seconds):
  connect     to open the connection;
  first_byte  from sending a request to the first byte of the answer (its status line);
  idle        between two reads of a streamed answer (a request queued in the server waits
              here for its first token, so this one is long);
  run         for the whole measurement, after which the requests still open are ended.
A JSON body is read up to `MAX_BODY` bytes and a stream line up to `MAX_LINE`; a server that
sends more is refused, never buffered. Every failure is a `ServerAnswer` whose text is one
line: what was asked and what the server answered (its status and the first line of its
body, or the deadline that passed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ceiling.errors import InvalidInput
from ceiling.text import printable

MAX_BODY = 4 << 20  # bytes of a JSON answer
MAX_LINE = 1 << 20  # bytes of one line of a stream
MAX_CONNECTIONS = 256
SHOWN = 200  # characters of a server's answer quoted in a message


@dataclass(frozen=True)
class Deadlines:
    connect_s: float = 10.0
    first_byte_s: float = 120.0
    idle_s: float = 300.0
    run_s: float = 3600.0

    def to_json(self) -> dict:
        return dict(self.__dict__)


class ServerAnswer(Exception):
    """A request the server did not answer as asked: `status` (None when no HTTP answer came)
    and a one-line `text`."""

    def __init__(self, text: str, status: int | None = None):
        super().__init__(text)
        self.status = status


def first_line(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    line = next((x.strip() for x in text.splitlines() if x.strip()), "(empty body)")
    return printable(line[:SHOWN] + ("…" if len(line) > SHOWN else ""))


def base_url(url: str) -> str:
    """The server's root from a URL a user gives (`http://host:8000`, `…/v1`,
    `…/v1/completions`); a bad scheme, host or port is refused in one line."""
    import httpx

    try:
        parsed = httpx.URL(url)
        _ = parsed.port
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise InvalidInput(f"measure needs an http:// or https:// server address, got {url!r}: "
                           f"{first_line(str(e))}") from None  # fmt: skip
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise InvalidInput(f"measure: port {parsed.port} of {url!r} is not a port (1…65535)")
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput(f"measure needs an http:// or https:// server address, got {url!r}")
    path = parsed.path.rstrip("/")
    for tail in ("/v1/chat/completions", "/v1/completions", "/v1"):
        path = path.removesuffix(tail)
    return str(parsed.copy_with(path=path or "/", query=None, fragment=None)).rstrip("/")


class Client:
    """Requests to one server under `deadlines`; `close()` ends every open request."""

    def __init__(self, url: str, deadlines: Deadlines = Deadlines()):
        import httpx

        self.base = base_url(url)
        self.deadlines = deadlines
        self._http = httpx.Client(
            base_url=self.base,
            timeout=httpx.Timeout(
                connect=deadlines.connect_s,
                read=deadlines.first_byte_s,
                write=deadlines.first_byte_s,
                pool=deadlines.run_s,
            ),
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=32),
            trust_env=False,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def get_json(self, path: str):
        """The JSON a GET of `path` answers."""
        until = time.perf_counter() + self.deadlines.first_byte_s
        with self._open("GET", path) as resp:
            body = _capped(resp.iter_bytes(), MAX_BODY, f"GET {path}", until)
        try:
            return json.loads(body)
        except ValueError:
            raise ServerAnswer(f"GET {path} answered {first_line(body)!r}, not JSON") from None

    def stream(self, path: str, body: dict, until: float) -> Iterator[tuple[float, dict]]:
        """(arrival time on the monotonic clock, event) for each server-sent event of a POST
        of `body` to `path`, until `[DONE]`, the end of the answer or the monotonic time
        `until` (the run's deadline)."""
        import httpx

        with self._open("POST", path, json=body) as resp:
            # from the status line on, every read waits at most `idle` (httpx reads the
            # request's timeouts again when the body starts)
            resp.request.extensions["timeout"]["read"] = self.deadlines.idle_s
            buffer = b""
            try:
                for chunk in resp.iter_bytes():
                    now = time.perf_counter()
                    if now > until:
                        raise ServerAnswer(f"POST {path}: still streaming at the run deadline")
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    if len(buffer) > MAX_LINE:
                        raise ServerAnswer(f"POST {path}: a stream line over {MAX_LINE >> 20} MiB")
                    for line in lines:
                        event = _event(line)
                        if event is _DONE:
                            return
                        if event is not None:
                            yield now, event
            except httpx.ReadTimeout:
                raise ServerAnswer(
                    f"POST {path}: the stream sent nothing for {self.deadlines.idle_s:g} s "
                    "(the idle deadline)"
                ) from None
            except httpx.HTTPError as e:
                raise ServerAnswer(f"POST {path}: {_said(e)}") from None

    def _open(self, method: str, path: str, **kw):
        import contextlib

        import httpx

        @contextlib.contextmanager
        def opened():
            try:
                with self._http.stream(method, path, **kw) as resp:
                    if resp.status_code != 200:
                        until = time.perf_counter() + self.deadlines.first_byte_s
                        body = _capped(resp.iter_bytes(), 1 << 16, "", until, quiet=True)
                        raise ServerAnswer(
                            f"{method} {path} answered HTTP {resp.status_code}: {first_line(body)}",
                            resp.status_code,
                        )
                    yield resp
            except httpx.ConnectTimeout:
                raise ServerAnswer(f"{method} {path}: no connection within "
                                   f"{self.deadlines.connect_s:g} s") from None  # fmt: skip
            except httpx.ReadTimeout:
                raise ServerAnswer(f"{method} {path}: no answer within "
                                   f"{self.deadlines.first_byte_s:g} s (the first-byte "
                                   "deadline)") from None  # fmt: skip
            except httpx.HTTPError as e:
                raise ServerAnswer(f"{method} {path}: {_said(e)}") from None

        return opened()


_DONE = object()


def _event(line: bytes):
    """The JSON of one `data:` line; `_DONE` at `[DONE]`; None for anything else (comments,
    keep-alives, `event:` lines, data that is not a JSON object)."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return _DONE
    try:
        event = json.loads(payload)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _capped(chunks, cap: int, what: str, until: float, quiet: bool = False) -> bytes:
    """The bytes of `chunks` up to `cap` (refused past it, or cut when `quiet`) and until
    the monotonic time `until`."""
    out = b""
    for chunk in chunks:
        out += chunk
        if time.perf_counter() > until:
            if quiet:
                return out[:cap]
            raise ServerAnswer(f"{what} was still sending after {len(out):,} bytes")
        if len(out) > cap:
            if quiet:
                return out[:cap]
            raise ServerAnswer(f"{what} answered more than {cap >> 20} MiB")
    return out


def _said(error: Exception) -> str:
    text = first_line(str(error)) if str(error) else ""
    return f"{type(error).__name__}{': ' + text if text else ''}"
