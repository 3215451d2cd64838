"""Models of the field built small from their configurations (random weights, nothing
downloaded) as profile workloads, at a batch size given: what predicted_vs_measured.py
profiles beside the built-ins. Each maker returns ceiling.profile.targets.Workload."""

from __future__ import annotations

import torch
from torch import nn

V, H, HEADS, FF, LAYERS, L = 512, 128, 4, 256, 2, 64  # vocabulary, width, ..., tokens
IMAGE = 64


def _workload(name: str, model: nn.Module, batch: dict, loss_fn=None):
    from ceiling.profile.targets import from_parts

    return from_parts(name, {"model": model, "batch": batch, "loss_fn": loss_fn})


def _tokens(b: int, length: int = L) -> torch.Tensor:
    return torch.randint(0, V, (b, length))


def _lm(name: str, model, b: int):
    ids = _tokens(b)
    return _workload(name, model, {"input_ids": ids, "labels": ids})


def gpt2(b: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=V, n_embd=H, n_layer=LAYERS, n_head=HEADS, n_positions=L)
    return _lm("gpt2", GPT2LMHeadModel(cfg), b)


def llama(b: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=FF,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=2)  # fmt: skip
    return _lm("llama", LlamaForCausalLM(cfg), b)


def bert(b: int):
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=V, hidden_size=H, intermediate_size=FF,
                     num_hidden_layers=LAYERS, num_attention_heads=HEADS)  # fmt: skip
    return _lm("bert", BertForMaskedLM(cfg), b)


def mamba(b: int):
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=V, hidden_size=H, state_size=16, num_hidden_layers=LAYERS)
    return _lm("mamba", MambaForCausalLM(cfg), b)


def t5(b: int):
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=V, d_model=H, d_kv=H // HEADS, d_ff=FF, num_layers=LAYERS,
                   num_heads=HEADS, decoder_start_token_id=0)  # fmt: skip
    batch = {"input_ids": _tokens(b), "labels": _tokens(b, L // 4)}
    return _workload("t5", T5ForConditionalGeneration(cfg), batch)


def whisper(b: int):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    mels = 32
    cfg = WhisperConfig(vocab_size=V, d_model=H, encoder_layers=LAYERS, decoder_layers=LAYERS,
                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                        encoder_ffn_dim=FF, decoder_ffn_dim=FF, num_mel_bins=mels,
                        max_source_positions=L, max_target_positions=64,
                        decoder_start_token_id=1, pad_token_id=0)  # fmt: skip
    batch = {"input_features": torch.randn(b, mels, 2 * L),
             "labels": torch.randint(2, V, (b, L // 4))}  # fmt: skip
    return _workload("whisper", WhisperForConditionalGeneration(cfg), batch)


def _images(b: int) -> dict:
    return {"pixel_values": torch.randn(b, 3, IMAGE, IMAGE), "labels": torch.randint(0, 10, (b,))}


def vit(b: int):
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=IMAGE, patch_size=8, hidden_size=H, intermediate_size=FF,
                    num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_labels=10)  # fmt: skip
    return _workload("vit", ViTForImageClassification(cfg), _images(b))


def resnet(b: int):
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128], depths=[1, 1, 1],
                       layer_type="bottleneck", num_labels=10)  # fmt: skip
    return _workload("resnet", ResNetForImageClassification(cfg), _images(b))


def swin(b: int):
    from transformers import SwinConfig, SwinForImageClassification

    cfg = SwinConfig(image_size=IMAGE, patch_size=4, embed_dim=32, depths=[2, 2],
                     num_heads=[2, 4], window_size=4, num_labels=10)  # fmt: skip
    return _workload("swin", SwinForImageClassification(cfg), _images(b))


def clip(b: int):
    from transformers import CLIPConfig, CLIPModel

    tower = dict(hidden_size=H, intermediate_size=FF, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS)  # fmt: skip
    cfg = CLIPConfig(text_config=dict(vocab_size=V, max_position_embeddings=L, **tower),
                     vision_config=dict(image_size=IMAGE, patch_size=8, **tower),
                     projection_dim=64)  # fmt: skip
    batch = {"input_ids": _tokens(b), "pixel_values": torch.randn(b, 3, IMAGE, IMAGE),
             "return_loss": True}  # fmt: skip
    return _workload("clip", CLIPModel(cfg), batch)


class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(H, H, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(H, 10)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def lstm(b: int):
    return _workload("torch LSTM", _Recurrent(), (torch.randn(b, L, H),),
                     lambda out, batch: out.pow(2).mean())  # fmt: skip


def transformer_encoder(b: int):
    layer = nn.TransformerEncoderLayer(H, HEADS, FF, batch_first=True)
    model = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    return _workload("torch TransformerEncoder", model, (torch.randn(b, L, H),),
                     lambda out, batch: out.pow(2).mean())  # fmt: skip


MAKERS = [gpt2, llama, bert, t5, mamba, whisper, vit, resnet, swin, clip, lstm,
          transformer_encoder]  # fmt: skip
