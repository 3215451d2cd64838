"""A transformer's FLOPs: per token of training or inference, and the attention of one decode
step or one prefill. A multiply-add counts as 2.

Mixed into `TransformerConfig` (`ceiling.model.transformer_config`): reads its shape, its
layer kinds (`attended`, `causal_attended`) and its weights (`params_matmul`). Notation: l
layers, a heads, d head dim, s sequence length, N the weights in matrix multiplies.
"""

from __future__ import annotations

import numpy as np

from ceiling.errors import InvalidInput
from ceiling.model.attention import attention_flops, mla_decode_flops


class TransformerFlops:
    """FLOPs of a `TransformerConfig`: the weights' 2·N and attention over the keys seen."""

    @property
    def attention_widths(self) -> tuple[int, int]:
        """(score width, value width) of all heads: a·d and a·d (MHA/GQA); MLA scores over
        a·(d_nope + d_rope) and sums values of a·d_v."""
        if self.attention == "mla":
            qk = self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            return qk, self.heads * self.v_head_dim
        return self.q_dim, self.q_dim

    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of the scores Q·Kᵀ and the weighted sum over V, all layers.

        4·l·a·d·s, counted over the full s as PaLM does (ceiling.model.attention); a local
        layer counts at most its window of keys; MLA scores over d_nope + d_rope and sums
        values of d_v per head (its non-absorbed form, the one training runs).
        """
        width, value = self.attention_widths
        return attention_flops(1, self.attended(seq_len), width, value_width=value)

    def flops_per_token(self, seq_len: int | None = None, training: bool = False) -> float:
        """Model FLOPs per token, a multiply-add counted as 2.

        Forward: 2·N + 4·l·a·d·s, N the weights in matrix multiplies (`params_matmul`).
        Training: forward + backward (2× forward) = 6·N + 12·l·a·d·s (PaLM, Appendix B).
        Recomputation is not counted (that is hardware FLOPs, not model FLOPs).
        `seq_len` defaults to `max_seq`.
        """
        s = self.max_seq if seq_len is None else seq_len
        if s < 0:
            raise InvalidInput(f"sequence length must be ≥ 0, got {s}")
        forward = 2.0 * self.params_matmul + self.attention_flops_per_token(s)
        return 3.0 * forward if training else forward

    def decode_attention_flops(self, context, absorbed: bool = False):
        """Forward attention FLOPs of one new token over `context` cached tokens and itself,
        all blocks (a local block sees at most its window). MLA: `absorbed` or not
        (`ceiling.model.attention.mla_decode_flops`); other attention ignores it."""
        keys = self.attended(np.asarray(context) + 1)
        if self.attention != "mla":
            width, value = self.attention_widths
            return attention_flops(1, keys, width, value_width=value)
        cached = self.attended(context)
        return mla_decode_flops(
            self.heads,
            self.kv_lora_rank,
            self.qk_nope_head_dim,
            self.qk_rope_head_dim,
            self.v_head_dim,
            keys,
            absorbed,
            cached,
        )

    def prefill_attention_flops(self, prompt: int, absorbed: bool = False) -> float:
        """Forward attention FLOPs of a causal pass over `prompt` tokens, all blocks
        (`causal_attended` query-key pairs). MLA: each token's own up-projection is among
        its weights, so non-absorbed costs only the attention per pair."""
        pairs = self.causal_attended(prompt)
        if self.attention != "mla":
            width, value = self.attention_widths
            return attention_flops(1, pairs, width, value_width=value)
        dims = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        return float(mla_decode_flops(self.heads, *dims, pairs, absorbed, cached=0))

    def decode_flops_per_token(self, context, absorbed: bool = False):
        """Forward FLOPs of one decode step's token: 2·N + attention over the cache."""
        return 2.0 * self.params_matmul + self.decode_attention_flops(context, absorbed)
