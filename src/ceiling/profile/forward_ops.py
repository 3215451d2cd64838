"""The aten ops one eager decode step of a Hugging Face model dispatches, per layer and
outside the layers, views apart: what an eager server on a CPU pays the host's time an op for.

A fused engine launches about ten kernels a layer; an eager `transformers` forward
dispatches every op its Python calls, views included (a Llama layer: about 78, 30 of them
views), and on a CPU each pays the host's time an op beside its work. The count does not
depend on the model's widths, so it is taken on a copy of the model with its widths shrunk
to a few features and its vocabulary to a few words (same family, heads, experts and
options), built with 1 and with 2 layers: the second layer's ops are one layer's, the rest
are outside the layers. The step counted is one new token after a two-token prompt, with
the model's own cache (its writes are in the count). Models whose layers differ (sliding
and full attention, dense and expert layers) are counted by their first two.
Returns None when transformers is missing or the family cannot be built from its config.
Counts are kept in the user's cache folder by config and by torch's and transformers'
versions (`memo_path`): importing transformers costs seconds, the count a few milliseconds.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import astuple, dataclass
from pathlib import Path

WIDTH_PER_HEAD = 8  # features an attention head keeps in the shrunk copy
SMALL = 16  # the shrunk copy's FFN and expert widths, and its rank-like sizes
VOCAB = 64


@dataclass(frozen=True)
class ForwardOps:
    """Aten ops of one eager decode step: per layer and outside the layers, and of each the
    views (which launch nothing and cost their dispatch only)."""

    per_layer: int
    per_layer_views: int
    outside: int
    outside_views: int
    family: str

    def op_equivalents(self, view_share: float) -> tuple[float, float]:
        """(per layer, outside): the ops, a view counted as `view_share` of an op (the
        host's time a view over its time an op)."""
        layer = self.per_layer - self.per_layer_views + view_share * self.per_layer_views
        out = self.outside - self.outside_views + view_share * self.outside_views
        return layer, out


def _shrunk(config, layers: int):
    """The config with its widths shrunk and `layers` layers (see the module docstring)."""
    c = copy.deepcopy(config)
    heads = int(getattr(c, "num_attention_heads", 0) or 1)
    hidden = heads * WIDTH_PER_HEAD
    sizes = {
        "hidden_size": hidden,
        "head_dim": WIDTH_PER_HEAD,
        "intermediate_size": SMALL,
        "moe_intermediate_size": SMALL,
        "shared_expert_intermediate_size": SMALL,
        "vocab_size": VOCAB,
        "kv_lora_rank": SMALL,
        "q_lora_rank": SMALL,
        "qk_rope_head_dim": WIDTH_PER_HEAD,
        "qk_nope_head_dim": WIDTH_PER_HEAD,
        "v_head_dim": WIDTH_PER_HEAD,
    }
    for name, value in sizes.items():
        if getattr(c, name, None) is not None:
            setattr(c, name, value)
    c.num_hidden_layers = layers
    for name in ("layer_types", "mlp_only_layers"):
        value = getattr(c, name, None)
        if isinstance(value, list):
            setattr(c, name, value[:layers])
    if getattr(c, "first_k_dense_replace", None):
        c.first_k_dense_replace = 0
    c.tie_word_embeddings = getattr(c, "tie_word_embeddings", False)
    return c


def _count(model) -> tuple[int, int]:
    """(ops, views) of one decode step of `model` after a two-token prompt."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = views = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            self.views += bool(func.is_view)
            return func(*args, **(kwargs or {}))

    import inspect

    # the cache's keyword: `cache` in newer transformers, `past_key_values` before
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(torch.ones(1, 2, dtype=torch.long), use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        with Count() as counted:
            model(torch.ones(1, 1, dtype=torch.long), use_cache=True, **{key: cache})
    return counted.ops, counted.views


def count_decode_ops(config: dict) -> ForwardOps | None:
    """The ops of one eager decode step of the model a `config.json` describes (None when it
    cannot be built here), from the cache folder when counted before with these versions."""
    key = _key(config)
    memo = _read_memo()
    if key in memo:
        got = memo[key]
        return None if got is None else ForwardOps(*got)
    ops = _counted(config)
    if key is not None:
        _write_memo({**_read_memo(), key: None if ops is None else list(astuple(ops))})
    return ops


def memo_path() -> Path | None:
    """The file counts are kept in (None where there is no home folder)."""
    from ceiling.records import cache_folder

    try:
        return cache_folder() / "forward-ops.json"
    except (OSError, RuntimeError):
        return None


def _key(config: dict) -> str | None:
    """The config and the versions of torch, transformers and this module, hashed."""
    from importlib import metadata

    try:
        versions = [metadata.version(p) for p in ("torch", "transformers")]
        text = json.dumps(config, sort_keys=True, default=str)
    except (metadata.PackageNotFoundError, TypeError, ValueError):
        return None
    digest = hashlib.sha256(text.encode())
    digest.update(" ".join(versions).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:32]


def _read_memo() -> dict:
    path = memo_path()
    try:
        stored = json.loads(path.read_text()) if path else {}
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def _write_memo(memo: dict) -> None:
    """The counts replaced whole; a cache folder that cannot be written only means the next
    call counts again."""
    from ceiling.records import replace_whole

    path = memo_path()
    if path is None:
        return
    try:
        replace_whole(json.dumps(memo).encode(), path)
    except OSError:
        return


def _counted(config: dict) -> ForwardOps | None:
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        return None
    family = str(config.get("model_type", ""))
    try:
        base = AutoConfig.for_model(family, **{k: v for k, v in config.items()
                                               if k != "model_type"})  # fmt: skip
        counts = []
        for layers in (1, 2):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(_shrunk(base, layers)).eval()
            counts.append(_count(model))
    except Exception:  # a family this transformers cannot build or run: no count
        return None
    (one, one_views), (two, two_views) = counts
    per_layer, per_layer_views = two - one, two_views - one_views
    if per_layer <= 0:
        return None
    return ForwardOps(per_layer, per_layer_views, one - per_layer, one_views - per_layer_views,
                      family)  # fmt: skip
