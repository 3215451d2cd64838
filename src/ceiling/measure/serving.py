"""Measure a running OpenAI-compatible server (vLLM, SGLang, TensorRT-LLM, `transformers
serve`, llama.cpp) with a workload, as the field's benchmark clients do.

Each request is a streamed `POST /v1/completions` (or `/v1/chat/completions` where the
server has no completions API) with a prompt of about its prompt length (one short word a
token; its first words differ from every other request's, so no prefix cache serves it) and
`max_tokens` its output length. Engine-specific fields go only where the server
takes them: one probe request is sent first with `ignore_eos` and `min_tokens` (vLLM's and
SGLang's way to make every asked token come) and `stream_options.include_usage`; a field the
server refuses (HTTP 400/422) is dropped, and the result says so (outputs may then end early
at an end-of-sequence token, which the token counts show).

Tokens of a request: the `completion_tokens` of the server's usage report when it sends one,
else the number of stream events that carried text (one token an event; stated). Times come
from the monotonic clock; the figures are computed by `ceiling.model.serve.metrics`, in the
definitions of vLLM's `benchmark_serving` (TTFT, TPOT, ITL, E2E), the same function that
scores the simulation, with the same warm-up left out. ITL is each gap between two events
that carried text: a server that sends several tokens in one event shows a longer ITL than
TPOT (which divides by the tokens).

Requests are sent at their arrival times, or by `concurrency` workers each sending its next
request when its last one ends (closed loop), worker k's first at the arrival time of
request k (all at 0, or spread over a ramp-up as guidellm's `rampup_duration` does). Every
read is bounded (`http_stream.Deadlines`); Ctrl-C or SIGTERM ends the measurement at once,
keeping the requests already finished.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from ceiling.errors import WorkerFailed
from ceiling.measure.http_stream import MAX_CONNECTIONS, Client, Deadlines, ServerAnswer

EXTRAS = ("ignore_eos", "min_tokens", "stream_options")
WAIT_SLICE_S = 0.1


@dataclass(frozen=True)
class Sample:
    """One request as the client saw it: monotonic times of sending, of each event that
    carried text (`chunks`) and of the end; its tokens and how they were counted; or the
    one-line reason it failed."""

    start: float
    chunks: tuple[float, ...] = ()
    end: float = 0.0
    tokens: int = 0
    from_usage: bool = False
    error: str | None = None
    status: int | None = None  # the HTTP status of a refused request


@dataclass(frozen=True)
class Protocol:
    """How this server is spoken to: the path, the engine-specific fields it takes, and what
    was learned probing it."""

    path: str = "/v1/completions"
    extras: tuple[str, ...] = EXTRAS
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    url: str
    model: str
    requests: int  # in the workload
    failed: int  # ended with an error
    unfinished: int  # not sent or still open when the run stopped
    output_tokens: int
    duration_s: float
    ttft_s: object  # Distribution
    tpot_s: object
    itl_s: object
    e2e_s: object
    counted: str  # how tokens were counted
    protocol: Protocol = field(default_factory=Protocol)
    errors: tuple[tuple[str, int], ...] = ()  # the commonest failures and their counts
    interrupted: str | None = None  # why the run ended early, if it did
    warmup: int = 0  # requests left out of the figures as warm-up
    # each finished request, in the order sent: (start, first token, end) seconds from the
    # run's start and its output tokens (`calibrate` reads the batch sizes from them)
    timeline: tuple[tuple[float, float, float, int], ...] = ()
    # the share of the counted requests sent within one ITL p50 of another
    # (`metrics.started_together`): a closed loop in step prefills its prompts together
    started_together: float | None = None

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        done = self.requests - self.failed - self.unfinished - self.warmup
        return done / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict:
        from ceiling.model.serve.metrics import headline_json

        return {
            "url": self.url,
            "model": self.model,
            "requests": self.requests,
            "failed": self.failed,
            "unfinished": self.unfinished,
            "warmup": self.warmup,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            **headline_json(self),
            "tokens_counted_by": self.counted,
            "endpoint": self.protocol.path,
            "fields_sent": list(self.protocol.extras),
            "notes": list(self.protocol.notes),
            "errors": [{"error": e, "requests": n} for e, n in self.errors],
            "interrupted": self.interrupted,
            "started_together": self.started_together,
            "per_request": timeline_json(self.timeline),
        }


def timeline_json(timeline) -> dict:
    """The requests' times and tokens as columns, to the microsecond."""
    cols = list(zip(*timeline, strict=True)) or [(), (), (), ()]
    names = ("start_s", "first_token_s", "end_s")
    return {
        **{k: [round(t, 6) for t in c] for k, c in zip(names, cols, strict=False)},
        "output_tokens": list(cols[3]),
    }


# short words most tokenizers keep whole: a request's first words spell its index in them
WORDS = ("hi", "yes", "no", "ok", "go", "so", "up", "on", "we", "me", "do", "be", "at", "it",
         "is", "as")  # fmt: skip


def prompt_text(index: int, tokens: int) -> str:
    """A prompt of about `tokens` tokens (one short word a token) whose first three words
    differ from every other request's (up to 4,096 of them), so that no server's prefix
    cache serves one request from another's, as random token ids do in vLLM's benchmark."""
    n = max(int(tokens), 1)
    head = [WORDS[(index // len(WORDS) ** k) % len(WORDS)] for k in range(min(3, n))]
    return " ".join(head + ["hi"] * (n - len(head)))


def _body(protocol: Protocol, model: str, prompt_tokens: int, output_tokens: int,
          index: int = 0) -> dict:  # fmt: skip
    prompt = prompt_text(index, prompt_tokens)
    body: dict = {"model": model, "max_tokens": int(output_tokens), "stream": True,
                  "temperature": 0.0}  # fmt: skip
    if protocol.path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    extras = {"ignore_eos": True, "min_tokens": int(output_tokens),
              "stream_options": {"include_usage": True}}  # fmt: skip
    return body | {k: extras[k] for k in protocol.extras}


def _text(event: dict, chat: bool) -> str:
    try:
        choice = event["choices"][0]
        text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return text if isinstance(text, str) else ""


def _usage(event: dict) -> int | None:
    usage = event.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def one_request(client: Client, protocol: Protocol, model: str, prompt_tokens: int,
                output_tokens: int, until: float, index: int = 0) -> Sample:  # fmt: skip
    """Send one request and read its stream; a failure is a Sample with its `error`."""
    start = time.perf_counter()
    chat = protocol.path.endswith("chat/completions")
    chunks: list[float] = []
    usage = None
    try:
        body = _body(protocol, model, prompt_tokens, output_tokens, index)
        for now, event in client.stream(protocol.path, body, until):
            usage = _usage(event) if _usage(event) is not None else usage
            if _text(event, chat):
                chunks.append(now)
                if len(chunks) > output_tokens:
                    raise ServerAnswer(f"the server sent more than the {output_tokens} tokens "
                                       "asked (max_tokens)")  # fmt: skip
    except ServerAnswer as e:
        return Sample(start, tuple(chunks), time.perf_counter(), error=str(e), status=e.status)
    if usage is not None and usage > output_tokens:
        return Sample(start, tuple(chunks), time.perf_counter(),
                      error=f"the server reports {usage} tokens for a request of "
                            f"max_tokens {output_tokens}")  # fmt: skip
    if not chunks:
        return Sample(start, (), time.perf_counter(), error="the stream carried no text")
    tokens = usage if usage is not None else len(chunks)
    return Sample(start, tuple(chunks), time.perf_counter(), max(tokens, 1), usage is not None)


def probe(client: Client, model: str, until: float) -> Protocol:
    """Send one short request to learn the path and the engine-specific fields the server
    takes; fields it refuses are dropped and noted."""
    protocol, notes = Protocol(), []
    for _ in range(len(EXTRAS) + 2):
        s = one_request(client, protocol, model, 4, 2, until)
        if s.error is None:
            return Protocol(protocol.path, protocol.extras, tuple(notes))
        status = s.status
        if status == 404 and protocol.path == "/v1/completions":
            notes.append("the server has no /v1/completions: sent to /v1/chat/completions")
            protocol = Protocol("/v1/chat/completions", protocol.extras)
        elif status in (400, 422) and protocol.extras:
            named = tuple(k for k in protocol.extras if k in s.error) or protocol.extras
            notes.append(f"the server refused {', '.join(named)} ({s.error}): sent without; "
                         "outputs may end early at an end-of-sequence token")  # fmt: skip
            protocol = Protocol(protocol.path, tuple(k for k in protocol.extras if k not in named))
        else:
            break
    raise WorkerFailed(f"the server at {client.base} does not stream a completion: {s.error}")


def served_model(client: Client) -> str:
    """The first model `GET /v1/models` lists."""
    try:
        data = client.get_json("/v1/models")
        return str(data["data"][0]["id"])
    except ServerAnswer as e:
        raise WorkerFailed(f"no OpenAI-compatible server answers at {client.base}: {e}") from None
    except (KeyError, IndexError, TypeError):
        raise WorkerFailed(
            f"the server at {client.base} lists no model at GET /v1/models"
        ) from None


def _bounded(fn, seconds: float, what: str):
    """`fn()` on a daemon thread, waited for at most `seconds` (a server that trickles its
    answer a byte at a time cannot hold the process; Ctrl-C ends the wait)."""
    out: list = []

    def call():
        try:
            out.append((True, fn()))
        except BaseException as e:  # handed to the waiting thread
            out.append((False, e))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if not out:
        raise WorkerFailed(f"{what}: no whole answer within {seconds:g} s")
    ok, value = out[0]
    if not ok:
        raise value
    return value


def measure_server(url, prompt, output, arrival_s, concurrency=None, model=None,
                   deadlines: Deadlines = Deadlines()) -> Measured:  # fmt: skip
    """Send the workload to the server at `url`; see the module's docstring."""
    client = Client(url, deadlines)
    answer_s = min(deadlines.connect_s + deadlines.first_byte_s + deadlines.idle_s,
                   deadlines.run_s)  # fmt: skip
    try:
        until = time.perf_counter() + deadlines.run_s
        name = model or _bounded(lambda: served_model(client), answer_s,
                                 f"the server at {client.base} (GET /v1/models)")  # fmt: skip
        protocol = _bounded(lambda: probe(client, name, until),
                            min(deadlines.run_s, answer_s * (len(EXTRAS) + 2)),
                            f"the server at {client.base} (a first completion)")  # fmt: skip
        runner = _Runner(client, protocol, name, prompt, output, deadlines)
        interrupted = runner.run(arrival_s, concurrency)
    finally:
        _close(client)
    return _measured(url, name, protocol, runner, interrupted, concurrency)


CLOSE_S = 2.0  # the longest a measurement waits to close its connections


def _close(client) -> None:
    """Close the client's connections, waiting at most CLOSE_S: a request still reading from
    a stalled server (an interrupted run) may hold its connection, and its daemon thread
    ends with the process."""
    thread = threading.Thread(target=client.close, daemon=True)
    thread.start()
    thread.join(CLOSE_S)


class _Runner:
    """Sends the requests on daemon threads (a server that never answers cannot hold the
    process) and waits for them, for the run deadline or for Ctrl-C/SIGTERM."""

    def __init__(self, client, protocol, model, prompt, output, deadlines):
        self.client, self.protocol, self.model = client, protocol, model
        self.prompt, self.output = [int(x) for x in prompt], [int(x) for x in output]
        self.n = len(self.prompt)
        self.samples: list[Sample | None] = [None] * self.n
        self.finished = threading.Semaphore(0)
        self.slots = threading.Semaphore(min(self.n, MAX_CONNECTIONS))
        self.t0 = time.perf_counter()
        self.until = self.t0 + deadlines.run_s
        self.lock = threading.Lock()

    def _send(self, i: int) -> None:
        try:
            self.samples[i] = one_request(self.client, self.protocol, self.model, self.prompt[i],
                                          self.output[i], self.until, i + 1)  # fmt: skip
        except Exception as e:  # its failure is its sample
            self.samples[i] = Sample(time.perf_counter(), error=f"{type(e).__name__}: {e}")
        self.finished.release()

    def run(self, arrival_s, concurrency) -> str | None:
        """None when every request ended; else why the run stopped."""
        previous = _on_sigterm()
        try:
            self._dispatch(arrival_s, concurrency)
            for _ in range(self.n):
                while not self.finished.acquire(timeout=WAIT_SLICE_S):
                    if time.perf_counter() > self.until:
                        return "the run deadline passed"
            return None
        except KeyboardInterrupt:
            return "interrupted"
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _dispatch(self, arrival_s, concurrency) -> None:
        if concurrency:
            streams = min(int(concurrency), self.n)
            queue = iter(range(streams, self.n))

            def worker(first: int):
                # its first request at its arrival time (0, or its place in a ramp-up)
                wait = self.t0 + float(arrival_s[first]) - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                i = first
                while i is not None and time.perf_counter() <= self.until:
                    self._send(i)
                    with self.lock:
                        i = next(queue, None)

            for k in range(streams):
                threading.Thread(target=worker, args=(k,), daemon=True).start()
            return
        import numpy as np

        for i in np.argsort(np.asarray(arrival_s, dtype=float), kind="stable"):
            wait = self.t0 + float(arrival_s[i]) - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if time.perf_counter() > self.until:
                return
            self.slots.acquire()
            threading.Thread(target=self._held, args=(int(i),), daemon=True).start()

    def _held(self, i: int) -> None:
        try:
            self._send(i)
        finally:
            self.slots.release()


def _on_sigterm():
    """SIGTERM ends a measurement as Ctrl-C does (only the main thread can set it)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, signal.default_int_handler)


def _measured(url, name, protocol, runner: _Runner, interrupted, concurrency) -> Measured:
    import numpy as np

    from ceiling.model.serve.metrics import Distribution, client_figures, started_together

    samples = [s for s in runner.samples if s is not None]
    fine = [(i, s) for i, s in enumerate(runner.samples) if s is not None and s.error is None]
    ok = [s for _, s in fine]
    errors = Counter(s.error for s in samples if s.error is not None)
    if not ok:
        why = errors.most_common(1)[0][0] if errors else interrupted or "none finished"
        raise WorkerFailed(f"the server at {url} completed none of the {runner.n} requests: {why}")
    # a closed loop's warm-up: the C requests its streams start with (the first C by index;
    # during a ramp-up a stream's second request can be sent before another's first)
    first = int(concurrency) if concurrency else 0
    warm = sorted((s for i, s in fine if i < first), key=lambda s: s.start)
    rest = sorted((s for i, s in fine if i >= first), key=lambda s: s.start)
    warmup = len(warm) if rest else 0
    order = warm + rest
    t0 = runner.t0
    fig = client_figures(
        arrival=np.array([s.start - t0 for s in order]),
        first=np.array([s.chunks[0] - t0 for s in order]),
        finish=np.array([s.end - t0 for s in order]),
        output=np.array([s.tokens for s in order]),
        warmup=warmup,
    )
    gaps = np.concatenate([np.diff(s.chunks) for s in order[warmup:]] + [np.zeros(0)])
    itl = Distribution.of(gaps)
    together = started_together([s.start for s in order[warmup:]], itl.p50) if concurrency else None
    by_usage = sum(s.from_usage for s in ok)
    counted = ("the server's usage report" if by_usage == len(ok) else
               "stream events with text, one token each (the server sent no usage report)"
               if by_usage == 0 else "the usage report where sent, else stream events")  # fmt: skip
    return Measured(
        url=url, model=name, requests=runner.n, failed=len(samples) - len(ok),
        unfinished=runner.n - len(samples),
        output_tokens=fig["output_tokens"], duration_s=fig["duration_s"],
        ttft_s=fig["ttft_s"], tpot_s=fig["tpot_s"], itl_s=itl, started_together=together,
        e2e_s=fig["e2e_s"], counted=counted, protocol=protocol,
        errors=tuple(errors.most_common(3)), interrupted=interrupted, warmup=warmup,
        timeline=tuple((s.start - t0, s.chunks[0] - t0, s.end - t0, s.tokens)
                       for s in sorted(ok, key=lambda s: s.start)),
    )  # fmt: skip
