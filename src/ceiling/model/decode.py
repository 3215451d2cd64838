"""Decode and prefill ceilings of a transformer on a device: the roofline per generated token.

One decode step makes one token for each of `batch` sequences. It must
  read every weight once (shared by the batch),
  read each sequence's KV cache of `context` tokens and write the new token's K and V,
  do 2·N FLOPs per token for the matrix multiplies (N = `params_matmul`, a multiply-add
  counts 2) plus 4·l·a·d·(context + 1) for attention over the cache and itself.
Its time is at least max(bytes / bandwidth, FLOPs / peak); tensor parallelism over t devices
divides both and adds two all-reduces of batch × hidden activations per layer.

Conventions, stated where results are shown:
- Weight bytes count every parameter once per step, the input table included, as published
  decode ceilings do (Llama-2-7B bf16 on an A100-80GB: 2.039 TB/s / 13.5 GB ≈ 151 tokens/s).
  `weights_counted="read"` counts only what a step reads (an untied input table and a
  position table give just the batch's rows): the measured comparison uses it, so that the
  ceiling it checks against is a true upper bound.
  Mixture-of-experts models read only the experts their batch routes to: in expectation
  E·(1 − (1 − k/E)^batch) of E experts per layer with top-k routing.
- The KV cache counts KV heads only (grouped-query attention is not counted as full heads);
  a local layer (sliding window, chunk) holds and reads at most its window of tokens;
  multi-head latent attention caches its latent and rotary key (r_kv + d_rope per layer),
  whole on every tensor-parallel device (each needs all of it for its heads).
- Multi-head latent attention is priced both ways per step: non-absorbed (each cached
  latent projected up to keys and values again) and absorbed (the up-projections folded
  into the query and the output); the faster is used and named (`mla_attention`).
- Routed experts published in a narrower format than the weights dtype (gpt-oss: MXFP4,
  4.25 bits) are read and stored in it.
- Peaks are dense. Integer weights (int8, int4) are dequantised and multiplied at the
  activation dtype's peak; fp8 weights use the fp8 peak where the device has one.
- `crossover_batch`: the smallest batch at which the step becomes compute-bound counting
  weights only (the ridge point in tokens: peak × bytes per parameter / (2 × bandwidth));
  `crossover_batch_with_kv` also counts the KV cache at the given context and may not exist,
  because attention over a long cache has an intensity of only 2·(a/k)/kv_bytes FLOP/byte.
- Memory: weights plus the KV cache of context + 1 tokens per sequence; no allowance for
  activations, fragmentation or the runtime, so the largest batch is an upper bound.
"""

from __future__ import annotations

from ceiling.errors import DoesNotFit, InvalidInput, argument
from ceiling.model.cluster import group_link
from ceiling.model.collectives import allreduce_s
from ceiling.model.decode_results import DecodeCeiling, DecodeRow
from ceiling.model.decode_setup import DecodeSetup, Dtypes, default_context, resolve_dtypes
from ceiling.model.roofline import predicted_time_s
from ceiling.model.transformer_config import TransformerConfig
from ceiling.units import format_flops
from ceiling.vocabulary import dtype_bytes

# What callers take from here: the ceiling, the step's arithmetic, and the setup's names
# (`decode_setup`) that pricing code passes along with them.
__all__ = [
    "DecodeCeiling",
    "DecodeRow",
    "DecodeSetup",
    "decode_ceiling",
    "default_context",
    "experts_touched",
    "kv_heads_per_device",
    "max_batch",
    "resolve_dtypes",
    "roof_curves",
    "ttft_s",
    "weights_read_params",
]

CROSSOVER_SEARCH_LIMIT = 1 << 26


def kv_heads_per_device(cfg: TransformerConfig, tp: int) -> int:
    """KV heads each tensor-parallel device stores: k/t, or 1 (replicated) when t > k."""
    if cfg.heads % tp:
        raise InvalidInput(
            f"tensor-parallel degree {tp} must divide the {cfg.heads} attention heads: "
            f"{cfg.heads} % {tp} = {cfg.heads % tp}"
        )
    if cfg.kv_heads % tp == 0:
        return cfg.kv_heads // tp
    if tp % cfg.kv_heads == 0:
        return 1
    raise InvalidInput(
        f"tensor-parallel degree {tp} and the {cfg.kv_heads} KV heads must divide one "
        f"another: {cfg.kv_heads} % {tp} = {cfg.kv_heads % tp}"
    )


def experts_touched(cfg: TransformerConfig, tokens: int) -> float:
    """Expected experts per layer that `tokens` routed tokens reach (uniform top-k routing)."""
    if cfg.experts == 1:
        return 1.0
    miss = (1.0 - cfg.active_experts / cfg.experts) ** tokens
    return cfg.experts * (1.0 - miss)


def weights_read_params(cfg: TransformerConfig, tokens: int, counted: str = "all") -> float:
    """Parameters read in one step that processes `tokens` tokens (all but unused experts).

    counted="read" also leaves out the rows of lookup tables no token uses: an untied input
    table and a learned position table contribute only `tokens` rows each.
    """
    unused = cfg.experts - experts_touched(cfg, tokens)
    params = cfg.params_total - cfg.moe_layers * unused * cfg.params_expert
    if counted == "read":
        table = cfg.vocab * cfg.hidden
        rows = min(tokens, cfg.vocab) * cfg.hidden
        if not cfg.tied_embeddings:  # the tied table is read whole as the output head
            params -= table - rows
        if cfg.learned_positions:
            params -= cfg.max_seq * cfg.hidden - min(tokens, cfg.max_seq) * cfg.hidden
    return params


def _check_context(cfg: TransformerConfig, context: int) -> None:
    if context >= cfg.max_seq:
        raise InvalidInput(
            f"context of {context} tokens leaves no room for the next one: "
            f"{cfg.name or 'the model'} holds at most {cfg.max_seq} positions "
            f"(context ≤ {cfg.max_seq - 1})"
        )


def _prompt(cfg: TransformerConfig, setup: DecodeSetup) -> int:
    prompt = setup.prompt_tokens if setup.prompt_tokens is not None else max(setup.context, 1)
    if prompt > cfg.max_seq:
        raise InvalidInput(
            f"prompt of {prompt} tokens > {cfg.name or 'the model'}'s {cfg.max_seq} positions"
        )
    return prompt


class _Step:
    """Per-device arithmetic of one model on one device, shared by rows and searches."""

    def __init__(self, cfg: TransformerConfig, spec, setup: DecodeSetup, dtypes: Dtypes):
        self.cfg, self.setup, self.dtypes = cfg, setup, dtypes
        self.tp = setup.tp
        self.kv_dev_heads = kv_heads_per_device(cfg, setup.tp)
        self.w_bytes = dtype_bytes(dtypes.weights)
        bits = cfg.expert_weight_bits
        self.expert_bytes = self.w_bytes if bits is None else min(self.w_bytes, bits / 8)
        self.kv_bytes = dtype_bytes(dtypes.kv)
        # MLA's latent serves every head: each tensor-parallel device holds all of it
        self.kv_share = 1.0 if cfg.attention == "mla" else self.kv_dev_heads / cfg.kv_heads
        kv_tok = cfg.kv_bytes_per_token(self.kv_bytes)
        self.kv_tok_dev = kv_tok * self.kv_share
        self.act_bytes = dtype_bytes(dtypes.activations)
        self.peak = spec.peak(dtypes.compute)
        self.bw = spec.memory_bandwidth_bytes_per_s
        self.link = spec.link_bandwidth_bytes_per_s
        # The planner's link figures (bandwidth × collective efficiency, per-step latency).
        self.tp_link = group_link(spec, setup.tp, dtypes.compute) if setup.tp > 1 else None
        mem = getattr(spec, "memory_bytes", None)
        self.mem = float(mem) if mem else None

    @property
    def resident_weight_bytes(self) -> float:
        """Every weight, stored on the device whether a step reads it or not."""
        return self.cfg.weight_bytes(self.w_bytes) / self.tp

    def weights_read(self, tokens: int) -> tuple[float, float]:
        """(weights a step over `tokens` tokens reads, of them those stored narrower than the
        weights' dtype: routed experts the model publishes in fewer bits), per device."""
        cfg = self.cfg
        params = weights_read_params(cfg, tokens, self.setup.weights_counted)
        narrow = 0.0
        # experts the model publishes in as few bits as the weights' dtype, or fewer, keep
        # their own format (gpt-oss's MXFP4 experts stay MXFP4 under int4)
        if (
            cfg.expert_weight_bits is not None
            and self.expert_bytes <= self.w_bytes
            and cfg.moe_layers
        ):
            touched = experts_touched(cfg, tokens)
            matrix = cfg.ffn_mats * cfg.hidden * cfg.expert_ffn_hidden
            narrow = cfg.moe_layers * touched * matrix
        return params / self.tp, narrow / self.tp

    def weight_bytes(self, tokens: int) -> float:
        params, narrow = self.weights_read(tokens)
        return (params - narrow) * self.w_bytes + narrow * self.expert_bytes

    def kv_sequence_bytes(self, tokens: int) -> float:
        """One sequence's cache of `tokens` tokens on one device (local layers: the window)."""
        return self.cfg.kv_bytes(tokens, self.kv_bytes) * self.kv_share

    def attention_form(self, context: int) -> bool:
        """Whether MLA's absorbed form is the faster at this context (False otherwise)."""
        if self.cfg.attention != "mla":
            return False
        flops = self.cfg.decode_attention_flops
        return bool(flops(context, absorbed=True) <= flops(context, absorbed=False))

    def flops_per_token(self, context: int) -> float:
        """FLOPs of one token attending to `context` cached tokens and itself, per device."""
        absorbed = self.attention_form(context)
        return float(self.cfg.decode_flops_per_token(context, absorbed)) / self.tp

    def comm_time(self, tokens: int) -> float:
        """Two all-reduces of tokens × hidden activations per layer (Megatron TP), priced
        as the planner prices them."""
        if self.tp_link is None:
            return 0.0
        size = tokens * self.cfg.hidden * self.act_bytes
        return 2 * self.cfg.layers * float(allreduce_s(size, self.tp, *self.tp_link))

    def times(self, batch: int, context: int, with_kv: bool = True) -> tuple[float, float]:
        """(memory time, compute time) of one decode step."""
        if with_kv:
            kv = batch * (self.kv_sequence_bytes(context) + self.kv_tok_dev)
            flops = batch * self.flops_per_token(context)
        else:
            kv, flops = 0.0, batch * 2.0 * self.cfg.params_matmul / self.tp
        return (self.weight_bytes(batch) + kv) / self.bw, flops / self.peak

    def memory_needed(self, batch: int, context: int) -> float:
        return self.resident_weight_bytes + batch * self.kv_sequence_bytes(context + 1)

    def row(self, batch: int, context: int, prompt: int) -> DecodeRow:
        w = self.weight_bytes(batch)
        params, narrow = self.weights_read(batch)
        kv_read = batch * self.kv_sequence_bytes(context)
        kv_write = batch * self.kv_tok_dev
        total = w + kv_read + kv_write
        flops = batch * self.flops_per_token(context)
        mem_t, comp_t = total / self.bw, flops / self.peak
        comm = self.comm_time(batch)
        step = max(mem_t, comp_t) + comm
        need = self.memory_needed(batch, context)
        return DecodeRow(
            batch=batch,
            weight_bytes=w,
            kv_read_bytes=kv_read,
            kv_write_bytes=kv_write,
            bytes_per_step=total,
            flops_per_step=flops,
            memory_time_s=mem_t,
            compute_time_s=comp_t,
            comm_time_s=comm,
            step_time_s=step,
            bound="memory" if mem_t >= comp_t else "compute",
            tokens_per_s_per_sequence=1.0 / step,
            tokens_per_s=batch / step,
            intensity_flop_per_byte=flops / total,
            memory_needed_bytes=need,
            weights_read=params,
            narrow_weights_read=narrow,
            fits=self.mem is None or need <= self.mem,
            ttft_s=self.prefill_time(batch, prompt),
            attention_flops=batch * self.decode_attention_flops(context),
        )

    def decode_attention_flops(self, context: int) -> float:
        """Attention FLOPs of one decode token over `context` cached tokens and itself, per
        device, in the form the step runs (MLA: absorbed where that is the faster)."""
        absorbed = self.attention_form(context)
        return float(self.cfg.decode_attention_flops(context, absorbed)) / self.tp

    def attention_flops(self, attended: int) -> float:
        """Attention FLOPs of one token over `attended` keys, per device: 4·l·a·d·attended."""
        return self.cfg.attention_flops_per_token(attended) / self.tp

    def prefill_time(self, batch: int, prompt: int) -> float:
        """Time to first token: the prompt in one pass, then logits of its last position.

        Blocks run on every prompt token; the output head only on the last. Causal attention
        over a prompt of P tokens costs Σ_{i=1..P} 4·l·a·d·i = 2·l·a·d·P·(P+1) (a local
        layer: at most its window of keys per query); MLA the cheaper of its two forms,
        non-absorbed for a prompt.
        """
        cfg = self.cfg
        head = cfg.vocab * cfg.hidden
        per_seq = 2.0 * (cfg.params_matmul - head) * prompt + 2.0 * head
        per_seq += min(
            cfg.prefill_attention_flops(prompt, absorbed=False),
            cfg.prefill_attention_flops(prompt, absorbed=True),
        )
        flops = batch * per_seq / self.tp
        moved = self.weight_bytes(batch * prompt) + batch * self.kv_sequence_bytes(prompt)
        return predicted_time_s(flops, moved, self.peak, self.bw) + self.comm_time(batch * prompt)


def _first_compute_bound(step: _Step, context: int, with_kv: bool) -> int | None:
    """Smallest batch whose compute time reaches its memory time, or None if none does."""

    def compute_bound(b: int) -> bool:
        mem_t, comp_t = step.times(b, context, with_kv)
        return comp_t >= mem_t

    hi = 1
    while not compute_bound(hi):
        hi *= 2
        if hi > CROSSOVER_SEARCH_LIMIT:
            return None
    lo = hi // 2  # not compute-bound (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid
    return hi


def max_batch(step: _Step, context: int) -> int | None:
    """Largest batch whose weights and KV cache fit in device memory; None if unknown."""
    if step.mem is None:
        return None
    room = step.mem - step.resident_weight_bytes
    if room < 0:
        return 0
    return int(room // step.kv_sequence_bytes(context + 1))


def _check_weights_fit(cfg, step: _Step, spec) -> None:
    if step.mem is None:
        return
    w = step.resident_weight_bytes
    if w > step.mem:
        gb = 1e9
        raise DoesNotFit(
            f"{cfg.name or 'the model'}'s {step.dtypes.weights} weights need "
            f"{w / gb:.1f} GB per device (tp={step.tp}), {spec.name} has "
            f"{step.mem / gb:.1f} GB: raise {argument('tp')} or use {argument('weights')} "
            "int8/int4"
        )


def decode_ceiling(
    cfg: TransformerConfig,
    spec,
    batches: list[int],
    setup: DecodeSetup | None = None,
    drop_unfit: bool = False,
    flag_unfit: bool = False,
) -> DecodeCeiling:
    """Decode ceilings at each batch size. A batch that does not fit raises DoesNotFit; it is
    left out with a note when `drop_unfit`, or kept with `fits` False and a note when
    `flag_unfit` (a sweep of batches rather than one request). No batch fitting raises."""
    setup = setup or DecodeSetup()
    _check_batches(batches)
    _check_context(cfg, setup.context)
    prompt = _prompt(cfg, setup)
    dtypes = resolve_dtypes(spec, setup)
    step = _Step(cfg, spec, setup, dtypes)
    _check_weights_fit(cfg, step, spec)
    biggest = max_batch(step, setup.context)
    rows, unfit = _rows(step, spec, batches, prompt, biggest, drop_unfit, flag_unfit)
    notes = [*dtypes.notes, *unfit, *_setup_notes(cfg, step, spec)]
    notes.extend(_attention_notes(cfg, step, setup.context))
    kv_tok = cfg.kv_bytes_per_token(dtype_bytes(dtypes.kv))
    return DecodeCeiling(
        model=cfg.name,
        device=spec.name,
        dtypes=dtypes,
        context=setup.context,
        prompt_tokens=prompt,
        tp=setup.tp,
        peak_flops_per_s=step.peak,
        bandwidth_bytes_per_s=step.bw,
        link_bandwidth_bytes_per_s=step.link,
        memory_bytes=step.mem,
        params_total=cfg.params_total,
        params_active=cfg.params_active,
        weight_bytes_total=cfg.params_total * step.w_bytes,
        kv_bytes_per_token=kv_tok,
        kv_bytes_per_token_per_device=step.kv_tok_dev,
        kv_bytes_per_sequence=float(cfg.kv_bytes(setup.context + 1, step.kv_bytes)),
        ridge_flop_per_byte=step.peak / step.bw,
        crossover_batch=_first_compute_bound(step, setup.context, with_kv=False),
        crossover_batch_with_kv=_first_compute_bound(step, setup.context, with_kv=True),
        max_batch=biggest,
        rows=rows,
        notes=notes,
        mla_attention=_mla_form(step, setup.context),
    )


def _check_batches(batches: list[int]) -> None:
    if not batches:
        raise InvalidInput("give at least one batch size")
    for b in batches:
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise InvalidInput(f"batch sizes must be whole numbers ≥ 1, got {b!r}")


def _rows(
    step: _Step,
    spec,
    batches: list[int],
    prompt: int,
    biggest: int | None,
    drop_unfit: bool,
    flag_unfit: bool,
) -> tuple[list[DecodeRow], list[str]]:
    """(a row per batch, in order, and the notes on those that do not fit): see
    `decode_ceiling` for what becomes of them."""
    context = step.setup.context
    rows, notes = [], []
    for b in sorted(set(batches)):
        r = step.row(b, context, prompt)
        if not r.fits:
            need = (
                f"batch {b} needs {r.memory_needed_bytes / 1e9:.1f} GB per device at context "
                f"{context} ({spec.name} has {step.mem / 1e9:.1f} GB); the largest "
                f"batch that fits is {biggest}"
            )
            if flag_unfit:
                notes.append(f"does not fit: {need}")
                rows.append(r)
                continue
            if drop_unfit:
                notes.append(f"batch {b} left out: it does not fit (largest batch {biggest})")
                continue
            raise DoesNotFit(need)
        rows.append(r)
    if not any(r.fits for r in rows):
        raise DoesNotFit(f"no batch fits at context {context}; the largest that fits is {biggest}")
    return rows, notes


def _setup_notes(cfg: TransformerConfig, step: _Step, spec) -> list[str]:
    """What tensor parallelism, experts and narrow expert weights add to the step."""
    notes = []
    if step.tp > 1:
        bw, lat = step.tp_link
        notes.append(
            f"tensor parallelism: 2 all-reduces per layer ({2 * cfg.layers} per step) at "
            f"{bw / 1e9:.0f} GB/s achieved and {lat * 1e6:.1f} µs of latency per hop of each "
            "all-reduce's ring or tree, as `plan` prices them (the link × collective "
            "efficiency of clusters.toml)"
            + ("" if step.link else f"; {spec.name} lists no link: the generic default")
        )
    if cfg.experts > 1:
        notes.append(
            f"mixture of experts: weights read per step count the expected experts reached "
            f"by the batch's tokens ({cfg.active_experts} of {cfg.experts} per token"
            + (f", {cfg.moe_layers} of {cfg.layers} layers" if cfg.dense_ffn_layers else "")
            + (f", plus {cfg.shared_experts} shared" if cfg.shared_experts else "")
            + ")"
        )
    if step.expert_bytes < step.w_bytes:
        notes.append(
            f"routed experts' matrices stored and read at {cfg.expert_weight_bits:g} bits per "
            f"weight as published, the rest at {step.dtypes.weights}"
        )
    return notes


def _mla_form(step: _Step, context: int) -> str | None:
    if step.cfg.attention != "mla":
        return None
    return "absorbed" if step.attention_form(context) else "non-absorbed"


def _attention_notes(cfg: TransformerConfig, step: _Step, context: int) -> list[str]:
    """What the attention of this model changes in the step: local layers, MLA's cache and
    its two forms with their FLOPs."""
    notes = []
    if cfg.local_layers:
        kind = "a chunk" if cfg.chunked_attention else "a sliding window"
        notes.append(
            f"local attention: {cfg.local_layers} of {cfg.layers} layers attend within "
            f"{kind} of {cfg.sliding_window:,} tokens and cache at most that many"
        )
    if cfg.attention == "mla":
        flops = {f: float(cfg.decode_attention_flops(context, f)) for f in (True, False)}
        chosen = step.attention_form(context)
        name = {True: "absorbed", False: "non-absorbed"}
        notes.append(
            f"multi-head latent attention: the cache holds the latent and rotary key "
            f"({cfg.kv_elements_per_layer} elements per layer and token), whole on every "
            f"tensor-parallel device; attention over the cache priced both ways per token at "
            f"context {context:,}: absorbed {format_flops(flops[True])}, non-absorbed "
            f"{format_flops(flops[False])}: {name[chosen]} used (the faster)"
        )
    return notes


def roof_curves(
    cfg: TransformerConfig, spec, setup: DecodeSetup, batches: list[int]
) -> dict[str, list[float]]:
    """Tokens/s of the memory roof, the compute roof and their minimum at each batch."""
    dtypes = resolve_dtypes(spec, setup)
    step = _Step(cfg, spec, setup, dtypes)
    memory, compute, ceiling = [], [], []
    for b in batches:
        mem_t, comp_t = step.times(b, setup.context)
        comm = step.comm_time(b)
        memory.append(b / (mem_t + comm))
        compute.append(b / (comp_t + comm))
        ceiling.append(b / (max(mem_t, comp_t) + comm))
    return {"batch": list(batches), "memory": memory, "compute": compute, "ceiling": ceiling}


def ttft_s(cfg: TransformerConfig, spec, setup: DecodeSetup, batch: int = 1) -> float:
    """Time to first token for `batch` prompts of `setup.prompt_tokens` (or context) tokens."""
    prompt = _prompt(cfg, setup)
    step = _Step(cfg, spec, setup, resolve_dtypes(spec, setup))
    return step.prefill_time(batch, prompt)
