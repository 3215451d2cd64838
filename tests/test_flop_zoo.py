"""One training step of each architecture the field runs, built small from its
configuration (random weights, no download), counted by the op recorder and by hand.

The hand count: every weight matrix meets every token it sees once in the forward
(2 FLOPs per multiply-add) and twice in the backward (the input's and the weight's
gradients: 3× in all), less the input gradients nothing needs (a first convolution over
pixels or audio features); attention's Q·Kᵀ and P·V at the pairs their mask keeps (causal:
L²/2; a window or padding fewer); convolutions from their output positions. Every model's
count equals it, with no op left unknown (which would make MFU a lower bound).
"""

import pytest
import torch
from torch import nn

from ceiling.profile.recorder import OpRecorder

transformers = pytest.importorskip("transformers")
T = transformers

B, L, V = 2, 16, 128
H, HEADS, KV_HEADS, HEAD_DIM, FF, LAYERS = 64, 4, 2, 16, 96, 2
N = B * L  # tokens


def lin(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def attention(pairs_per_sequence: float, width: int = HEADS * HEAD_DIM, batch: int = B) -> float:
    """Q·Kᵀ and P·V over all heads."""
    return 2 * 2 * batch * width * pairs_per_sequence


def causal(length: int) -> float:
    return length * length / 2


def window(length: int, size: int) -> float:
    return sum(min(i + 1, size) for i in range(length)) - length / 2


def _decoder(**extra) -> dict:
    return dict(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        **extra,
    )


def _gqa_layer(tokens: int = N) -> int:
    q = lin(tokens, H, HEADS * HEAD_DIM) * 2  # Q and the output projection
    return q + lin(tokens, H, KV_HEADS * HEAD_DIM) * 2  # K and V


def _language_model(model_cls, config_cls, **extra):
    torch.manual_seed(0)
    model = model_cls(config_cls(**_decoder(**extra)))
    ids = torch.randint(0, V, (B, L))
    return lambda: model(input_ids=ids, labels=ids).loss


def _llama_count() -> float:
    per_layer = _gqa_layer() + 3 * lin(N, H, FF) + attention(causal(L))
    return 3 * (LAYERS * per_layer + lin(N, H, V))


def llama():
    return _language_model(T.LlamaForCausalLM, T.LlamaConfig), _llama_count()


def phi3():  # Q, K, V fused in one matrix, gate and up in another: the same FLOPs
    return _language_model(T.Phi3ForCausalLM, T.Phi3Config, pad_token_id=0), _llama_count()


def mixtral():
    experts, active = 4, 2
    per_layer = _gqa_layer() + lin(N, H, experts) + active * 3 * lin(N, H, FF)
    per_layer += attention(causal(L))
    step = _language_model(
        T.MixtralForCausalLM, T.MixtralConfig, num_local_experts=experts, num_experts_per_tok=active
    )
    return step, 3 * (LAYERS * per_layer + lin(N, H, V))


def qwen2_moe():
    experts, active, routed, shared = 4, 2, 32, 64
    per_layer = _gqa_layer() + lin(N, H, experts) + active * 3 * lin(N, H, routed)
    per_layer += 3 * lin(N, H, shared) + lin(N, H, 1) + attention(causal(L))  # shared + gate
    step = _language_model(
        T.Qwen2MoeForCausalLM,
        T.Qwen2MoeConfig,
        num_experts=experts,
        num_experts_per_tok=active,
        moe_intermediate_size=routed,
        shared_expert_intermediate_size=shared,
    )
    return step, 3 * (LAYERS * per_layer + lin(N, H, V))


def gemma2():
    size = 8  # layer 0 slides a window of 8, layer 1 is global; softcapping on
    layers = 2 * (_gqa_layer() + 3 * lin(N, H, FF))
    layers += attention(window(L, size)) + attention(causal(L))
    step = _language_model(
        T.Gemma2ForCausalLM,
        T.Gemma2Config,
        head_dim=HEAD_DIM,
        sliding_window=size,
        attn_implementation="eager",
    )
    return step, 3 * (layers + lin(N, H, V))


def _encoder_layer(tokens: int, pairs: float, batch: int = B, ff: int = FF) -> float:
    return 4 * lin(tokens, H, H) + 2 * lin(tokens, H, ff) + attention(pairs, H, batch)


def _masked_lm(model_cls, config_cls):
    torch.manual_seed(0)
    config = config_cls(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
    )
    model = model_cls(config)
    ids = torch.randint(0, V, (B, L))
    head = lin(N, H, H) + lin(N, H, V)  # the prediction head's transform and decoder
    expected = 3 * (LAYERS * _encoder_layer(N, L * L) + head)
    return (lambda: model(input_ids=ids, labels=ids).loss), expected


def bert():
    return _masked_lm(T.BertForMaskedLM, T.BertConfig)


def roberta():
    return _masked_lm(T.RobertaForMaskedLM, T.RobertaConfig)


def t5():
    torch.manual_seed(0)
    config = T.T5Config(
        vocab_size=V,
        d_model=H,
        d_kv=HEAD_DIM,
        d_ff=FF,
        num_layers=LAYERS,
        num_heads=HEADS,
        decoder_start_token_id=0,
    )
    model = T.T5ForConditionalGeneration(config)
    target = 8
    ids, labels = torch.randint(0, V, (B, L)), torch.randint(0, V, (B, target))
    n_dec = B * target
    encoder = _encoder_layer(N, L * L)
    decoder = _encoder_layer(n_dec, causal(target))  # self-attention and the FFN
    decoder += 2 * lin(n_dec, H, H) + 2 * lin(N, H, H) + attention(target * L, H)  # cross
    expected = 3 * (LAYERS * (encoder + decoder) + lin(n_dec, H, V))
    return (lambda: model(input_ids=ids, labels=labels).loss), expected


def whisper():
    torch.manual_seed(0)
    mels, frames, target = 16, 2 * L, 8
    config = T.WhisperConfig(
        vocab_size=V,
        d_model=H,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FF,
        decoder_ffn_dim=FF,
        num_mel_bins=mels,
        max_source_positions=L,
        max_target_positions=32,
        decoder_start_token_id=1,
        pad_token_id=0,
    )
    model = T.WhisperForConditionalGeneration(config)
    features, labels = torch.randn(B, mels, frames), torch.randint(2, V, (B, target))
    n_dec = B * target
    conv1 = 2 * B * frames * H * mels * 3  # kernel 3, padding 1: one output per frame
    conv2 = 2 * B * L * H * H * 3  # stride 2
    encoder = _encoder_layer(N, L * L)
    decoder = _encoder_layer(n_dec, causal(target))
    decoder += 2 * lin(n_dec, H, H) + 2 * lin(N, H, H) + attention(target * L, H)
    # the features need no gradient: the first convolution's backward is its weight's only
    expected = 2 * conv1 + 3 * (conv2 + LAYERS * (encoder + decoder) + lin(n_dec, H, V))
    return (lambda: model(input_features=features, labels=labels).loss), expected


def _patches(image: int, patch: int, channels: int = 3, width: int = H) -> tuple[int, int]:
    """(patch count, FLOPs of the patch convolution) for a batch of images."""
    count = (image // patch) ** 2
    return count, 2 * B * count * width * channels * patch * patch


def vit():
    torch.manual_seed(0)
    config = T.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=H,
        intermediate_size=FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_labels=10,
    )
    model = T.ViTForImageClassification(config)
    pixels, labels = torch.randn(B, 3, 32, 32), torch.randint(0, 10, (B,))
    count, patch_conv = _patches(32, 8)
    seq = count + 1  # the class token
    layers = LAYERS * _encoder_layer(B * seq, seq * seq)
    expected = 2 * patch_conv + 3 * (layers + lin(B, H, 10))
    return (lambda: model(pixel_values=pixels, labels=labels).loss), expected


def clip():
    torch.manual_seed(0)
    tower = dict(hidden_size=H, intermediate_size=FF, num_hidden_layers=LAYERS)
    tower["num_attention_heads"] = HEADS
    config = T.CLIPConfig(
        text_config=dict(vocab_size=V, max_position_embeddings=L, **tower),
        vision_config=dict(image_size=32, patch_size=8, **tower),
        projection_dim=32,
    )
    model = T.CLIPModel(config)
    ids, pixels = torch.randint(0, V, (B, L)), torch.randn(B, 3, 32, 32)
    count, patch_conv = _patches(32, 8)
    seq = count + 1
    text = LAYERS * _encoder_layer(N, causal(L))
    vision = LAYERS * _encoder_layer(B * seq, seq * seq)
    heads = 2 * lin(B, H, 32) + lin(B, 32, B)  # the two projections, the similarity matrix
    expected = 2 * patch_conv + 3 * (text + vision + heads)
    return (lambda: model(input_ids=ids, pixel_values=pixels, return_loss=True).loss), expected


def mamba():
    torch.manual_seed(0)
    inner, state, taps, rank = 2 * H, 8, 4, H // 16
    config = T.MambaConfig(
        vocab_size=V,
        hidden_size=H,
        state_size=state,
        num_hidden_layers=LAYERS,
        expand=2,
        conv_kernel=taps,
    )
    model = T.MambaForCausalLM(config)
    ids = torch.randint(0, V, (B, L))
    per_layer = lin(N, H, 2 * inner) + lin(N, inner, rank + 2 * state) + lin(N, rank, inner)
    per_layer += lin(N, inner, H) + lin(N, inner, 1) * state  # the scan's read-out C·h
    per_layer += 2 * B * (L + taps - 1) * inner * taps  # the depthwise causal convolution
    expected = 3 * (LAYERS * per_layer + lin(N, H, V))
    return (lambda: model(input_ids=ids, labels=ids).loss), expected


def _conv_flops_by_shape(model, run) -> dict:
    """Each convolution's forward FLOPs from its output's shape: 2 · outputs · fan-in."""
    flops = {}

    def hook(module, inputs, output):
        fan_in = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
        flops[module] = 2 * output.numel() * fan_in

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        run()
    for h in handles:
        h.remove()
    return flops


def resnet():
    torch.manual_seed(0)
    config = T.ResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        layer_type="bottleneck",
        num_labels=10,
    )
    model = T.ResNetForImageClassification(config)
    pixels, labels = torch.randn(B, 3, 32, 32), torch.randint(0, 10, (B,))
    convs = _conv_flops_by_shape(model, lambda: model(pixel_values=pixels))
    first = convs[model.resnet.embedder.embedder.convolution]
    expected = 2 * first + 3 * (sum(convs.values()) - first + lin(B, 32, 10))
    return (lambda: model(pixel_values=pixels, labels=labels).loss), expected


def swin():
    torch.manual_seed(0)
    config = T.SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
        num_labels=10,
    )
    model = T.SwinForImageClassification(config)
    pixels, labels = torch.randn(B, 3, 32, 32), torch.randint(0, 10, (B,))
    count, patch_conv = _patches(32, 4, width=16)

    def block(tokens: int, dim: int, windows: int) -> float:
        # the shifted windows' mask adds −100 (not −inf): every pair in a window is computed
        return (
            4 * lin(tokens, dim, dim)
            + 2 * lin(tokens, dim, 4 * dim)
            + attention(windows * 16 * 16, dim)
        )

    stage1 = 2 * block(B * count, 16, count // 16)
    merge = lin(B * count // 4, 4 * 16, 2 * 16)
    stage2 = 2 * block(B * count // 4, 32, 1)  # 4×4 tokens: one window
    expected = 2 * patch_conv + 3 * (stage1 + merge + stage2 + lin(B, 32, 10))
    return (lambda: model(pixel_values=pixels, labels=labels).loss), expected


def _recurrent(cls, gates: int, fused: bool):
    torch.manual_seed(0)
    fan_in, hidden = 16, 32
    layer = cls(fan_in, hidden, num_layers=LAYERS, batch_first=True)
    x = torch.randn(B, L, fan_in)
    g = gates * hidden
    forward = lin(N, fan_in, g) + 3 * lin(N, hidden, g)
    # decomposed on a CPU (GRU), gradients no one needs are not computed: the input's (it
    # is data) and each layer's first state's (zeros); oneDNN's LSTM computes them all
    unused = 0 if fused else lin(N, fan_in, g) + LAYERS * lin(B, hidden, g)
    return (lambda: layer(x)[0].pow(2).mean()), 3 * forward - unused


def lstm():
    return _recurrent(nn.LSTM, 4, fused=True)  # oneDNN's kernel on a CPU


def gru():
    return _recurrent(nn.GRU, 3, fused=False)


def transformer_encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(H, HEADS, FF, batch_first=True)
    encoder = nn.TransformerEncoder(layer, LAYERS)
    x = torch.randn(B, L, H)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 12:] = True  # the second sequence has 12 tokens: its queries see 12 keys
    # both sequences' pairs; the data needs no gradient: the first Q, K, V projection has no
    # input gradient
    expected = 3 * LAYERS * _encoder_layer(N, L * L + L * 12, batch=1) - lin(N, H, 3 * H)
    return (lambda: encoder(x, src_key_padding_mask=padding).pow(2).mean()), expected


ZOO = {
    f.__name__: f
    for f in [
        llama,
        phi3,
        mixtral,
        qwen2_moe,
        gemma2,
        bert,
        roberta,
        t5,
        whisper,
        vit,
        clip,
        mamba,
        resnet,
        swin,
        lstm,
        gru,
        transformer_encoder,
    ]
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_training_step_matches_the_count_by_hand(name):
    step, expected = ZOO[name]()
    with OpRecorder() as rec:
        step().backward()
    # an op whose arithmetic has no count would be named here (and MFU read "at least")
    assert not {c.op for c in rec.calls if c.category == "unknown"}
    assert rec.model_flops() == expected
