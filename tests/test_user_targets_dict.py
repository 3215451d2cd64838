"""User targets in Hugging Face style: dict batches, sizes passed through or refused, and
failures (a lazy import, a model counted on meta) told in one line."""

import json
import textwrap

import pytest

DICT_TARGET = '''
import torch
from torch import nn


class Classifier(nn.Module):
    """Called as model(input_ids=..., attention_mask=..., labels=...), returns a dict."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, input_ids, attention_mask, labels=None):
        h = (self.embed(input_ids) * attention_mask[..., None]).mean(1)
        logits = self.head(h)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def build(batch=3, seq=5):
    ids = torch.randint(0, 50, (batch, seq))
    enc = {"input_ids": ids, "attention_mask": torch.ones(batch, seq), "labels": ids[:, 0] % 4}
    return {"model": Classifier(), "batch": enc}


def fixed():
    return build()


def lazy():
    import not_a_package_ceiling_knows  # noqa: F401


class Lazy(nn.Module):
    def forward(self, x):
        import not_a_package_ceiling_knows  # noqa: F401


def lazy_forward():
    return {"model": Lazy(), "batch": torch.ones(2)}
'''


@pytest.fixture
def target(tmp_path):
    f = tmp_path / "hf_style.py"
    f.write_text(textwrap.dedent(DICT_TARGET))
    return f


def test_dict_batch_runs_as_keyword_arguments_with_its_sizes(cli, target):
    code, out, err = cli("profile", f"{target}:build", "--train", "--json", "--steps", "1")
    assert code == 0, err
    d = json.loads(out)
    assert (d["samples_per_step"], d["tokens_per_step"]) == (3, 15)  # tokens from input_ids
    # the head: forward 2·3·16·4, its weight gradient the same, the input gradient too
    assert d["model_flops_per_step"] == 3 * (2 * 3 * 16 * 4)


def test_batch_and_seq_reach_a_function_that_takes_them(cli, target):
    args = ("profile", f"{target}:build", "--batch", "4", "--seq", "7", "--json", "--steps", "1")
    code, out, err = cli(*args)
    assert code == 0, err
    d = json.loads(out)
    assert (d["samples_per_step"], d["tokens_per_step"]) == (4, 28)


@pytest.mark.parametrize(
    ("callable_", "extra", "match"),
    [
        ("fixed", ("--batch", "4"), "--batch cannot reach"),
        ("fixed", ("--seq", "9"), "no parameter named seq"),
        ("lazy", (), "ModuleNotFoundError: No module named 'not_a_package_ceiling_knows'"),
        ("lazy_forward", (), "ModuleNotFoundError: No module named"),
    ],
)
def test_failures_are_one_line(cli, target, callable_, extra, match):
    code, _, err = cli("profile", f"{target}:{callable_}", "--steps", "1", *extra)
    assert code == 2 and match in err
    assert err.strip().count("\n") == 0 and "Traceback" not in err


@pytest.mark.slow
def test_mixture_of_experts_on_meta_says_why_and_counts_in_bf16(cli, tmp_path):
    pytest.importorskip("transformers")
    f = tmp_path / "moe.py"
    f.write_text(
        textwrap.dedent(
            """
            import torch
            from transformers import MixtralConfig, MixtralForCausalLM

            def build():
                cfg = MixtralConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=1, num_attention_heads=4,
                                    num_key_value_heads=2, num_local_experts=4,
                                    num_experts_per_tok=2, max_position_embeddings=64)
                ids = torch.randint(0, 100, (2, 16))
                return {"model": MixtralForCausalLM(cfg), "batch": {"input_ids": ids}}
            """
        )
    )
    code, _, err = cli("profile", f"{f}:build", "--device", "meta")
    assert code == 2 and "add --dtype bf16" in err and err.strip().count("\n") == 0
    code, out, err = cli("profile", f"{f}:build", "--device", "meta", "--dtype", "bf16", "--json")
    assert code == 0, err
    counted = json.loads(out)["model_flops_per_step"]
    # 32 tokens: q, k, v, o projections (32·32 + 2·32·16 + 32·32), the router (32·4), two
    # experts per token of three 32×64 matmuls, the LM head (32·100), attention at half
    per_token = 2 * (32 * 32 * 2 + 2 * 32 * 16 + 32 * 4 + 2 * 3 * 32 * 64 + 32 * 100)
    attention = 4 * 2 * 16 * 16 * 32 / 2
    assert counted == 32 * per_token + attention


def test_public_decoders_count_the_same_with_eager_and_fused_attention():
    transformers = pytest.importorskip("transformers")
    import torch

    from ceiling.profile.recorder import OpRecorder

    cfg = transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    ids = torch.randint(0, 100, (2, 16))
    counts = {}
    for impl in ("eager", "sdpa"):
        cfg._attn_implementation = impl
        rec = OpRecorder()
        with rec:
            transformers.LlamaForCausalLM(cfg)(input_ids=ids, labels=ids).loss.backward()
        counts[impl] = (rec.model_flops(), rec.causal_skipped_flops())
    attention = 3 * 4 * 2 * 16 * 16 * 32  # forward + backward, every pair
    assert counts["eager"] == counts["sdpa"] == (counts["sdpa"][0], attention / 2)
