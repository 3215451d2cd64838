"""A small GPT in PyTorch, used as a real workload by several commands.

    from ceiling.workloads.gpt import build_gpt
    model = build_gpt("tiny", device="cpu", dtype=torch.float32)   # or "gpt:small", a config
    logits, loss = model(idx, targets)          # idx, targets: (batch, seq) int64 token ids
    cache = model.new_kv_cache(batch, max_len)  # preallocated keys and values, every layer
    logits = model.prefill(prompt, cache)       # (batch, vocab): next-token logits
    logits = model.decode_step(tokens, cache)   # tokens: (batch,) -> (batch, vocab)
    model.transformer_config()                  # the TransformerConfig it was built from

Presets ("tiny", "small") live in the model catalog (`ceiling/model/models.toml`, keys
"gpt:tiny" and "gpt:small") so that analytic commands see the same shapes without torch.
Any dense `TransformerConfig` can be built: GELU or SwiGLU FFN, LayerNorm or RMSNorm,
grouped-query attention, learned positions or rotary embeddings (when the config has no
position table). Mixture-of-experts configs are refused. Weights are random (std 0.02):
workloads measure speed, not quality.

This module imports torch at import time; import it lazily from command code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ceiling.errors import InvalidInput
from ceiling.model.model_catalog import get_model
from ceiling.model.transformer_config import TransformerConfig

PRESETS = ("tiny", "small")
ROPE_BASE = 10000.0


def preset_config(name: str) -> TransformerConfig:
    """The TransformerConfig of a preset: "tiny" or "gpt:tiny" (likewise "small")."""
    key = name.strip().lower()
    key = key if key.startswith("gpt:") else f"gpt:{key}"
    if key[4:] not in PRESETS:
        raise InvalidInput(f"unknown GPT preset {name!r}; presets: {', '.join(PRESETS)}")
    return get_model(key)


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def _norm(cfg: TransformerConfig) -> nn.Module:
    return nn.LayerNorm(cfg.hidden) if cfg.norm == "layernorm" else _RMSNorm(cfg.hidden)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on the last dim, halves paired (GPT-NeoX layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class KVCache:
    """Keys and values of every layer for `batch` sequences up to `max_len` positions."""

    def __init__(self, cfg: TransformerConfig, batch: int, max_len: int, device, dtype) -> None:
        if max_len > cfg.max_seq:
            raise InvalidInput(f"cache length {max_len} > the model's max_seq {cfg.max_seq}")
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.batch = batch
        self.max_len = max_len
        self.length = 0  # positions filled so far

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def reset(self) -> None:
        self.length = 0


class _Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.hidden, cfg.q_dim, bias=cfg.bias)
        self.kv = nn.Linear(cfg.hidden, 2 * cfg.kv_dim, bias=cfg.bias)
        self.out = nn.Linear(cfg.q_dim, cfg.hidden, bias=cfg.bias)

    def forward(self, x, rope, cache: KVCache | None, layer: int, start: int):
        cfg = self.cfg
        b, t, _ = x.shape
        q = self.q(x).view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, cfg.kv_heads, cfg.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            cos, sin = rope
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        gqa = cfg.kv_heads != cfg.heads
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            end = start + t
            cache.keys[layer][:, :, start:end] = k
            cache.values[layer][:, :, start:end] = v
            k_all = cache.keys[layer][:, :, :end]
            v_all = cache.values[layer][:, :, :end]
            # A prompt attends causally to itself; one new token sees every cached position.
            y = F.scaled_dot_product_attention(
                q, k_all, v_all, is_causal=(t > 1 and start == 0), enable_gqa=gqa
            )
        return self.out(y.transpose(1, 2).reshape(b, t, cfg.q_dim))


class _FFN(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.gated = cfg.ffn_kind == "swiglu"
        up = 2 * cfg.ffn_hidden if self.gated else cfg.ffn_hidden
        self.up = nn.Linear(cfg.hidden, up, bias=cfg.bias)
        self.down = nn.Linear(cfg.ffn_hidden, cfg.hidden, bias=cfg.bias)

    def forward(self, x):
        if self.gated:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class _Block(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.norm1, self.attn = _norm(cfg), _Attention(cfg)
        self.norm2, self.ffn = _norm(cfg), _FFN(cfg)

    def forward(self, x, rope, cache, layer, start):
        x = x + self.attn(self.norm1(x), rope, cache, layer, start)
        return x + self.ffn(self.norm2(x))


def _unbuilt_layout(cfg: TransformerConfig) -> list[str]:
    """What a config asks for that this decoder does not build."""
    out = []
    if cfg.attention != "mha":
        out.append(f"{cfg.attention} attention")
    if cfg.sliding_window is not None:
        out.append("local attention (sliding_window)")
    for key in ("qkv_bias", "qk_norm", "attention_sinks"):
        if getattr(cfg, key):
            out.append(key)
    if cfg.norms_per_layer != 2:
        out.append(f"{cfg.norms_per_layer} norms per block")
    return out


class GPT(nn.Module):
    """Decoder-only transformer built from a dense TransformerConfig (pre-norm blocks)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.experts > 1:
            raise InvalidInput("mixture-of-experts models are not built as workloads")
        unbuilt = _unbuilt_layout(cfg)
        if unbuilt:
            raise InvalidInput(
                f"{', '.join(unbuilt)} not built as a workload: the built-in decoder has "
                "full multi-head attention and two norms per block"
            )
        if not cfg.learned_positions and cfg.head_dim % 2:
            raise InvalidInput(f"rotary embeddings need an even head_dim, got {cfg.head_dim}")
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.positions = nn.Embedding(cfg.max_seq, cfg.hidden) if cfg.learned_positions else None
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.layers))
        self.norm = _norm(cfg)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied_embeddings:
            self.head.weight = self.tokens.weight
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def transformer_config(self) -> TransformerConfig:
        return self.cfg

    def _rope(self, start: int, length: int, like: torch.Tensor):
        if self.positions is not None:
            return None
        d = self.cfg.head_dim
        inv = 1.0 / ROPE_BASE ** (torch.arange(0, d, 2, device=like.device).float() / d)
        pos = torch.arange(start, start + length, device=like.device).float()
        angles = torch.outer(pos, inv)
        return angles.cos().to(like.dtype), angles.sin().to(like.dtype)

    def _run(self, idx: torch.Tensor, cache: KVCache | None, start: int) -> torch.Tensor:
        t = idx.shape[1]
        if start + t > self.cfg.max_seq:
            raise InvalidInput(
                f"sequence of {start + t} positions > the model's max_seq {self.cfg.max_seq}"
            )
        x = self.tokens(idx)
        if self.positions is not None:
            x = x + self.positions(torch.arange(start, start + t, device=idx.device))
        rope = self._rope(start, t, x)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, cache, i, start)
        return self.norm(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (batch, seq, vocab) and, given targets, the mean cross-entropy loss."""
        x = self._run(idx, None, 0)
        logits = self.head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return logits, loss

    def new_kv_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        p = self.head.weight
        return KVCache(self.cfg, batch, max_len or self.cfg.max_seq, p.device, p.dtype)

    @torch.no_grad()
    def prefill(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run a prompt (batch, t) into an empty cache; next-token logits (batch, vocab)."""
        if idx.shape[0] != cache.batch:
            raise InvalidInput(f"prompt batch {idx.shape[0]} != cache batch {cache.batch}")
        if idx.shape[1] > cache.max_len:
            raise InvalidInput(f"prompt of {idx.shape[1]} tokens > cache of {cache.max_len}")
        cache.reset()
        x = self._run(idx, cache, 0)
        cache.length = idx.shape[1]
        return self.head(x[:, -1])

    @torch.no_grad()
    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One token per sequence (batch,) at the next position; logits (batch, vocab)."""
        if cache.length >= cache.max_len:
            raise InvalidInput(f"KV cache full ({cache.max_len} positions)")
        x = self._run(tokens.view(-1, 1), cache, cache.length)
        cache.length += 1
        return self.head(x[:, -1])

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy decoding: the prompt followed by `new_tokens` argmax tokens."""
        cache = self.new_kv_cache(prompt.shape[0], prompt.shape[1] + new_tokens)
        logits = self.prefill(prompt, cache)
        out = [prompt]
        for _ in range(new_tokens):
            nxt = logits.argmax(dim=-1)
            out.append(nxt.view(-1, 1))
            logits = self.decode_step(nxt, cache)
        return torch.cat(out, dim=1)


def build_gpt(
    name_or_config: str | TransformerConfig = "tiny",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> GPT:
    """A GPT with random weights on `device` in `dtype`.

    `name_or_config`: a preset ("tiny", "small", "gpt:tiny", ...), any catalog model name,
    or a TransformerConfig.
    """
    if isinstance(name_or_config, TransformerConfig):
        cfg = name_or_config
    else:
        key = name_or_config.strip().lower()
        cfg = preset_config(key) if key in PRESETS or key.startswith("gpt:") else get_model(key)
    torch.manual_seed(seed)
    model = GPT(cfg)
    return model.to(device=device, dtype=dtype)


def param_count(model: nn.Module) -> int:
    """Parameters of a module, a tied table counted once (as TransformerConfig does)."""
    return sum(p.numel() for p in model.parameters())


def train_step_flops(cfg: TransformerConfig, batch: int, seq_len: int) -> float:
    """Model FLOPs of one training step (forward + backward), a multiply-add counted as 2."""
    return cfg.flops_per_token(seq_len, training=True) * batch * seq_len
