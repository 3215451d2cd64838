"""`serve --measure`: a server started here on loopback streams tokens at known delays; the
client's TTFT and TPOT come out as those delays."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ceiling.errors import InvalidInput, WorkerFailed
from ceiling.measure.serving import measure_server

FIRST_S = 0.06  # the server waits this long before the first token
GAP_S = 0.02  # and this long between tokens
SLACK = 10.0  # what a machine loaded many times over may add to a delay, at most


class Streamer(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "fake-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(FIRST_S)
        for i in range(request["max_tokens"]):
            if i:
                time.sleep(GAP_S)
            event = {"choices": [{"text": f" t{i}"}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Streamer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_measured_ttft_and_tpot_are_the_servers_delays(server):
    n, out = 6, 8
    m = measure_server(server, np.full(n, 32), np.full(n, out), np.zeros(n), concurrency=3)
    # the first three (sent together at the start) are the closed loop's warm-up, left out
    # as the simulation leaves them out
    assert m.model == "fake-model" and m.failed == 0 and m.warmup == 3
    assert m.output_tokens == (n - 3) * out and m.counted.startswith("stream events")
    # never below the server's delays (a loaded machine only adds to them; the bound above
    # catches a client that mistimes by an order of magnitude, not a slow machine)
    assert 1.0 <= m.ttft_s.p50 / FIRST_S < SLACK
    assert 1.0 <= m.tpot_s.p50 / GAP_S < SLACK
    assert 1.0 <= m.itl_s.p50 / GAP_S < SLACK  # each gap between two events
    assert m.e2e_s.p50 == pytest.approx(m.ttft_s.p50 + (out - 1) * m.tpot_s.p50, rel=0.05)
    # the second round of three, from its first send to its last token: one request's time
    one = FIRST_S + (out - 1) * GAP_S
    assert one <= m.duration_s < one * SLACK


def test_a_ramped_closed_loop_starts_each_stream_at_its_time(server):
    # two streams, the second starting 2 s in (a ramp-up of 4 s); the first stream sends
    # requests 2 and 3 when its earlier ones end, long before (one is FIRST + GAP = 0.08 s)
    n, out = 4, 2
    m = measure_server(server, np.full(n, 8), np.full(n, out), [0.0, 2.0, 0.0, 0.0],
                       concurrency=2)  # fmt: skip
    starts = sorted(t[0] for t in m.timeline)
    assert m.failed == 0 and starts[-1] >= 2.0
    # the warm-up is the two requests the streams start with, the second sent last: the
    # figures are of requests 2 and 3, the first stream's two back to back
    assert m.warmup == 2 and m.output_tokens == 2 * out
    assert 0.0 <= m.started_together <= 1.0
    one = FIRST_S + (out - 1) * GAP_S
    assert 2 * one <= m.duration_s < min(2 * one * SLACK, 2.0)


def test_poisson_arrivals_are_sent_at_their_times(server):
    arrivals = np.array([0.0, 0.3])
    m = measure_server(server, np.full(2, 8), np.full(2, 2), arrivals)
    assert m.failed == 0
    # the second request starts at 0.3 s and lasts FIRST + GAP: the run, from the first
    # request's send (a loaded machine may start its thread late), ends after both
    first = min(start for start, *_ in m.timeline)
    assert 0.3 + FIRST_S + GAP_S - first <= m.duration_s < (0.3 + FIRST_S + GAP_S) * SLACK


def test_serve_measure_puts_the_server_beside_the_prediction(server, cli):
    code, out, err = cli("serve", "gpt:tiny", "--spec", "h100-sxm", "--input-tokens", "8",
                         "--output-tokens", "4", "--concurrency", "2", "--num-requests", "4",
                         "--measure", server, "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    # two of the four are warm-up on both sides
    assert d["measured"]["requests"] == 4 and d["measured"]["warmup"] == 2
    assert 0.0 <= d["measured"]["started_together"] <= 1.0
    assert d["measured"]["output_tokens"] == 8 and d["output_tokens"] == 8
    assert d["measured"]["tpot_s"]["p50"] >= GAP_S and d["measured"]["itl_s"]["p50"] >= GAP_S
    assert d["tpot_s"]["p50"] < GAP_S  # the simulated tiny model is far faster
    # every finished request kept, warm-up included, for `--calibrate`: sent, first token,
    # end in that order, its decode the length of its gaps, and its tokens
    kept = d["measured"]["per_request"]
    assert kept["output_tokens"] == [4] * 4
    for start, first, end in zip(kept["start_s"], kept["first_token_s"], kept["end_s"],
                                 strict=True):  # fmt: skip
        # (the client reads the first token late when the host is loaded: a gap may look
        # shorter than the server slept, never absent)
        assert 0 <= start < first and end - first >= 2 * GAP_S


def test_no_server_and_bad_addresses_are_one_line():
    with pytest.raises(InvalidInput, match="http"):
        measure_server("ftp://x", [1], [1], [0.0])
    with pytest.raises(WorkerFailed, match="no OpenAI-compatible server"):
        measure_server("http://127.0.0.1:9", [1], [1], [0.0])
