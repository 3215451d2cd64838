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

Closed-loop load (`concurrency` C) starts C requests at time 0 and sends the next one
when one finishes; offline load has every request at time 0; otherwise requests arrive at
their `arrival_s`. A prefix-cache hit rate h makes the first h of each new prompt cached
(attended, not computed; its blocks are held). Speculative decoding verifies k tokens per
step and keeps (1 − α^(k+1)) / (1 − α) of them in expectation (Leviathan, Kalman & Matias
2023, eq. 1), α the acceptance rate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ceiling.errors import DoesNotFit, InvalidInput

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

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_batched_tokens", "block_size"):
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


def _blocks(tokens, size: int):
    return -(-tokens // size)


def simulate(
    prompt: np.ndarray,
    output: np.ndarray,
    arrival_s: np.ndarray,
    time_fn: TimeFn,
    kv_blocks: int,
    policy: Policy | None = None,
    concurrency: int | None = None,
) -> Schedule:
    """Run the requests through the scheduler; see the module's docstring."""
    policy = policy or Policy()
    n = len(prompt)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    bs = policy.block_size
    if kv_blocks < 1:
        raise DoesNotFit("no room for a KV cache: the weights fill the memory")
    longest = int(_blocks(prompt + output, bs).max())
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
    arrival = np.array(arrival_s, dtype=float)
    closed = concurrency is not None
    if closed:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency must be a whole number ≥ 1, got {concurrency!r}")
        arrival[:] = np.inf
        arrival[: min(concurrency, n)] = 0.0
        order = np.arange(n)
    else:
        order = np.argsort(arrival, kind="stable")
    hit = policy.prefix_hit_rate
    q = policy.tokens_per_verify
    kept = policy.accepted_per_step
    budget = policy.max_batched_tokens

    computed = np.zeros(n)  # tokens whose K and V are in the cache
    target = prompt.astype(float)  # tokens to prefill before decoding
    generated = np.zeros(n)
    held = np.zeros(n, dtype=np.int64)  # KV blocks held
    fresh = np.ones(n, dtype=bool)  # never admitted (a prefix-cache hit applies)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)

    waiting: deque[int] = deque()
    running: list[int] = []
    free = kv_blocks
    nxt = 0  # next request in `order` not yet arrived
    released = min(concurrency, n) if closed else n
    t = 0.0
    preemptions = 0
    # runs of iterations: (start, first time, growth a step, steps, tokens, decodes,
    # prefill tokens, blocks held, compute bound); a run's step j lasts first + j·growth
    runs: list[tuple] = []
    done = 0

    def retire(cands, t, free, released, running, done):
        """Sequences among `cands` that have all their tokens finish at `t`."""
        fin = cands[generated[cands] >= output[cands]]
        if len(fin):
            finish[fin] = t
            free += int(held[fin].sum())
            held[fin] = 0
            gone = set(fin.tolist())
            running = [i for i in running if i not in gone]
            done += len(fin)
            if closed:
                for _ in range(len(fin)):
                    if released < n:
                        arrival[order[released]] = t
                        released += 1
        return free, released, running, done

    while done < n:
        while nxt < released and arrival[order[nxt]] <= t:
            waiting.append(int(order[nxt]))
            nxt += 1
        if not running and not waiting:
            t = float(arrival[order[nxt]])
            continue
        if (
            not waiting
            or len(running) >= policy.max_num_seqs
            or ((not fresh[waiting[0]] or hit == 0) and _blocks(target[waiting[0]], bs) > free)
        ):
            # nothing to admit: decode-only iterations until the next event, at once
            ids = np.fromiter(running, dtype=np.int64, count=len(running))
            next_arrival = float(arrival[order[nxt]]) if nxt < released else np.inf
            steps, first_s, growth_s, bound = _decode_run(ids, computed, target, generated, held,
                                    output, free, next_arrival - t, time_fn, policy)  # fmt: skip
            if steps:
                runs.append((t, first_s, growth_s, steps, float(len(ids) * q), len(ids), 0.0,
                             kv_blocks - free, bound))  # fmt: skip
                t += steps * first_s + growth_s * (steps * (steps - 1) / 2)
                grown = np.maximum(_blocks(computed[ids] + (steps - 1) * kept + q, bs)
                                   .astype(np.int64), held[ids])  # fmt: skip
                free -= int((grown - held[ids]).sum())
                held[ids] = grown
                computed[ids] += steps * kept
                generated[ids] += steps * kept
                free, released, running, done = retire(ids, t, free, released, running, done)
                continue
        ids = np.fromiter(running, dtype=np.int64, count=len(running))
        prefill_only = preempted = False
        if not policy.chunked_prefill and waiting and len(running) < policy.max_num_seqs:
            j = waiting[0]
            need = int(_blocks(target[j] if not fresh[j] else prompt[j], bs))
            prefill_only = need <= free
        if prefill_only:
            take = np.zeros(0, dtype=float)
            ids = ids[:0]
        else:
            rem = target[ids] - computed[ids]
            dec = rem <= 0
            want = np.where(dec, q, rem)
            before = np.cumsum(want) - want
            take = np.minimum(want, np.maximum(budget - before, 0.0))
            # blocks for the tokens scheduled; preempt the latest admitted while they do not fit
            need = np.maximum(_blocks(computed[ids] + take, bs).astype(np.int64) - held[ids], 0)
            total = int(need.sum())
            cut = len(ids)
            while total > free and cut > 0:
                cut -= 1
                v = int(ids[cut])
                total -= int(need[cut])
                free += int(held[v])
                held[v] = 0
                target[v] = prompt[v] + np.floor(generated[v])
                computed[v] = 0.0
                waiting.appendleft(v)
                preemptions += 1
            if cut < len(ids):
                ids, take, need = ids[:cut], take[:cut], need[:cut]
                running = running[:cut]
                preempted = True
            keep = take > 0
            ids, take, need = ids[keep], take[keep], need[keep]
            held[ids] += need
            free -= total
        used = float(take.sum())
        # admissions
        new, new_take = [], []
        if (policy.chunked_prefill or prefill_only) and not preempted:
            left = budget - used
            while waiting and left > 0 and len(running) < policy.max_num_seqs:
                j = waiting[0]
                start = float(np.floor(hit * prompt[j])) if fresh[j] else 0.0
                rest = target[j] - start
                chunk = min(rest, left) if policy.chunked_prefill else rest
                if chunk > left:
                    break
                blocks = int(
                    _blocks(prompt[j] + output[j] if policy.reserve_kv else start + chunk, bs)
                )
                if blocks > free:
                    break
                waiting.popleft()
                fresh[j] = False
                computed[j] = start
                held[j] = blocks
                free -= blocks
                running.append(j)
                new.append(j)
                new_take.append(chunk)
                left -= chunk
        if new:
            ids = np.concatenate([ids, np.array(new, dtype=np.int64)])
            take = np.concatenate([take, np.array(new_take, dtype=float)])
        if len(ids) == 0:  # nothing fits: wait for the next arrival
            if nxt < released:
                t = max(t, float(arrival[order[nxt]]))
                continue
            raise DoesNotFit("the KV cache cannot hold the waiting request")  # pragma: no cover
        cached = computed[ids]
        rem = target[ids] - cached
        dec = rem <= 0
        pf = ~dec
        n_dec = int(dec.sum())
        chunk = take[pf]
        pf_cached = cached[pf]
        completes = pf & (take >= rem)
        sampled = n_dec + int(completes.sum())
        dt, compute_bound = time_fn(
            n_dec,
            float(cached[dec].sum()),
            float(chunk.sum()),
            float((chunk * pf_cached + chunk * (chunk + 1) / 2).sum()),
            float(pf_cached.sum()),
            sampled,
            q,
        )
        runs.append((t, dt, 0.0, 1, float(take.sum()), n_dec, float(chunk.sum()),
                     kv_blocks - free, compute_bound))  # fmt: skip
        t += dt
        # results of the iteration
        dec_ids = ids[dec]
        computed[dec_ids] += kept
        generated[dec_ids] += kept
        pf_ids = ids[pf]
        computed[pf_ids] += chunk
        got = ids[completes]
        generated[got] += 1.0
        new_first = got[np.isnan(first[got])]
        first[new_first] = t
        free, released, running, done = retire(np.concatenate([dec_ids, got]), t, free,
                                               released, running, done)  # fmt: skip
    start, first_s, growth_s, steps, tok, dec, pf, blk, cb = (
        np.array(c) for c in (zip(*runs, strict=True) if runs else [()] * 9)
    )
    steps = steps.astype(np.int64)
    run = np.repeat(np.arange(len(steps)), steps)
    j = np.arange(len(run)) - np.repeat(np.cumsum(steps) - steps, steps)  # step within its run
    return Schedule(
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        output=output,
        prompt=prompt,
        iter_start_s=start[run] + j * first_s[run] + growth_s[run] * (j * (j - 1) / 2),
        iter_time_s=first_s[run] + growth_s[run] * j,
        iter_tokens=tok[run].astype(float),
        iter_decodes=dec[run].astype(np.int64),
        iter_prefill=pf[run].astype(float),
        iter_blocks=blk[run].astype(np.int64),
        iter_bound=cb[run].astype(bool),
        kv_blocks=kv_blocks,
        preemptions=preemptions,
        warmup=min(concurrency, n) if closed else 0,
    )


def _decode_run(ids, computed, target, generated, held, output, free, until_s, time_fn, policy):
    """Steps of decode-only iterations the running sequences can take up to an event — the
    step where the first sequence finishes, the cache filling, or `until_s` (the next
    arrival) — and each step's time. Every sequence adds `kept`
    tokens a step, so its cache grows by the same amount: `time_fn` is affine in the
    cached context at a fixed batch, and two evaluations give every step's time."""
    q, kept, bs = policy.tokens_per_verify, policy.accepted_per_step, policy.block_size
    n = len(ids)
    none = 0, 0.0, 0.0, False
    if n == 0 or n * q > policy.max_batched_tokens:
        return none
    c = computed[ids]
    if (target[ids] - c > 0).any():
        return none
    steps = int(np.ceil((output[ids] - generated[ids]) / kept).min())
    if steps <= 0:
        return none
    if not policy.reserve_kv:
        h = held[ids]

        def new_blocks(j: int) -> int:  # blocks the first j steps add
            return int(np.maximum(_blocks(c + (j - 1) * kept + q, bs) - h, 0).sum())

        # at most one partly used block more per sequence than the tokens need
        if (c.sum() + n * ((steps - 1) * kept + q)) / bs + n - h.sum() > free and (
            new_blocks(steps) > free
        ):
            lo, hi = 0, steps  # new_blocks(lo) fits, new_blocks(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if new_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid
            steps = lo
        if steps <= 0:
            return none
    ctx = float(c.sum())
    first, bound = time_fn(n, ctx, 0.0, 0.0, 0.0, n, q)
    second, _ = time_fn(n, ctx + n * kept, 0.0, 0.0, 0.0, n, q)
    growth = second - first
    if until_s < np.inf:
        # steps that start before `until_s`: step j starts at j·first + growth·j(j − 1)/2
        steps = min(steps, _steps_starting_before(until_s, first, growth))
    return (steps, first, growth, bound) if steps > 0 else none


def _steps_starting_before(until_s: float, first: float, growth: float) -> int:
    """The number of steps j ≥ 0 with j·first + growth·j(j − 1)/2 < until_s."""
    if until_s <= 0:
        return 0
    if first <= 0 and growth <= 0:  # steps that take no time: every step starts at 0
        return math.inf  # type: ignore[return-value]
    a = first - growth / 2  # start(j) = a·j + growth·j²/2
    if growth > 0:
        j = int((-a + math.sqrt(a * a + 2 * growth * until_s)) / growth)
    else:
        j = int(until_s / first) if first > 0 else 0
    while j > 0 and j * first + growth * (j * (j - 1) / 2) >= until_s:
        j -= 1
    while j * first + growth * (j * (j - 1) / 2) < until_s:
        j += 1
    return j
