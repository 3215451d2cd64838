"""The continuous-batching scheduler's state and the steps of its event loop.

`SimState.run` repeats, until every request has finished: `arrive` (requests whose time
has come join the waiting queue), `skip_decodes` (when every running sequence decodes and
no one can be admitted, the decode-only iterations up to the next event at once), and
otherwise one iteration: `schedule` (the running sequences' tokens within the budget, their
KV blocks, preempting when the cache is full), `admit` (waiting requests into the room
left), `run_iteration` (its time from `time_fn`) and `retire` (tokens sampled, finished
requests out). `ceiling.model.serve.scheduler` states the policy these steps follow.

Decoding sequences all advance `kept` tokens a step, so they are kept relative to a common
count K of tokens decoded: a sequence's cache holds its base + K tokens. Two heaps say when
something happens to one of them — the K at which it has all its output tokens, and the K
past which its KV blocks no longer hold the next step — so an iteration costs the events in
it, not the batch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from ceiling.errors import DoesNotFit

if TYPE_CHECKING:
    from ceiling.model.serve.scheduler import Policy, TimeFn

# The crossing heap popped one entry at a time up to this many, then split in one pass.
CROSSING_POPS = 64


def blocks_for(tokens, size: int):
    """KV blocks of `size` tokens that hold `tokens` (rounded up)."""
    return -(-tokens // size)


def steps_starting_before(until_s: float, first: float, growth: float) -> int:
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


@dataclass
class Batch:
    """One iteration's plan: the tokens each sequence gets (`tokens`: prefill chunks, and
    every sequence's when the budget was walked), the decoding sequences the budget left out
    (`idle`), how many decode (`active`) and the tokens in all (`used`)."""

    tokens: dict[int, float] = field(default_factory=dict)
    idle: list[int] = field(default_factory=list)
    active: int = 0
    used: float = 0.0
    prefill_only: bool = False  # whole prompts alone (no chunked prefill)
    preempted: bool = False


class SimState:
    """Every request's progress, the queues, the KV cache and the clock; the loop's steps
    are its methods, each named for the event it handles."""

    def __init__(self, prompt: list[int], output: list[int], arrival: list[float],
                 order: list[int], released: int, time_fn: TimeFn, kv_blocks: int,
                 policy: Policy, closed: bool) -> None:  # fmt: skip
        n = len(prompt)
        self.n, self.plen, self.out, self.arrival = n, prompt, output, arrival
        self.order = order  # requests in the order they arrive
        self.released = released  # requests whose arrival is known (closed loop: sent)
        self.closed = closed
        self.time_fn, self.kv_blocks = time_fn, kv_blocks
        self.block_size, self.prefix_hit = policy.block_size, policy.prefix_hit_rate
        self.verify_tokens, self.kept = policy.tokens_per_verify, policy.accepted_per_step
        self.budget, self.max_seqs = policy.max_batched_tokens, policy.max_num_seqs
        self.chunked, self.reserve = policy.chunked_prefill, policy.reserve_kv
        # multi-step scheduling: decode steps a scheduler call runs, and those left of the
        # block running now (no admission until it ends)
        self.block, self.block_left = policy.scheduler_steps, 0
        nan = float("nan")
        # per request; a decoding one keeps its cache and output counts relative to K
        self.computed = [0.0] * n  # tokens whose K and V are in the cache
        self.target = [float(p) for p in prompt]  # tokens to prefill before decoding
        self.generated = [0.0] * n
        self.held = [0] * n  # KV blocks held
        self.fresh = [True] * n  # never admitted (a prefix-cache hit applies)
        self.first = [nan] * n
        self.finish = [nan] * n
        self.decoding = [False] * n
        self.epoch = [0] * n  # heap entries of an older epoch are stale

        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}  # admission order
        self.filling: dict[int, None] = {}  # the running ones still prefilling, in order
        self.K = 0.0  # tokens each decoding sequence has decoded since the start
        self.n_decoding = 0
        self.base_sum = 0.0  # Σ cache bases of the decoding sequences
        self.dec_held = 0  # Σ blocks they hold
        self.done_at: list[tuple[float, int, int]] = []  # (K it has its tokens at, id, epoch)
        self.covers: list[tuple[float, int, int]] = []  # (last K its blocks hold a step at, ..)
        self.free = kv_blocks
        self.next_arrival = 0  # next request in `order` not yet arrived
        self.t = 0.0
        self.preemptions = 0
        self.done = 0
        # runs of iterations: (start, first time, growth a step, steps, tokens, decodes,
        # prefill tokens, blocks held, compute bound); a run's step j lasts first + j·growth
        self.runs: list[tuple] = []

    # the loop

    def run(self) -> None:
        """Simulate until every request has finished."""
        while self.done < self.n:
            self.arrive()
            if not self.running and not self.waiting:
                self.t = self.arrival[self.order[self.next_arrival]]
                continue
            if self.in_block() and self.skip_decodes(self.block_left):
                continue
            self.block_left = 0
            if self.only_decodes_can_run() and self.skip_decodes():
                continue
            batch = self.schedule()
            self.admit(batch)
            if not batch.used:  # nothing fits: wait for the next arrival
                if self.next_arrival < self.released:
                    self.t = max(self.t, self.arrival[self.order[self.next_arrival]])
                    continue
                raise DoesNotFit("the KV cache cannot hold the waiting request")  # pragma: no cover
            completes = self.run_iteration(batch)
            self.retire(batch, completes)

    def arrive(self) -> None:
        """The requests whose arrival time has come join the waiting queue."""
        while (
            self.next_arrival < self.released
            and self.arrival[self.order[self.next_arrival]] <= self.t
        ):
            self.waiting.append(self.order[self.next_arrival])
            self.next_arrival += 1

    def only_decodes_can_run(self) -> bool:
        """No one to admit (none waiting, the batch full, or the next one's blocks not free)
        and every running sequence decoding within the budget."""
        waiting = self.waiting
        no_admission = (
            not waiting
            or len(self.running) >= self.max_seqs
            or (
                (not self.fresh[waiting[0]] or self.prefix_hit == 0)
                and blocks_for(self.target[waiting[0]], self.block_size) > self.free
            )
        )
        return (
            no_admission
            and 0 < self.n_decoding == len(self.running)
            and self.n_decoding * self.verify_tokens <= self.budget
        )

    def in_block(self) -> bool:
        """Inside a multi-step block: decode steps of it are left and every running
        sequence decodes within the budget (no one is admitted until it ends)."""
        return (
            self.block_left > 0
            and 0 < self.n_decoding == len(self.running)
            and self.n_decoding * self.verify_tokens <= self.budget
        )

    # decode-only iterations up to the next event, at once

    def skip_decodes(self, block_left: int = 0) -> bool:
        """The decode-only iterations until the next event — a sequence finishing, the
        cache filling, the next arrival — taken at once (`time_fn` is affine in the context
        at a fixed batch); False when not one step can be taken. With multi-step
        scheduling an arrival is taken in only when the block it falls in ends, and inside
        a block (`block_left` steps of it left) not at all."""
        done_at, epoch = self.done_at, self.epoch
        while done_at[0][2] != epoch[done_at[0][1]]:
            heappop(done_at)
        n_dec, q = self.n_decoding, self.verify_tokens
        steps = math.ceil((done_at[0][0] - self.K) / self.kept)
        ctx = self.base_sum + n_dec * self.K
        if not self.reserve and (
            (ctx + n_dec * ((steps - 1) * self.kept + q)) / self.block_size + n_dec - self.dec_held
            > self.free
        ):
            steps = self._steps_the_cache_holds(steps)
        if steps > 0:
            first_s, bound = self.time_fn(n_dec, ctx, 0.0, 0.0, 0.0, n_dec, q)
            second_s, _ = self.time_fn(n_dec, ctx + n_dec * self.kept, 0.0, 0.0, 0.0, n_dec, q)
            growth_s = second_s - first_s
            if block_left:
                steps = min(steps, block_left)
            elif self.next_arrival < self.released:
                until_s = self.arrival[self.order[self.next_arrival]] - self.t
                cut = steps_starting_before(until_s, first_s, growth_s)
                if self.block > 1:  # the block the arrival falls in runs whole
                    cut = -(-max(cut, 1) // self.block) * self.block
                steps = min(steps, cut)
        if steps <= 0:
            return False
        self.block_left = block_left - steps if block_left else -steps % self.block
        self.runs.append((self.t, first_s, growth_s, steps, float(n_dec * q), n_dec, 0.0,
                          self.kv_blocks - self.free, bound))  # fmt: skip
        self.t += steps * first_s + growth_s * (steps * (steps - 1) / 2)
        self._grow_for_run(steps)
        self.K += steps * self.kept
        self.retire_decoded()
        return True

    def _steps_the_cache_holds(self, steps: int) -> int:
        """The most of `steps` decode steps whose new blocks fit the free ones."""
        ids, k0, kept = list(self.running), self.K, self.kept

        def new_blocks(j: int) -> int:  # blocks the first j steps add
            at = k0 + (j - 1) * kept
            return sum(self.grow(i, at) for i in ids)

        if new_blocks(steps) <= self.free:
            return steps
        lo, hi = 0, steps  # new_blocks(lo) fits, new_blocks(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if new_blocks(mid) <= self.free:
                lo = mid
            else:
                hi = mid
        return lo

    def _grow_for_run(self, steps: int) -> None:
        """The blocks the sequences whose cache the run crosses add for its last step."""
        last = self.K + (steps - 1) * self.kept
        held = self.held
        for i in self.crossing(last):
            add = self.grow(i, last)
            held[i] += add
            self.dec_held += add
            self.free -= add
            self.push_cover(i)

    # one iteration: schedule, admit, run, retire

    def schedule(self) -> Batch:
        """The running sequences' tokens in admission order within the budget and the KV
        blocks for them, the latest admitted preempted while the blocks do not fit; or, without
        chunked prefill, room kept for the next whole prompt alone."""
        batch = Batch(prefill_only=self._next_prompt_alone())
        if not batch.prefill_only:
            need, walked = self._tokens_of_running(batch)
            batch.preempted = self._preempt(need, batch.tokens)
            self._allocate(need, walked)
            batch.idle = [i for i in batch.idle if self.decoding[i]]  # (not preempted)
        else:
            walked = False
        batch.active = self.n_decoding - len(batch.idle) if not batch.prefill_only else 0
        batch.used = sum(batch.tokens.values()) + (
            0 if walked else batch.active * self.verify_tokens
        )
        return batch

    def _next_prompt_alone(self) -> bool:
        """Without chunked prefill: the next waiting prompt fits, and gets an iteration of
        its own."""
        if self.chunked or not self.waiting or len(self.running) >= self.max_seqs:
            return False
        j = self.waiting[0]
        return (
            blocks_for(self.target[j] if not self.fresh[j] else self.plen[j], self.block_size)
            <= self.free
        )

    def _tokens_of_running(self, batch: Batch) -> tuple[dict[int, int], bool]:
        """Each running sequence's tokens this iteration into `batch` and the blocks each adds
        (id -> blocks), and whether the budget ran out part way (the batch walked)."""
        target, computed, held, bs = self.target, self.computed, self.held, self.block_size
        need: dict[int, int] = {}
        want = self.n_decoding * self.verify_tokens + sum(
            target[i] - computed[i] for i in self.filling
        )
        if want <= self.budget:
            for i in self.filling:
                batch.tokens[i] = target[i] - computed[i]
                need[i] = max(int(blocks_for(target[i], bs)) - held[i], 0)
            for i in self.crossing(self.K):
                need[i] = self.grow(i, self.K)
            return need, False
        left = float(self.budget)
        for i in self.running:
            decoding = self.decoding[i]
            w = float(self.verify_tokens) if decoding else target[i] - computed[i]
            take = min(w, max(left, 0.0))
            left -= w
            if take > 0:
                batch.tokens[i] = take
            elif decoding:
                batch.idle.append(i)
            c = computed[i] + self.K if decoding else computed[i]
            need[i] = max(int(blocks_for(c + take, bs)) - held[i], 0)
        return need, True

    def _preempt(self, need: dict[int, int], tokens: dict[int, float]) -> bool:
        """Preempt the latest admitted while the blocks `need` asks for do not fit (recompute:
        back to the front of the queue); whether any was."""
        total = sum(need.values())
        preempted = False
        while total > self.free and self.running:
            v = next(reversed(self.running))
            total -= need.pop(v, 0)
            tokens.pop(v, None)
            if self.decoding[v]:
                self.stop_decoding(v)
            else:
                del self.filling[v]
            del self.running[v]
            self.free += self.held[v]
            self.held[v] = 0
            self.target[v] = self.plen[v] + math.floor(self.generated[v])
            self.computed[v] = 0.0
            self.waiting.appendleft(v)
            self.preemptions += 1
            preempted = True
        return preempted

    def _allocate(self, need: dict[int, int], walked: bool) -> None:
        """Give each sequence the blocks it needs; a decoding one's heap entries follow."""
        held, decoding = self.held, self.decoding
        for i, add in need.items():
            if add:
                held[i] += add
                self.free -= add
                if decoding[i]:
                    self.dec_held += add
            if decoding[i]:
                if walked:  # entries anew for one whose blocks grew; the others' hold
                    if add:
                        self.push(i)
                else:  # popped as crossing: its next
                    self.push_cover(i)

    def admit(self, batch: Batch) -> None:
        """Waiting requests into the room the budget, `max_num_seqs` and the free blocks leave
        (none in an iteration that preempted); a prompt is chunked when chunked prefill is on."""
        if not (self.chunked or batch.prefill_only) or batch.preempted:
            return
        left = self.budget - batch.used
        while self.waiting and left > 0 and len(self.running) < self.max_seqs:
            j = self.waiting[0]
            start = float(math.floor(self.prefix_hit * self.plen[j])) if self.fresh[j] else 0.0
            rest = self.target[j] - start
            chunk = min(rest, left) if self.chunked else rest
            if chunk > left:
                break
            total = self.plen[j] + self.out[j] if self.reserve else start + chunk
            blocks = int(blocks_for(total, self.block_size))
            if blocks > self.free:
                break
            self.waiting.popleft()
            self.fresh[j] = False
            self.computed[j] = start
            self.held[j] = blocks
            self.free -= blocks
            self.running[j] = None
            self.filling[j] = None
            batch.tokens[j] = chunk
            left -= chunk
            batch.used += chunk

    def run_iteration(self, batch: Batch) -> list[int]:
        """The iteration's time from `time_fn`, recorded; the clock moves past it. Returns
        the sequences whose prompt it completes."""
        active, tokens, computed, K = batch.active, batch.tokens, self.computed, self.K
        ctx = (
            self.base_sum + self.n_decoding * K - sum(computed[i] + K for i in batch.idle)
            if active
            else 0.0
        )
        pf_tok = pairs = pf_cached = 0.0
        completes = []
        for i in self.filling:
            take = tokens.get(i)
            if take:
                c = computed[i]
                pf_tok += take
                pairs += take * c + take * (take + 1) / 2
                pf_cached += c
                if take >= self.target[i] - c:
                    completes.append(i)
        dt, compute_bound = self.time_fn(active, ctx, pf_tok, pairs, pf_cached,
                                         active + len(completes), self.verify_tokens)  # fmt: skip
        self.runs.append((self.t, dt, 0.0, 1, float(batch.used), active, pf_tok,
                          self.kv_blocks - self.free, compute_bound))  # fmt: skip
        self.t += dt
        # a scheduler call: a decode-only batch starts a multi-step block
        self.block_left = self.block - 1 if active and not pf_tok else 0
        return completes

    def retire(self, batch: Batch, completes: list[int]) -> None:
        """The iteration's results: prefilled tokens cached, the decoding sequences a step on
        (the idle ones where they were), first tokens sampled; finished requests leave."""
        computed, generated = self.computed, self.generated
        for i in list(self.filling):
            take = batch.tokens.get(i)
            if take:
                computed[i] += take
        if batch.active:
            for i in batch.idle:  # they stay where they were while the others decode
                self.base_sum -= self.kept
                computed[i] -= self.kept
                generated[i] -= self.kept
                self.push(i)
            self.K += self.kept
            self.retire_decoded()
        for i in completes:
            generated[i] += 1.0
            if self.first[i] != self.first[i]:
                self.first[i] = self.t
            del self.filling[i]
            if generated[i] >= self.out[i]:
                self.finish_request(i)
            else:
                self.start_decoding(i)

    # requests and the decoding group

    def finish_request(self, i: int) -> None:
        """Request `i` has its tokens: its blocks are freed; a closed loop sends the next."""
        if self.decoding[i]:
            self.stop_decoding(i)
        self.finish[i] = self.t
        self.free += self.held[i]
        self.held[i] = 0
        del self.running[i]
        self.filling.pop(i, None)
        self.done += 1
        if self.closed and self.released < self.n:
            self.send_next()

    def send_next(self) -> None:
        """Closed loop: the next request is sent now. During a ramp-up it can be sent before
        a ramp start still to come, so it takes its place among the pending arrivals."""
        order, arrival = self.order, self.arrival
        j = self.released
        arrival[order[j]] = self.t
        while j > self.next_arrival and arrival[order[j - 1]] > self.t:
            order[j - 1], order[j] = order[j], order[j - 1]
            j -= 1
        self.released += 1

    def retire_decoded(self) -> None:
        """Finish the decoding sequences that have all their tokens at the current K."""
        done_at, epoch = self.done_at, self.epoch
        while done_at and done_at[0][0] <= self.K:
            _, i, e = heappop(done_at)
            if e == epoch[i]:
                self.finish_request(i)

    def push(self, i: int) -> None:
        """New heap entries of decoding sequence `i` (its older ones go stale)."""
        epoch = self.epoch
        epoch[i] += 1
        heappush(self.done_at, (self.out[i] - self.generated[i], i, epoch[i]))
        self.push_cover(i)
        if len(self.done_at) > 4 * len(self.running) + 1024:  # mostly stale: drop them at once
            for heap in (self.done_at, self.covers):
                heap[:] = [x for x in heap if x[2] == epoch[x[1]]]
                heapify(heap)

    def push_cover(self, i: int) -> None:
        """Decoding sequence `i`'s entry in the crossing heap: the last K its blocks hold a
        step at."""
        cover = self.held[i] * self.block_size - self.verify_tokens - self.computed[i]
        heappush(self.covers, (cover, i, self.epoch[i]))

    def start_decoding(self, i: int) -> None:
        """Sequence `i` joins the decoding group: its counts become relative to K."""
        self.computed[i] -= self.K
        self.generated[i] -= self.K
        self.decoding[i] = True
        self.n_decoding += 1
        self.base_sum += self.computed[i]
        self.dec_held += self.held[i]
        self.push(i)

    def stop_decoding(self, i: int) -> None:
        """Sequence `i` leaves the decoding group: its counts become absolute again."""
        self.base_sum -= self.computed[i]
        self.dec_held -= self.held[i]
        self.computed[i] += self.K
        self.generated[i] += self.K
        self.decoding[i] = False
        self.epoch[i] += 1
        self.n_decoding -= 1

    def crossing(self, at: float) -> list[int]:
        """Decoding sequences whose blocks do not hold a step at K = `at` (popped)."""
        covers, epoch = self.covers, self.epoch
        got = []
        popped = 0
        while covers and covers[0][0] < at:
            if popped == CROSSING_POPS:  # many cross (a long run of steps): split in one pass
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

    def grow(self, i: int, at: float) -> int:
        """Blocks decoding sequence `i` adds for a step at K = `at`."""
        return max(
            int(blocks_for(self.computed[i] + at + self.verify_tokens, self.block_size))
            - self.held[i],
            0,
        )
