"""A discrete-event simulation of a continuous-batching scheduler (vLLM-style).

Each iteration the scheduler
1. takes the requests that have arrived into a first-come-first-served waiting queue;
2. gives every running sequence its tokens in admission order, within the iteration's token
   budget (`max_batched_tokens`): one (or k + 1 when verifying k speculated tokens) for a
   decoding sequence, the next chunk of its prompt for one being prefilled;
3. allocates paged KV-cache blocks (`block_size` tokens each) for the tokens scheduled;
   when the cache is full it preempts the most recently admitted sequence (recompute: its
   blocks are freed, it returns to the front of the queue and later prefills its prompt and
   the tokens it had generated) until the rest fit, and admits no one that iteration;
4. admits waiting requests while the budget, `max_num_seqs` and free blocks allow; a prompt
   is split into chunks when chunked prefill is on (vLLM V1's default), otherwise whole
   prompts are prefilled in iterations of their own, without decodes (vLLM V0's default);
5. runs the iteration: its time comes from `time_fn` (the roofline of
   `ceiling.model.serve.iteration`, or a fake one in tests); a sequence whose prompt
   completes samples its first token at the iteration's end (time to first token), a
   decoding one its next; a sequence that has its output tokens finishes and frees its
   blocks.

Closed-loop load (`concurrency` C) starts the first C requests at their `arrival_s` (all 0,
or spread over a ramp-up) and sends the next one when one finishes; offline load has every
request at time 0; otherwise requests arrive at their `arrival_s`. A prefix-cache hit rate
h makes the first h of each new prompt cached (attended, not computed; its blocks are
held). Speculative decoding verifies k tokens per step and keeps (1 − α^(k+1)) / (1 − α) of
them in expectation (Leviathan, Kalman & Matias 2023, eq. 1), α the acceptance rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.model.serve.sim_state import SimState, blocks_for

MAX_SPEC_TOKENS = 64  # draft tokens a step: engines propose a handful


@dataclass(frozen=True)
class Policy:
    """The engine's scheduling policy (vLLM's names and defaults where it has them)."""

    max_num_seqs: int = 256  # vLLM --max-num-seqs default
    max_batched_tokens: int = 8192  # tokens per iteration (vLLM V1 online default: 8192)
    chunked_prefill: bool = True
    block_size: int = 16  # tokens per KV-cache block (vLLM default)
    prefix_hit_rate: float = 0.0
    spec_tokens: int = 0  # k draft tokens verified per decode step (0: none)
    acceptance: float = 0.0  # α, probability a draft token is accepted
    # Reserve KV blocks for the whole request (prompt + output) when admitting it, so that no
    # sequence is ever preempted: TensorRT-LLM's default capacity scheduler policy,
    # GUARANTEED_NO_EVICT. False: blocks as tokens come, preempting when full (vLLM).
    reserve_kv: bool = False
    # Multi-step scheduling (vLLM 0.6's --num-scheduler-steps): the scheduler runs once for
    # this many decode steps of the same batch; a request arriving meanwhile waits for the
    # block to end, and the host's scheduling work is paid once a block. 1: every step.
    scheduler_steps: int = 1

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_batched_tokens", "block_size", "scheduler_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInput(
                    f"{name.replace('_', ' ')} must be a whole number ≥ 1, got {v!r}"
                )
        if not isinstance(self.spec_tokens, int) or not 0 <= self.spec_tokens <= MAX_SPEC_TOKENS:
            raise InvalidInput(
                f"speculative tokens must be 0 to {MAX_SPEC_TOKENS}, got {self.spec_tokens!r}"
            )
        for name in ("prefix_hit_rate", "acceptance"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 <= v < 1):
                raise InvalidInput(f"{name.replace('_', ' ')} must be in [0, 1), got {v!r}")

    @property
    def tokens_per_verify(self) -> int:
        return self.spec_tokens + 1

    @property
    def accepted_per_step(self) -> float:
        """Expected tokens a decode step keeps: (1 − α^(k+1)) / (1 − α)."""
        a, k = self.acceptance, self.spec_tokens
        return float(k + 1) if a == 1 else (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class Schedule:
    """What happened: per request and per iteration."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output: np.ndarray
    prompt: np.ndarray
    iter_start_s: np.ndarray
    iter_time_s: np.ndarray
    iter_tokens: np.ndarray
    iter_decodes: np.ndarray
    iter_prefill: np.ndarray  # prompt tokens in the iteration
    iter_blocks: np.ndarray  # KV blocks held during the iteration
    iter_bound: np.ndarray  # True where compute binds
    kv_blocks: int
    preemptions: int
    warmup: int = 0  # closed loop: the requests sent together at the start


# time_fn(decode_seqs, decode_context, prefill_tokens, prefill_pairs, prefill_cached,
#         sampled, query_per_decode) -> (seconds, compute_bound)
TimeFn = Callable[..., tuple[float, bool]]


def simulate(
    prompt: np.ndarray,
    output: np.ndarray,
    arrival_s: np.ndarray,
    time_fn: TimeFn,
    kv_blocks: int,
    policy: Policy | None = None,
    concurrency: int | None = None,
) -> Schedule:
    """Run the requests through the scheduler; see the module's docstring and
    `ceiling.model.serve.sim_state` for the event loop."""
    policy = policy or Policy()
    n = len(prompt)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    _check_fits(prompt, output, kv_blocks, policy)
    arrival_in = np.array(arrival_s, dtype=float)
    closed = concurrency is not None
    if closed:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency must be a whole number ≥ 1, got {concurrency!r}")
        released = min(concurrency, n)  # the streams' first requests
        arrival_in[released:] = np.inf  # each sent when one before it finishes
        order = list(range(n))
    else:
        order = np.argsort(arrival_in, kind="stable").tolist()
        released = n
    state = SimState(prompt.tolist(), output.tolist(), arrival_in.tolist(), order, released,
                     time_fn, kv_blocks, policy, closed)  # fmt: skip
    state.run()
    return Schedule(
        arrival_s=np.array(state.arrival),
        first_token_s=np.array(state.first),
        finish_s=np.array(state.finish),
        output=output,
        prompt=prompt,
        **_iterations(state.runs),
        kv_blocks=kv_blocks,
        preemptions=state.preemptions,
        warmup=min(concurrency, n) if closed else 0,
    )


def _check_fits(prompt: np.ndarray, output: np.ndarray, kv_blocks: int, policy: Policy) -> None:
    """Refuse a run whose longest request the cache, or without chunked prefill the token
    budget, cannot hold."""
    bs = policy.block_size
    if kv_blocks < 1:
        raise DoesNotFit("no room for a KV cache: the weights fill the memory")
    longest = int(blocks_for(prompt + output, bs).max())
    if longest > kv_blocks:
        raise DoesNotFit(
            f"a request of {int((prompt + output).max())} tokens needs {longest} KV blocks; "
            f"the cache holds {kv_blocks} ({kv_blocks * bs} tokens)"
        )
    if not policy.chunked_prefill and int((prompt + output).max()) > policy.max_batched_tokens:
        raise InvalidInput(
            f"without chunked prefill a whole prompt must fit the token budget: a request of "
            f"{int((prompt + output).max())} tokens > max batched tokens "
            f"{policy.max_batched_tokens}"
        )


def _iterations(runs: list[tuple]) -> dict[str, np.ndarray]:
    """Schedule's per-iteration arrays from the runs of iterations."""
    start, first_s, growth_s, steps, tok, dec, pf, blk, cb = (
        np.array(c) for c in (zip(*runs, strict=True) if runs else [()] * 9)
    )
    steps = steps.astype(np.int64)
    run = np.repeat(np.arange(len(steps)), steps)
    j = np.arange(len(run)) - np.repeat(np.cumsum(steps) - steps, steps)  # step within its run
    return {
        "iter_start_s": start[run] + j * first_s[run] + growth_s[run] * (j * (j - 1) / 2),
        "iter_time_s": first_s[run] + growth_s[run] * j,
        "iter_tokens": tok[run].astype(float),
        "iter_decodes": dec[run].astype(np.int64),
        "iter_prefill": pf[run].astype(float),
        "iter_blocks": blk[run].astype(np.int64),
        "iter_bound": cb[run].astype(bool),
    }


def late_streams(schedules) -> int:
    """A closed loop's streams whose first request was sent after every request the loop
    sends on a finish (a ramp-up longer than the run): they ran alone or with few others."""
    late = 0
    for s in schedules:
        first, rest = s.arrival_s[: s.warmup], s.arrival_s[s.warmup :]
        if s.warmup and len(rest):
            late += int((first > rest.max()).sum())
    return late
