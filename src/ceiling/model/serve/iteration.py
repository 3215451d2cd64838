"""The time of one serving iteration, from the terms the expected decode step uses.

An engine iteration runs the model once over a mix of tokens: one (or, verifying a
speculation, k + 1) for each decoding sequence, and a chunk of prompt for each sequence
being prefilled. Per device of a tensor-parallel group of t:

  bytes  = weights the iteration's tokens read (all but the experts no token reaches)
           + 4-bit scales + the KV cache each token attends over + the new tokens' K and V
  FLOPs  = 2·(N − head)·T + 2·head·S + attention
           (T tokens, S sequences that sample a token; attention 4·l·a·d per query and key
           pair: a decode over context c has c + 1 pairs, a prompt chunk of n tokens after o
           already cached ones has n·o + n(n+1)/2 causal pairs)
  time   = max(weight bytes / bandwidth', GEMM FLOPs / GEMM rate)     (the multiplies)
           + max(KV bytes / bandwidth', attention FLOPs / attention rate)  (attention)
           + activations between the GEMMs / bandwidth'  (norms, residual, rotary, the FFN's
             activation, a MoE layer's token permutation: `activation_bytes_per_token`)
           + dequantisation + kernels × (the graph gap where the engine replays CUDA graphs,
           else the launch floor) + two all-reduces of T × hidden per layer
  (bandwidth' = bandwidth × the streaming share; the GEMM rate the planner's share of the
  peak × each GEMM's tile utilisation, the attention rate its attention share of the 16-bit
  peak). Engines that replay
  decode from CUDA graphs run mixed and large batches from piecewise graphs (vLLM V1) or a
  host loop that runs ahead of the GPU (TensorRT-LLM's C++ executor), so every iteration
  pays the GPU-side gap, not the host's launch.

`ceiling.model.decode_expected` prices a decode step of B sequences at context c with the
same terms; `Iteration.time` of that batch is its `step_s` (tests hold them equal).
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.model.decode import DecodeSetup, _Step, experts_touched, resolve_dtypes
from ceiling.model.decode_expected import (
    DEQUANT_OPS,
    SKINNY_ROWS,
    EngineCosts,
    activation_bytes_per_token,
    gemm_seconds,
    vector_ops_per_s,
)
from ceiling.model.gemm_rows import rate_at


@dataclass(frozen=True)
class IterationTerms:
    """What one iteration costs, per term (seconds), and the term that binds."""

    weights_s: float  # weight (and scale) bytes at the reachable bandwidth
    gemm_s: float  # GEMM FLOPs at the GEMM rate
    kv_s: float  # KV bytes at the reachable bandwidth
    attention_s: float  # attention FLOPs at the attention rate
    dequant_s: float
    launch_s: float
    comm_s: float
    activation_s: float = 0.0  # activations between the GEMMs at the reachable bandwidth

    @property
    def memory_s(self) -> float:
        return self.weights_s + self.kv_s + self.activation_s

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s

    @property
    def time_s(self) -> float:
        return (
            max(self.weights_s, self.gemm_s)
            + max(self.kv_s, self.attention_s)
            + self.activation_s
            + self.dequant_s
            + self.launch_s
            + self.comm_s
        )

    @property
    def bound(self) -> str:
        """Compute when the FLOPs' roofs hold the multiplies and attention longer than bytes."""
        compute = max(self.gemm_s - self.weights_s, 0) + max(self.attention_s - self.kv_s, 0)
        memory = (max(self.weights_s - self.gemm_s, 0) + max(self.kv_s - self.attention_s, 0)
                  + self.activation_s)  # fmt: skip
        return "compute" if compute > memory else "memory"


class Iteration:
    """Iteration times of one model on one device and layout (a tensor-parallel group)."""

    def __init__(self, cfg, spec, setup: DecodeSetup, costs: EngineCosts):
        self.cfg = cfg
        dtypes = resolve_dtypes(spec, setup)
        self.step = _Step(cfg, spec, setup, dtypes)
        self.costs = costs
        tp = setup.tp
        head = cfg.vocab * cfg.hidden
        self.body_params = (cfg.params_matmul - head) / tp
        self.head_params = head / tp
        # attention FLOPs per query-key pair, per device: a prompt's (MLA: its keys and values
        # expanded from the latent) and a decode's (MLA: absorbed, as decode prices it)
        self.attn, self.attn_decode = attention_per_pair(cfg, tp)
        self.kv_tok = self.step.kv_tok_dev
        self.act_tok = activation_bytes_per_token(cfg, tp, self.step.act_bytes)
        self.bandwidth = costs.memory_bandwidth_bytes_per_s or self.step.bw * costs.bandwidth_share
        self.matmul_rate = self.step.peak * costs.matmul_efficiency
        self.sms = getattr(spec, "sms", None)
        self.tp = tp
        self._gemm: dict[tuple[int, int], float] = {}
        self.attention_rate = (
            costs.attention_peak_flops_per_s or self.step.peak
        ) * costs.attention_efficiency
        self.kernels = cfg.layers * costs.kernels_per_layer + costs.kernels_outside_layers
        self.vector = vector_ops_per_s(costs) if costs.vector_peak_flops_per_s else None
        self.dense = cfg.experts == 1
        self._weights: dict[int, float] = {}
        self._comm: dict[int, float] = {}
        self._fixed: dict[tuple[int, int], tuple[float, ...]] = {}

    def weight_bytes(self, tokens: int) -> float:
        """Weights (and 4-bit scales) read by an iteration over `tokens` tokens."""
        key = tokens if not self.dense else 1
        got = self._weights.get(key)
        if got is None:
            w = self.step.weight_bytes(max(key, 1))
            if self.step.dtypes.weights == "int4":  # the format's scales, beside its weights
                params, narrow = self.step.weights_read(max(key, 1))
                w += (params - narrow) * self.costs.scale_bytes / self.costs.group_size
            self._weights[key] = got = w
        return got

    def dequant_s(self, tokens: int) -> float:
        """Unpacking the weights read (as `decode_expected.expected_rows` does): every weight
        when they are integers, else the experts a model stores in fewer bits."""
        if self.vector is None:
            return 0.0
        params, narrow = self.step.weights_read(max(tokens, 1))
        own = (params - narrow) * DEQUANT_OPS.get(self.step.dtypes.weights, 0.0)
        return (own + narrow * DEQUANT_OPS["int4"]) / self.vector

    def comm_s(self, tokens: int) -> float:
        got = self._comm.get(tokens)
        if got is None:
            self._comm[tokens] = got = self.step.comm_time(tokens)
        return got

    def terms(
        self,
        decode_seqs: int,
        decode_context: float,
        prefill_tokens: int = 0,
        prefill_pairs: float = 0.0,
        prefill_cached: float = 0.0,
        sampled: int | None = None,
        query_per_decode: int = 1,
    ) -> IterationTerms:
        """Terms of an iteration: `decode_seqs` sequences decoding over `decode_context`
        cached tokens in all, `query_per_decode` tokens each (k + 1 when verifying k
        speculated tokens); prompt chunks of `prefill_tokens` tokens in all with
        `prefill_pairs` causal query-key pairs and `prefill_cached` cached tokens read;
        `sampled` sequences that run the output head (default: every decode, no chunk)."""
        q = decode_seqs * query_per_decode
        tokens = q + prefill_tokens
        sampled = decode_seqs if sampled is None else sampled
        # each decode query attends over the cache and the queries before it, itself included
        decode_pairs = query_per_decode * decode_context + decode_seqs * (
            query_per_decode * (query_per_decode + 1) / 2
        )
        kv = (decode_context + prefill_cached + tokens) * self.kv_tok
        # With tiles, a GEMM's time depends on its rows only through ⌈rows / 64⌉ (its waves of
        # whole tiles), and up to SKINNY_ROWS rows not at all (one 16-row MMA pads them all):
        # dense models share one figure per such step of rows.
        key = (_rows_step(tokens), _rows_step(sampled)) if self.sms and self.dense else (
            tokens, sampled)  # fmt: skip
        gemm_s = self._gemm.get(key)
        if gemm_s is None:
            gemm_s = self._gemm_seconds(tokens, sampled)
            self._gemm[key] = gemm_s
        per_kernel = self.costs.kernel_s
        return IterationTerms(
            weights_s=self.weight_bytes(tokens) / self.bandwidth,
            gemm_s=gemm_s,
            kv_s=kv / self.bandwidth,
            attention_s=(self.attn_decode * decode_pairs + self.attn * prefill_pairs)
            / self.attention_rate,
            dequant_s=self.dequant_s(tokens),
            launch_s=self.kernels * per_kernel if tokens else 0.0,
            comm_s=self.comm_s(tokens) if tokens else 0.0,
            activation_s=tokens * self.act_tok / self.bandwidth,
        )

    def _gemm_seconds(self, tokens: int, sampled: int) -> float:
        """The iteration's multiplies: at the GEMM rate and tile utilisation, or on a CPU
        with measured rates by rows, the layers' GEMMs at the rate of `tokens` rows and the
        output head's at that of `sampled` rows (a mixture-of-experts layer's at the
        iteration's tokens too)."""
        knots = self.costs.gemm_rows_rates
        if not knots:
            return gemm_seconds(self.cfg, self.tp, tokens, sampled, self.matmul_rate, self.sms)
        body = gemm_seconds(self.cfg, self.tp, tokens, 0, rate_at(knots, tokens), self.sms)
        head = 2.0 * sampled * self.head_params / rate_at(knots, sampled) if sampled else 0.0
        return body + head

    def time(self, *args, **kwargs) -> float:
        return self.terms(*args, **kwargs).time_s

    def time_and_bound(
        self,
        decode_seqs: int,
        decode_context: float,
        prefill_tokens: int,
        prefill_pairs: float,
        prefill_cached: float,
        sampled: int,
        query_per_decode: int,
    ) -> tuple[float, bool]:
        """`terms(...).time_s` and whether compute binds, in plain floats: the terms that
        depend only on the iteration's tokens and sampled sequences (weights, GEMMs,
        dequantisation, launches, all-reduces) are kept per (tokens, sampled); the cache's
        bytes and attention FLOPs are affine in the context and computed each time."""
        q = query_per_decode
        tokens = decode_seqs * q + prefill_tokens
        key = (tokens, sampled)
        fixed = self._fixed.get(key)
        if fixed is None:
            t = self.terms(0, 0.0, tokens, 0.0, 0.0, sampled)
            act = t.activation_s
            fixed = (max(t.weights_s, t.gemm_s), t.gemm_s - t.weights_s, t.dequant_s + act,
                     t.launch_s, t.comm_s, act)  # fmt: skip
            self._fixed[key] = fixed
        multiplies, gemm_over, dequant, launch, comm, act = fixed
        pairs = q * decode_context + decode_seqs * (q * (q + 1) / 2)
        kv_s = (decode_context + prefill_cached + tokens) * self.kv_tok / self.bandwidth
        attention_s = (self.attn_decode * pairs + self.attn * prefill_pairs) / self.attention_rate
        time_s = multiplies + max(kv_s, attention_s) + dequant + launch + comm
        attn_over = attention_s - kv_s
        compute = max(gemm_over, 0) + max(attn_over, 0)
        memory = max(-gemm_over, 0) + max(-attn_over, 0) + act
        return time_s, compute > memory

    def expected_experts(self, tokens: int) -> float:
        return experts_touched(self.cfg, tokens)


def attention_per_pair(cfg, tp: int) -> tuple[float, float]:
    """(a prompt's FLOPs per query-key pair, a decode's) per device, from the model's
    attention counts: 4·l·a·d a pair for MHA/GQA (the full width: a local layer's window is
    not applied to a batch's summed contexts); MLA prefills over keys and values expanded
    from the latent and decodes absorbed, scoring and summing in the latent's width
    (`transformer_flops.decode_attention_flops`)."""
    prompt = float(cfg.attention_flops_per_token(1) - cfg.attention_flops_per_token(0))
    if cfg.attention != "mla":
        return prompt / tp, prompt / tp
    at = 4096  # MLA has no window: its decode FLOPs are linear in the keys
    f = cfg.decode_attention_flops
    return prompt / tp, float(f(at + 1, absorbed=True) - f(at, absorbed=True)) / tp


def chunk_pairs(cached, chunk):
    """Causal query-key pairs of a prompt chunk of `chunk` tokens after `cached` ones:
    each new token i (1..chunk) attends over cached + i keys."""
    return chunk * cached + chunk * (chunk + 1) / 2.0


def _rows_step(rows: int) -> int:
    """The step of rows a dense GEMM's time is the same over: 0 for a skinny GEMM (up to
    SKINNY_ROWS rows), else its count of 64-row tiles."""
    return 0 if rows <= SKINNY_ROWS else -(-rows // 64)
