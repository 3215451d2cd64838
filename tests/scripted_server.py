"""A TCP server on loopback whose every answer a test writes byte by byte, to play the
servers `serve --measure` meets: well-behaved ones, and ones that stall, lie, trickle,
flood or break the protocol.

`Scripted(answer)`: for each request, `answer(method, path, body)` gives an iterable of
bytes to send and floats (seconds to pause); the connection closes after it. The helpers
build the usual pieces: a JSON answer, the head of an event stream, one event.
"""

from __future__ import annotations

import json
import socket
import threading
import time

MODELS = {"data": [{"id": "scripted-model"}]}


def json_answer(obj, status: int = 200, reason: str = "OK") -> bytes:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def event(text: str | None = None, usage: int | None = None, chat: bool = False) -> bytes:
    if usage is not None:
        data = {"choices": [], "usage": {"completion_tokens": usage}}
    elif chat:
        data = {"choices": [{"delta": {"content": text}}]}
    else:
        data = {"choices": [{"text": text}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def tokens_of(body: dict) -> int:
    return int(body.get("max_tokens", 1))


def good_stream(body: dict, gap_s: float = 0.0):
    """A stream of `max_tokens` one-token events, then the usage report when asked."""
    yield STREAM_HEAD
    for i in range(tokens_of(body)):
        if i and gap_s:
            yield gap_s
        yield event(f" t{i}")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield event(usage=tokens_of(body))
    yield DONE


def well_behaved(method: str, path: str, body: dict):
    if method == "GET" and path == "/v1/models":
        return [json_answer(MODELS)]
    return good_stream(body)


class Scripted:
    def __init__(self, answer, host: str = "127.0.0.1"):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.answer = answer
        self.requests: list[tuple[str, str, dict]] = []
        port = self.sock.getsockname()[1]
        self.url = (
            f"http://[{host}]:{port}" if family == socket.AF_INET6 else f"http://{host}:{port}"
        )
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            method, path, body = _read_request(conn)
            self.requests.append((method, path, body))
            for part in self.answer(method, path, body):
                if isinstance(part, float | int):
                    time.sleep(part)
                else:
                    conn.sendall(part)
        except OSError:
            pass
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> tuple[str, str, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        rest += conn.recv(65536)
    body = json.loads(rest) if rest else {}
    return method, path, body
