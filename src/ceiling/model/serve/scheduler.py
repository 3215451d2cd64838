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
from heapq import heapify, heappop, heappush

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
    """Run the requests through the scheduler; see the module's docstring.

    Decoding sequences all advance `kept` tokens a step, so they are kept relative to a
    common count K of tokens decoded: a sequence's cache holds its base + K tokens. Two heaps
    say when something happens to one of them — the K at which it has all its output tokens,
    and the K past which its KV blocks no longer hold the next step — so an iteration costs
    the events in it, not the batch; stretches of decode-only iterations between events are
    taken at once (`time_fn` is affine in the context at a fixed batch)."""
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
    arrival_in = np.array(arrival_s, dtype=float)
    closed = concurrency is not None
    if closed:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency must be a whole number ≥ 1, got {concurrency!r}")
        arrival_in[:] = np.inf
        arrival_in[: min(concurrency, n)] = 0.0
        order = list(range(n))
    else:
        order = np.argsort(arrival_in, kind="stable").tolist()
    arrival = arrival_in.tolist()
    plen, out = prompt.tolist(), output.tolist()
    hit = policy.prefix_hit_rate
    q = policy.tokens_per_verify
    kept = policy.accepted_per_step
    budget = policy.max_batched_tokens
    max_seqs = policy.max_num_seqs
    chunked = policy.chunked_prefill
    reserve = policy.reserve_kv
    nan = float("nan")

    # per request; a decoding one keeps its cache and output counts relative to K
    computed = [0.0] * n  # tokens whose K and V are in the cache
    target = [float(p) for p in plen]  # tokens to prefill before decoding
    generated = [0.0] * n
    held = [0] * n  # KV blocks held
    fresh = [True] * n  # never admitted (a prefix-cache hit applies)
    first = [nan] * n
    finish = [nan] * n
    decoding = [False] * n
    epoch = [0] * n  # heap entries of an older epoch are stale

    waiting: deque[int] = deque()
    running: dict[int, None] = {}  # admission order
    filling: dict[int, None] = {}  # the running ones still prefilling, in admission order
    K = 0.0  # tokens each decoding sequence has decoded since the start
    n_dec = 0
    base_sum = 0.0  # Σ cache bases of the decoding sequences
    dec_held = 0  # Σ blocks they hold
    done_at: list[tuple[float, int, int]] = []  # (K at which it has its tokens, id, epoch)
    covers: list[tuple[float, int, int]] = []  # (last K its blocks hold a step at, id, epoch)
    free = kv_blocks
    nxt = 0  # next request in `order` not yet arrived
    released = min(concurrency, n) if closed else n
    t = 0.0
    preemptions = 0
    done = 0
    # runs of iterations: (start, first time, growth a step, steps, tokens, decodes,
    # prefill tokens, blocks held, compute bound); a run's step j lasts first + j·growth
    runs: list[tuple] = []

    def push(i: int) -> None:
        epoch[i] += 1
        heappush(done_at, (out[i] - generated[i], i, epoch[i]))
        heappush(covers, (held[i] * bs - q - computed[i], i, epoch[i]))
        if len(done_at) > 4 * len(running) + 1024:  # mostly stale entries: drop them at once
            for heap in (done_at, covers):
                heap[:] = [x for x in heap if x[2] == epoch[x[1]]]
                heapify(heap)

    def start_decoding(i: int) -> None:
        nonlocal n_dec, base_sum, dec_held
        computed[i] -= K
        generated[i] -= K
        decoding[i] = True
        n_dec += 1
        base_sum += computed[i]
        dec_held += held[i]
        push(i)

    def stop_decoding(i: int) -> None:
        nonlocal n_dec, base_sum, dec_held
        base_sum -= computed[i]
        dec_held -= held[i]
        computed[i] += K
        generated[i] += K
        decoding[i] = False
        epoch[i] += 1
        n_dec -= 1

    def retire(i: int) -> None:
        nonlocal free, released, done
        if decoding[i]:
            stop_decoding(i)
        finish[i] = t
        free += held[i]
        held[i] = 0
        del running[i]
        filling.pop(i, None)
        done += 1
        if closed and released < n:
            arrival[order[released]] = t
            released += 1

    def retire_decoded() -> None:
        while done_at and done_at[0][0] <= K:
            _, i, e = heappop(done_at)
            if e == epoch[i]:
                retire(i)

    def crossing(at: float) -> list[int]:
        """Decoding sequences whose blocks do not hold a step at K = `at` (popped)."""
        got = []
        popped = 0
        while covers and covers[0][0] < at:
            if popped == 64:  # many cross (a long run of steps): split the heap in one pass
                rest = []
                for entry in covers:
                    if entry[0] >= at:
                        rest.append(entry)
                    elif entry[2] == epoch[entry[1]]:
                        got.append(entry[1])
                covers[:] = rest
                heapify(covers)
                break
            _, i, e = heappop(covers)
            popped += 1
            if e == epoch[i]:
                got.append(i)
        return got

    def grow(i: int, at: float) -> int:
        """Blocks decoding sequence `i` adds for a step at K = `at`."""
        return max(int(_blocks(computed[i] + at + q, bs)) - held[i], 0)

    while done < n:
        while nxt < released and arrival[order[nxt]] <= t:
            waiting.append(order[nxt])
            nxt += 1
        if not running and not waiting:
            t = arrival[order[nxt]]
            continue
        if (
            (
                not waiting
                or len(running) >= max_seqs
                or ((not fresh[waiting[0]] or hit == 0) and _blocks(target[waiting[0]], bs) > free)
            )
            and 0 < n_dec == len(running)
            and n_dec * q <= budget
        ):
            # nothing to admit, every sequence decoding: decode-only iterations until the
            # next event — a sequence finishing, the cache filling, the next arrival — at once
            while done_at[0][2] != epoch[done_at[0][1]]:
                heappop(done_at)
            steps = math.ceil((done_at[0][0] - K) / kept)
            ctx = base_sum + n_dec * K
            if not reserve and (
                (ctx + n_dec * ((steps - 1) * kept + q)) / bs + n_dec - dec_held > free
            ):
                ids = list(running)

                def new_blocks(j: int, ids=ids, k0=K) -> int:  # blocks the first j steps add
                    at = k0 + (j - 1) * kept
                    return sum(grow(i, at) for i in ids)

                if new_blocks(steps) > free:
                    lo, hi = 0, steps  # new_blocks(lo) fits, new_blocks(hi) does not
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if new_blocks(mid) <= free:
                            lo = mid
                        else:
                            hi = mid
                    steps = lo
            if steps > 0:
                first_s, bound = time_fn(n_dec, ctx, 0.0, 0.0, 0.0, n_dec, q)
                second_s, _ = time_fn(n_dec, ctx + n_dec * kept, 0.0, 0.0, 0.0, n_dec, q)
                growth_s = second_s - first_s
                if nxt < released:
                    steps = min(steps, _steps_starting_before(arrival[order[nxt]] - t, first_s,
                                                              growth_s))  # fmt: skip
            if steps > 0:
                runs.append((t, first_s, growth_s, steps, float(n_dec * q), n_dec, 0.0,
                             kv_blocks - free, bound))  # fmt: skip
                t += steps * first_s + growth_s * (steps * (steps - 1) / 2)
                last = K + (steps - 1) * kept
                for i in crossing(last):
                    add = grow(i, last)
                    held[i] += add
                    dec_held += add
                    free -= add
                    heappush(covers, (held[i] * bs - q - computed[i], i, epoch[i]))
                K += steps * kept
                retire_decoded()
                continue
        prefill_only = preempted = False
        if not chunked and waiting and len(running) < max_seqs:
            j = waiting[0]
            prefill_only = _blocks(target[j] if not fresh[j] else plen[j], bs) <= free
        # the running sequences' tokens, in admission order within the budget
        # id -> tokens this iteration: the prefill chunks, and every sequence's when walking
        sched: dict[int, float] = {}
        need: dict[int, int] = {}  # id -> blocks it adds
        idle: list[int] = []  # decoding sequences the budget leaves out
        walked = False
        if not prefill_only:
            want = n_dec * q + sum(target[i] - computed[i] for i in filling)
            if want <= budget:
                for i in filling:
                    sched[i] = target[i] - computed[i]
                    need[i] = max(int(_blocks(target[i], bs)) - held[i], 0)
                for i in crossing(K):
                    need[i] = grow(i, K)
            else:  # the budget runs out part way: walk the batch
                walked = True
                left = float(budget)
                for i in running:
                    w = float(q) if decoding[i] else target[i] - computed[i]
                    take = min(w, max(left, 0.0))
                    left -= w
                    if take > 0:
                        sched[i] = take
                    elif decoding[i]:
                        idle.append(i)
                    c = computed[i] + K if decoding[i] else computed[i]
                    need[i] = max(int(_blocks(c + take, bs)) - held[i], 0)
            total = sum(need.values())
            # preempt the latest admitted while the blocks do not fit
            while total > free and running:
                v = next(reversed(running))
                total -= need.pop(v, 0)
                sched.pop(v, None)
                if decoding[v]:
                    stop_decoding(v)
                else:
                    del filling[v]
                del running[v]
                free += held[v]
                held[v] = 0
                target[v] = plen[v] + math.floor(generated[v])
                computed[v] = 0.0
                waiting.appendleft(v)
                preemptions += 1
                preempted = True
            for i, add in need.items():
                if add:
                    held[i] += add
                    free -= add
                    if decoding[i]:
                        dec_held += add
                if decoding[i]:
                    if walked:  # its entries: new ones
                        push(i)
                    else:  # popped as crossing: its next
                        heappush(covers, (held[i] * bs - q - computed[i], i, epoch[i]))
            idle = [i for i in idle if decoding[i]]  # (not preempted)
        active = n_dec - len(idle) if not prefill_only else 0
        used = sum(sched.values()) + (0 if walked else active * q)
        # admissions
        if (chunked or prefill_only) and not preempted:
            left = budget - used
            while waiting and left > 0 and len(running) < max_seqs:
                j = waiting[0]
                start = float(math.floor(hit * plen[j])) if fresh[j] else 0.0
                rest = target[j] - start
                chunk = min(rest, left) if chunked else rest
                if chunk > left:
                    break
                blocks = int(_blocks(plen[j] + out[j] if reserve else start + chunk, bs))
                if blocks > free:
                    break
                waiting.popleft()
                fresh[j] = False
                computed[j] = start
                held[j] = blocks
                free -= blocks
                running[j] = None
                filling[j] = None
                sched[j] = chunk
                left -= chunk
                used += chunk
        if not used:  # nothing fits: wait for the next arrival
            if nxt < released:
                t = max(t, arrival[order[nxt]])
                continue
            raise DoesNotFit("the KV cache cannot hold the waiting request")  # pragma: no cover
        ctx = base_sum + n_dec * K - sum(computed[i] + K for i in idle) if active else 0.0
        pf_tok = pairs = pf_cached = 0.0
        completes = []
        for i in filling:
            take = sched.get(i)
            if take:
                c = computed[i]
                pf_tok += take
                pairs += take * c + take * (take + 1) / 2
                pf_cached += c
                if take >= target[i] - c:
                    completes.append(i)
        dt, compute_bound = time_fn(active, ctx, pf_tok, pairs, pf_cached,
                                    active + len(completes), q)  # fmt: skip
        runs.append((t, dt, 0.0, 1, float(used), active, pf_tok,
                     kv_blocks - free, compute_bound))  # fmt: skip
        t += dt
        # results of the iteration
        for i in list(filling):
            take = sched.get(i)
            if take:
                computed[i] += take
        if active:
            for i in idle:  # they stay where they were while the others decode
                base_sum -= kept
                computed[i] -= kept
                generated[i] -= kept
                push(i)
            K += kept
            retire_decoded()
        for i in completes:
            generated[i] += 1.0
            if first[i] != first[i]:
                first[i] = t
            del filling[i]
            if generated[i] >= out[i]:
                retire(i)
            else:
                start_decoding(i)
    return Schedule(
        arrival_s=np.array(arrival),
        first_token_s=np.array(first),
        finish_s=np.array(finish),
        output=output,
        prompt=prompt,
        **_iterations(runs),
        kv_blocks=kv_blocks,
        preemptions=preemptions,
        warmup=min(concurrency, n) if closed else 0,
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
