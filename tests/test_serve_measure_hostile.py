"""`serve --measure` against servers that misbehave, each scripted byte by byte on loopback.

Clean is a correct measurement, or a CeilingError of one line naming what the server
answered (the command line's exit 2), within the deadlines. A hang, a traceback or a
message of several lines is a failure. Deadlines are short here so that a stalled server
costs a second; a guard thread catches a hang without timing anything.
"""

from __future__ import annotations

import json
import re
import socket
import threading

import pytest

from ceiling.errors import CeilingError
from ceiling.measure.http_stream import Deadlines
from ceiling.measure.serving import measure_server
from scripted_server import (
    DONE,
    MODELS,
    STREAM_HEAD,
    Scripted,
    event,
    good_stream,
    json_answer,
    tokens_of,
    well_behaved,
)

FAST = Deadlines(connect_s=1.0, first_byte_s=0.5, idle_s=0.5, run_s=3.0)
# for every server that does not stall: a loaded machine may be slow to pass on a whole
# answer, and a deadline must not be what refuses it
PATIENT = Deadlines(connect_s=60.0, first_byte_s=60.0, idle_s=60.0, run_s=120.0)
N, PROMPT, OUTPUT = 2, 4, 3
HANG_GUARD_S = 60.0


def posts(post):
    """A server whose /v1/models is well-behaved and whose POSTs `post(path, body)` answers."""

    def answer(method, path, body):
        if method == "GET":
            return [json_answer(MODELS)]
        return post(path, body)

    return answer


def models(*parts):
    return lambda method, path, body: list(parts) if method == "GET" else good_stream(body)


def status(code: int, text: str = "no"):
    return [json_answer({"error": {"message": f"{text} ({code})"}}, code, "Error")]


def forever(piece: bytes, gap_s: float = 0.01):
    def gen(*_):
        yield STREAM_HEAD
        while True:
            yield piece
            yield gap_s

    return gen


def refusing(*fields):
    """Answers 422 naming `fields` while any of them is sent, as `transformers serve` does."""

    def post(path, body):
        sent = [f for f in fields if f in body]
        if sent:
            return status(422, f"Unexpected fields in the request: {set(sent)}")
        return good_stream(body)

    return post


def chat_only(path, body):
    if path == "/v1/completions":
        return status(404, "Not Found")
    return [STREAM_HEAD, *(event(f"c{i}", chat=True) for i in range(tokens_of(body))), DONE]


def crlf(path, body):
    yield STREAM_HEAD
    for i in range(tokens_of(body)):
        yield event(f"x{i}").replace(b"\n", b"\r\n")
    yield DONE


def split_bytes(path, body):
    whole = b"".join(p for p in good_stream(body) if isinstance(p, bytes))
    head = len(STREAM_HEAD)
    yield whole[:head]
    for i in range(head, len(whole), 3):
        yield whole[i : i + 3]


def with_noise(path, body):
    yield STREAM_HEAD
    for i in range(tokens_of(body)):
        yield b": keep-alive\n\nevent: message\ndata: {not json\n\ndata: 17\n\n"
        yield event(f"n{i}").replace(b"data: ", b"data:")
    yield DONE


def two_tokens_an_event(path, body):
    n = tokens_of(body)
    yield STREAM_HEAD
    for i in range(0, n, 2):
        yield event(f"a{i} b{i}")
    yield event(usage=n)
    yield DONE


def no_done(path, body):
    yield STREAM_HEAD
    for i in range(tokens_of(body)):
        yield event(f"e{i}")


def surrogates(path, body):
    yield STREAM_HEAD
    for _ in range(tokens_of(body)):
        yield b'data: {"choices": [{"text": "\\ud800\\u0000\\u001b[2J"}]}\n\n'
    yield DONE


def every_other_fails():
    count = iter(range(1_000_000))

    def post(path, body):
        return status(500, "boom") if next(count) % 2 == 1 else good_stream(body)

    return post


# (name, server's answer, expected: "ok", "partial", or a pattern the one-line error matches)
# fmt: off
CASES = [
    *[(f"models answer {c}", models(*status(c)), f"HTTP {c}") for c in
      (400, 401, 403, 404, 405, 429, 500, 502, 503, 504)],
    ("models not JSON", models(json_answer(b"<html>hi</html>")), "not JSON"),
    ("models without data", models(json_answer({"object": "list"})), "lists no model"),
    ("models empty", models(json_answer({"data": []})), "lists no model"),
    ("models over 4 MiB", models(json_answer(b"[" + b"1," * (3 << 20) + b"1]")), "MiB"),
    ("models silent", models(30.0), "first-byte|no whole answer"),
    ("models closes at once", models(), "GET /v1/models"),
    ("models garbage", models(b"hello there\r\n\r\n"), "GET /v1/models"),
    ("models trickle head", models(*[x for _ in range(400) for x in (b"H", 0.05)]),
     "no whole answer|GET /v1/models"),
    ("models trickle body",
     models(b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n", *[x for _ in range(400) for x in
            (b"{", 0.05)]),
     "still sending|no whole answer|first-byte"),
    *[(f"completions answer {c}", posts(lambda p, b, c=c: status(c)), f"HTTP {c}") for c in
      (400, 401, 403, 404, 405, 413, 429, 500, 502, 503, 504)],
    ("completions silent", posts(lambda p, b: [30.0]), "first-byte"),
    ("headers then silence", posts(lambda p, b: [STREAM_HEAD, 30.0]), "idle deadline"),
    ("keep-alives forever", posts(forever(b": ping\n\n")), "run deadline|no whole answer"),
    ("tokens forever", posts(forever(event("z"), 0.0)), "more than the"),
    ("a line without end", posts(forever(b"data: " + b"a" * 65536, 0.0)), "over 1 MiB"),
    ("events without text", posts(lambda p, b: [STREAM_HEAD, event(""), event(""), DONE]),
     "no text"),
    ("usage above max_tokens", posts(lambda p, b: [STREAM_HEAD, event("a"), event(usage=99),
                                                   DONE]), "reports 99 tokens"),
    ("closes mid-stream", posts(lambda p, b: [STREAM_HEAD]), "no text"),
    ("not streamed", posts(lambda p, b: [json_answer({"choices": [{"text": "hi"}]})]), "no text"),
    ("redirect", posts(lambda p, b: [b"HTTP/1.1 301 Moved\r\nLocation: http://x/\r\n"
                                     b"Content-Length: 0\r\n\r\n"]), "HTTP 301"),
    ("garbage status line", posts(lambda p, b: [b"NOT HTTP AT ALL\r\n\r\n"]), "POST"),
    ("only bad JSON", posts(lambda p, b: [STREAM_HEAD, b"data: {oops\n\n" * 3, DONE]), "no text"),
    ("head trickle", posts(lambda p, b: [x for _ in range(400) for x in (b"H", 0.05)]),
     "no whole answer|POST"),
    ("chunked garbage", posts(lambda p, b: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                            b"\r\nzz\r\nhello\r\n"]), "POST"),
    ("well-behaved", well_behaved, "ok"),
    ("no usage report", posts(refusing()), "ok"),
    ("refuses ignore_eos and min_tokens", posts(refusing("ignore_eos", "min_tokens")), "ok"),
    ("refuses stream_options", posts(refusing("stream_options")), "ok"),
    ("chat only", posts(chat_only), "ok"),
    ("CRLF lines", posts(crlf), "ok"),
    ("three bytes a write", posts(split_bytes), "ok"),
    ("comments and bad lines between", posts(with_noise), "ok"),
    ("two tokens an event", posts(two_tokens_an_event), "ok"),
    ("no [DONE]", posts(no_done), "ok"),
    ("escapes in text", posts(surrogates), "ok"),
    ("every other request fails", posts(every_other_fails()), "partial"),
]
# fmt: on
# the servers that stall on purpose, the only ones measured under the short deadlines
STALLS = {
    "models silent",
    "models trickle head",
    "models trickle body",
    "completions silent",
    "headers then silence",
    "keep-alives forever",
    "head trickle",
}


def _run(answer, host="127.0.0.1", deadlines: Deadlines = PATIENT):
    with Scripted(answer, host) as server:
        box: list = []

        def go():
            try:
                box.append(measure_server(server.url, [PROMPT] * N, [OUTPUT] * N, [0.0] * N,
                                          deadlines=deadlines))  # fmt: skip
            except Exception as e:
                box.append(e)

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        thread.join(HANG_GUARD_S)
        assert box, "the measurement hung past every deadline"
        return box[0], server


def test_the_battery_has_fifty_servers():
    assert len(CASES) >= 50
    assert {c[0] for c in CASES} >= STALLS


@pytest.mark.parametrize("name,answer,expected", CASES, ids=[c[0] for c in CASES])
def test_each_hostile_server_is_answered_cleanly(name, answer, expected):
    result, _ = _run(answer, deadlines=FAST if name in STALLS else PATIENT)
    if expected in ("ok", "partial"):
        assert not isinstance(result, Exception), f"{name}: {result!r}"
        if expected == "ok":
            assert result.failed == 0
            assert result.output_tokens == (N * OUTPUT if result.warmup == 0 else OUTPUT)
        else:
            assert 0 < result.failed < N and "HTTP 500" in result.errors[0][0]
        return
    assert isinstance(result, CeilingError), f"{name}: {type(result).__name__}: {result}"
    text = str(result)
    assert "\n" not in text and re.search(expected, text), text


def test_refused_fields_are_dropped_and_said():
    m, server = _run(posts(refusing("ignore_eos", "min_tokens")))
    assert m.protocol.extras == ("stream_options",)
    assert "ignore_eos" in m.protocol.notes[0] and "end-of-sequence" in m.protocol.notes[0]
    sent = [body for method, _, body in server.requests if method == "POST"]
    assert "ignore_eos" in sent[0] and all("ignore_eos" not in b for b in sent[-N:])
    assert m.counted == "the server's usage report"


def test_tokens_come_from_the_usage_report_else_the_events():
    bundled, _ = _run(posts(two_tokens_an_event))  # 2 events of 2 tokens, usage 3
    assert bundled.output_tokens == N * OUTPUT and bundled.counted.startswith("the server's")
    plain, _ = _run(posts(refusing("stream_options")))
    assert plain.output_tokens == N * OUTPUT and plain.counted.startswith("stream events")
    assert json.dumps(plain.to_json())  # the notes and errors serialise


def test_chat_only_servers_are_spoken_to_in_chat():
    m, server = _run(posts(chat_only))
    assert m.protocol.path == "/v1/chat/completions"
    assert server.requests[-1][2]["messages"][0]["role"] == "user"


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback here")
def test_an_ipv6_server_is_measured():
    m, _ = _run(well_behaved, host="::1")
    assert m.failed == 0 and m.output_tokens == N * OUTPUT


def _stall_after(k: int):
    """Answers its first `k` POSTs (the probe among them) at once, then stalls each."""
    count = iter(range(1_000_000))

    def post(path, body):
        return good_stream(body) if next(count) < k else [STREAM_HEAD, 60.0]

    return post


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_measurement_and_keeps_what_finished(sig):
    import os
    import signal
    import subprocess
    import sys
    import time

    with Scripted(posts(_stall_after(3))) as server:
        cmd = [sys.executable, "-m", "ceiling", "serve", "gpt:tiny", "--spec", "h100-sxm",
               "--input-tokens", "4", "--output-tokens", "3", "--concurrency", "1",
               "--num-requests", "6", "--measure", server.url, "--json"]  # fmt: skip

        # as from a terminal: a test runner's worker may ignore SIGINT, and a child that
        # inherits that ignores it too (Python turns it into KeyboardInterrupt only from
        # the default disposition)
        def default_sigint():
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=default_sigint)  # fmt: skip
        for _ in range(int(HANG_GUARD_S / 0.1)):  # the probe and two requests, then a stall
            if sum(m == "POST" for m, _, _ in server.requests) >= 4:
                break
            time.sleep(0.1)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, err.decode()
    measured = json.loads(out)["measured"]
    assert measured["interrupted"] == "interrupted"
    # two finished (one of them the closed loop's warm-up), one open, three never sent
    assert measured["requests"] == 6 and measured["failed"] == 0
    assert measured["unfinished"] == 4
    assert measured["output_tokens"] == 3


def test_no_two_prompts_share_a_prefix_and_each_keeps_its_length():
    from ceiling.measure.serving import prompt_text

    prompts = [prompt_text(i, 64) for i in range(1, 4097)]
    assert len({tuple(p.split()[:3]) for p in prompts}) == 4096
    assert all(len(p.split()) == 64 for p in prompts)
    assert prompt_text(5, 1) == "so" and len(prompt_text(5, 2).split()) == 2
    _, server = _run(well_behaved)
    sent = [body["prompt"] for method, _, body in server.requests if method == "POST"]
    assert len(set(sent)) == len(sent)  # the probe and every request differ
