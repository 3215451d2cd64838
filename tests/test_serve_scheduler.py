"""The serving scheduler against schedules worked out by hand, with a fake iteration time."""

import numpy as np
import pytest

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.model.serve.metrics import Slo, max_rate, started_together, summarize
from ceiling.model.serve.scheduler import Policy, simulate
from ceiling.model.serve.workload import ramp_starts

CALLS = []


def fake_time(n_dec, dec_ctx, pf_tok, pf_pairs, pf_cached, sampled, q):
    """1 s per iteration plus 0.1 s per token: easy to add up by hand."""
    CALLS.append((n_dec, dec_ctx, pf_tok, pf_pairs, pf_cached, sampled))
    return 1.0 + 0.1 * (n_dec * q + pf_tok), False


def _run(prompt, output, arrival=None, kv_blocks=1000, **policy):
    CALLS.clear()
    arrival = np.zeros(len(prompt)) if arrival is None else np.asarray(arrival, float)
    return simulate(np.array(prompt), np.array(output), arrival, fake_time, kv_blocks,
                    Policy(**policy))  # fmt: skip


def test_two_requests_one_prefill_chunk_each():
    # both prompts (4 and 6 tokens) in the first iteration: 1 + 0.1·10 = 2 s; both sample
    # their first token at 2 s. Then two decodes (1.2 s): B has its 2 tokens at 3.2 s; A
    # decodes alone (1.1 s) and has its 3 tokens at 4.3 s.
    s = _run([4, 6], [3, 2])
    assert s.first_token_s.tolist() == pytest.approx([2.0, 2.0])
    assert s.finish_s.tolist() == pytest.approx([4.3, 3.2])
    assert s.iter_time_s.tolist() == pytest.approx([2.0, 1.2, 1.1])
    # the first iteration: 10 prompt tokens, causal pairs 4·5/2 + 6·7/2, both sample
    assert CALLS[0] == (0, 0.0, 10.0, 31.0, 0.0, 2)
    # then the decodes attend over their caches: 4 + 6 tokens, then A's 5
    calls = [c[:2] for c in CALLS]
    assert calls.index((2, 10.0)) < calls.index((1, 5.0))
    m = summarize([s])
    assert m.ttft_s.mean == pytest.approx(2.0)
    assert m.e2e_s.p50 == pytest.approx(3.75)
    # TPOT: A (4.3 − 2) / 2, B (3.2 − 2) / 1
    assert m.tpot_s.mean == pytest.approx((1.15 + 1.2) / 2)
    assert m.output_tokens_per_s == pytest.approx(5 / 4.3)
    assert m.requests_per_s == pytest.approx(2 / 4.3)


def test_chunked_prefill_mixes_a_decode_with_the_next_chunk():
    # budget 5: A's 4 tokens and 1 of B's (1.5 s); A decodes beside 4 more of B's (1.5 s);
    # A's last decode beside B's last prompt token (1.2 s): A ends and B's first token
    # comes at 4.2 s; B decodes alone (1.1 s).
    s = _run([4, 6], [3, 2], max_batched_tokens=5)
    assert s.iter_time_s.tolist() == pytest.approx([1.5, 1.5, 1.2, 1.1])
    assert s.first_token_s.tolist() == pytest.approx([1.5, 4.2])
    assert s.finish_s.tolist() == pytest.approx([4.2, 5.3])
    # B's second chunk: 4 tokens after 1 cached: 4·1 + 4·5/2 = 14 pairs
    assert CALLS[1] == (1, 4.0, 4.0, 14.0, 1.0, 1)


def test_without_chunking_prompts_get_iterations_of_their_own():
    # B arrives at 0.5 s while A decodes: its prompt runs alone, then both decode
    s = _run([4, 6], [3, 2], arrival=[0.0, 0.5], chunked_prefill=False)
    # A's prefill (1.4 s); B waiting → B's prefill alone (1.6 s); both decode (1.2 s):
    # A has 2, B has 2 → B done at 4.2; A decodes (1.1 s) → done at 5.3
    assert s.iter_time_s.tolist() == pytest.approx([1.4, 1.6, 1.2, 1.1])
    assert s.first_token_s.tolist() == pytest.approx([1.4, 3.0])
    assert s.finish_s.tolist() == pytest.approx([5.3, 4.2])


def test_a_full_cache_preempts_the_latest_admitted_and_recomputes_it():
    # blocks of 2 tokens, 6 blocks: A (4 + 4) and B (4 + 4) each need 2 blocks for the
    # prompt and grow by a block every 2 tokens; the cache fills and B is preempted
    s = _run([4, 4], [5, 5], kv_blocks=6, block_size=2)
    assert s.preemptions >= 1
    assert np.isfinite(s.finish_s).all()
    assert s.iter_blocks.max() <= 6
    # B was recomputed: it finishes after A though both started together
    assert s.finish_s[1] > s.finish_s[0]


def test_reserving_the_whole_request_never_preempts():
    s = _run([4, 4], [5, 5], kv_blocks=6, block_size=2, reserve_kv=True)
    assert s.preemptions == 0
    # A reserves 5 blocks (9 tokens); B waits until A is done
    assert s.first_token_s[1] > s.finish_s[0] - 1e-9


def test_closed_loop_sends_the_next_request_when_one_finishes():
    CALLS.clear()
    s = simulate(np.array([2, 2, 2]), np.array([1, 1, 1]), np.zeros(3), fake_time, 100,
                 Policy(), concurrency=1)  # fmt: skip
    # one at a time: each a single 1.2 s prefill that samples its only token
    assert s.arrival_s.tolist() == pytest.approx([0.0, 1.2, 2.4])
    assert s.finish_s.tolist() == pytest.approx([1.2, 2.4, 3.6])
    # the first request (sent at the start) is the warm-up: the steady state is the rest
    m = summarize([s])
    assert m.requests == 2 and m.duration_s == pytest.approx(3.6 - 1.2)


def test_a_ramped_closed_loop_sends_the_next_request_before_a_later_ramp_start():
    # two streams, the second starting at 5 s (a ramp-up of 10 s): the first finishes its
    # 1.2 s request at 1.2 s and sends request 2 then, which runs at once (not after the
    # ramp start of request 1 that comes later)
    s = simulate(np.array([2, 2, 2]), np.array([1, 1, 1]), [*ramp_starts(2, 10.0), 0.0],
                 fake_time, 100, Policy(), concurrency=2)  # fmt: skip
    assert s.arrival_s.tolist() == pytest.approx([0.0, 5.0, 1.2])
    assert s.finish_s.tolist() == pytest.approx([1.2, 6.2, 2.4])
    assert s.warmup == 2  # the two requests the streams start with


def test_ramp_starts_spread_the_streams_evenly():
    assert ramp_starts(4, 2.0).tolist() == [0.0, 0.5, 1.0, 1.5]
    assert ramp_starts(3).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidInput, match="ramp-up"):
        ramp_starts(2, -1.0)


def test_started_together_is_the_share_sent_within_a_window_of_another():
    # two sent 1 ms apart share an iteration of 10 ms; the others are alone
    assert started_together([0.0, 0.001, 0.5, 1.0], 0.01) == 0.5
    assert started_together([1.0, 0.0, 0.001], 0.01) == pytest.approx(2 / 3)  # any order
    assert started_together([0.0, 0.0, 0.0], 0.01) == 1.0  # a closed loop in step
    assert started_together([0.0], 0.01) is None and started_together([0.0, 1.0], 0.0) is None


def test_speculative_decoding_keeps_the_expected_accepted_tokens():
    p = Policy(spec_tokens=3, acceptance=0.5)
    assert p.accepted_per_step == pytest.approx((1 - 0.5**4) / 0.5)  # 1.875
    s = _run([2], [4], spec_tokens=3, acceptance=0.5)
    # prefill (1.2 s, 1 token), then steps of 4 verified tokens keeping 1.875: 2 steps
    assert s.iter_time_s.tolist() == pytest.approx([1.2, 1.4, 1.4])


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(InvalidInput, match="max num seqs"):
        Policy(max_num_seqs=0)
    with pytest.raises(InvalidInput, match="acceptance"):
        Policy(acceptance=1.5)
    with pytest.raises(DoesNotFit, match="KV blocks"):
        _run([100], [100], kv_blocks=2)


def test_max_rate_bisects_to_the_slo_boundary():
    class M:
        def __init__(self, rate):
            from ceiling.model.serve.metrics import Distribution

            self.ttft_s = Distribution(0, 0, 0, rate / 10)  # p99 TTFT grows with the rate
            self.tpot_s = self.e2e_s = Distribution(0, 0, 0, 0)

    rate, _ = max_rate(M, Slo(ttft_p99_s=0.5), capacity_per_s=16.0, steps=20)
    assert rate == pytest.approx(5.0, rel=1e-4)
    assert max_rate(M, Slo(ttft_p99_s=10.0), 16.0)[0] == 16.0
    assert max_rate(M, Slo(ttft_p99_s=-1.0), 16.0)[0] == 0.0


def test_a_decode_the_budget_leaves_out_waits_its_turn():
    # one draft token a step (2 tokens per decode, all kept with acceptance 0: 1 a step) and
    # 2 tokens an iteration: both 1-token prompts in the first iteration (1.2 s); then A's
    # decode takes the budget and B waits (1.2 s each) until A has its 3 tokens at 3.6 s;
    # B then decodes its 2 tokens alone, ending at 6.0 s.
    s = _run([1, 1], [3, 3], max_batched_tokens=2, spec_tokens=1)
    assert s.iter_time_s.tolist() == pytest.approx([1.2] * 5)
    assert s.iter_decodes.tolist() == [0, 1, 1, 1, 1]
    assert s.first_token_s.tolist() == pytest.approx([1.2, 1.2])
    assert s.finish_s.tolist() == pytest.approx([3.6, 6.0])
    # A decodes over its 1 cached token, then 2; B over its 1 once A is gone
    assert [c[:2] for c in CALLS[1:3]] == [(1, 1.0), (1, 2.0)]


@pytest.mark.parametrize(
    ("until", "first", "growth"),
    [(5.0, 1.0, 0.0), (5.5, 1.0, 0.0), (10.0, 1.0, 0.5), (1e-9, 2.0, 0.1), (0.0, 1.0, 0.0),
     (123.4, 0.013, 1e-6), (7.0, 1.0, 1.0)],
)  # fmt: skip
def test_a_decode_run_stops_at_the_step_that_starts_after_the_next_arrival(until, first, growth):
    from ceiling.model.serve.sim_state import steps_starting_before

    starts = [j * first + growth * j * (j - 1) / 2 for j in range(20000)]
    assert steps_starting_before(until, first, growth) == sum(s < until for s in starts)


def test_multi_step_scheduling_admits_only_when_a_block_of_decode_steps_ends():
    # 4 decode steps a scheduler call, prompts in iterations of their own. A (4 tokens in,
    # 10 out) prefills alone (1.4 s) and starts a block of 4 decode steps of 1.1 s; B (2 in,
    # 2 out) arrives at 2.5 s, one step into it, and waits for the block to end at 5.8 s:
    # its prompt runs then (1.2 s, first token at 7.0 s; one step a scheduler call would
    # have taken it at 2.5 s). Both decode a step (1.2 s: B done at 8.2 s), which opens a
    # block whose 3 steps A runs alone (to 11.5 s), then its last one (12.6 s).
    s = _run([4, 2], [10, 2], arrival=[0.0, 2.5], chunked_prefill=False, scheduler_steps=4)
    assert s.first_token_s.tolist() == pytest.approx([1.4, 7.0])
    assert s.finish_s.tolist() == pytest.approx([12.6, 8.2])
    one = _run([4, 2], [10, 2], arrival=[0.0, 2.5], chunked_prefill=False)
    assert one.first_token_s.tolist() == pytest.approx([1.4, 3.7])
    with pytest.raises(InvalidInput, match="scheduler steps"):
        Policy(scheduler_steps=0)
