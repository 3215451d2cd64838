"""The plain-Python op costs (`trace.op_rules`) equal the replay on torch's meta device
(`trace.op_replay`) for every distinct op call in the committed real traces, FLOPs and bytes
exact; and a first read of a real trace with shapes (no memo) no longer loads torch."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from dataclasses import astuple
from pathlib import Path

import pytest

from ceiling.trace import op_cost, op_replay, op_rules
from ceiling.trace.analyze import analyze
from patience import HANG_S

DATA = Path(__file__).parent / "data" / "traces-real"
SHAPED = ["mi250_minitoy_rocm6.json.gz", "sampled_2rank", "v100_resnet50_kineto_pt18.json.gz"]


def _recorded() -> dict:
    """Each distinct aten call of every committed real trace, [name, Input Dims, Input type,
    Concrete Inputs, Input Strides] as recorded, by trace (op_calls.json.gz: collected from
    the traces by `calls_of`; reading them all takes longer than this test should)."""
    with gzip.open(DATA / "op_calls.json.gz", "rt") as f:
        return json.load(f)


def calls_of(path: Path) -> list:
    """A trace's distinct aten calls, as op_calls.json.gz keeps them."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        events = json.load(f)["traceEvents"]
    seen = {}
    for e in events:
        name = e.get("name")
        if isinstance(name, str) and name.startswith("aten::") and e.get("ph") == "X":
            a = e.get("args", {})
            call = [name, *(a.get(k) for k in ("Input Dims", "Input type"))]
            call += [a.get("Concrete Inputs"), a.get("Input Strides")]
            seen.setdefault(json.dumps(call), call)
    return list(seen.values())


def test_the_rule_table_is_what_torch_and_the_counting_rules_say():
    table = op_rules._table()
    assert json.loads(json.dumps(op_replay.rule_table(table))) == table, (
        "regenerate with op_replay.write_rule_table('src/ceiling/trace/op_rules.json', names)"
    )


def test_the_kept_calls_are_the_calls_of_the_smallest_trace():
    # the list stays what the traces hold (the larger ones take seconds to read)
    path = DATA / "mi250_minitoy_rocm6.json.gz"
    assert calls_of(path) == _recorded()[path.name]


def _expected(name, dims, types, concrete, strides):
    if _shaped(dims, types):
        replayed = op_replay.replayed(name, dims, types, concrete, strides)
    else:
        replayed = op_replay.kind_only(name)
    return None if replayed is None else astuple(replayed)


def _shaped(dims, types) -> bool:
    return isinstance(dims, list) and isinstance(types, list) and len(dims) == len(types)


@pytest.mark.parametrize("trace", sorted(_recorded()))
def test_every_call_costs_what_the_replay_gives(trace):
    calls = _recorded()[trace]
    assert calls
    for name, dims, types, concrete, strides in calls:
        shaped = _shaped(dims, types)
        ruled = op_rules.rule_cost(name, dims if shaped else None, types, concrete, strides)
        assert ruled is not op_rules.UNSURE, (name, dims, types)
        assert ruled == _expected(name, dims, types, concrete, strides), (name, dims, types)


F = "float"
SL, SC, BF, TL = "ScalarList", "Scalar", "c10::BFloat16", "TensorList"
TWO = [[128, 64], [64]]  # a weight and a bias, as a list argument records them


def c(name, dims, types, concrete=None, strides=None):
    return [name, dims, types, concrete, strides]


# Calls as a current profiler records them (scalars and lists in "Concrete Inputs"), for the
# rules the committed traces do not reach: matmuls with a bias, convolutions (grouped,
# depthwise, transposed, 1-D, their backward), norms, softmax, activations, broadcasting and
# type promotion, copies between layouts, views; some of them refused by torch's meta kernels.
MODERN = [
    c(
        "aten::baddbmm",
        [[4, 8, 16], [4, 8, 32], [4, 32, 16], [], []],
        [F, F, F, SC, SC],
        ["", "", "", "1", "1"],
    ),
    c(
        "aten::baddbmm",
        [[1, 8, 16], [4, 8, 32], [4, 32, 16], [], []],
        ["c10::BFloat16"] * 3 + [SC, SC],
        ["", "", "", "0", "0.125"],
    ),
    c(
        "aten::addmm",
        [[16], [8, 32], [32, 16], [], []],
        ["c10::Half"] * 3 + [SC, SC],
        ["", "", "", "1", "1"],
    ),
    c("aten::mm", [[8, 32], [32, 16]], ["c10::BFloat16"] * 2, None, [[32, 1], [1, 32]]),
    c("aten::bmm", [[4, 8, 32], [4, 33, 16]], [F, F]),
    c(
        "aten::convolution",
        [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SC, SL, SC],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
    ),
    c(
        "aten::convolution",
        [[8, 32, 28, 28], [32, 1, 3, 3], [], [], [], [], [], [], []],
        [F, F, "", SL, SL, SL, SC, SL, SC],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32"],
    ),
    c(
        "aten::convolution",
        [[2, 16, 14, 14], [16, 8, 4, 4], [], [], [], [], [], [], []],
        [F, F, "", SL, SL, SL, SC, SL, SC],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"],
    ),
    c(
        "aten::convolution",
        [[8, 3, 32, 32], [16, 4, 3, 3], [16], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SC, SL, SC],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
    ),
    c(
        "aten::_convolution",
        [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SC, SL, SC, SC, SC, SC, SC],
        [
            "",
            "",
            "",
            "[1, 1]",
            "[0, 0]",
            "[2, 2]",
            "False",
            "[0, 0]",
            "1",
            "False",
            "False",
            "True",
            "True",
        ],
    ),
    c(
        "aten::cudnn_convolution",
        [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], []],
        [F, F, SL, SL, SL, SC, SC, SC, SC],
        ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"],
    ),
    c(
        "aten::convolution",
        [[4, 16, 100], [32, 16, 5], [32], [], [], [], [], [], []],
        ["c10::BFloat16"] * 3 + [SL, SL, SL, SC, SL, SC],
        ["", "", "", "[1]", "[2]", "[1]", "False", "[0]", "1"],
    ),
    c(
        "aten::convolution_backward",
        [[8, 16, 32, 32], [8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SL, SC, SL, SC, SL],
        [
            "",
            "",
            "",
            "[16]",
            "[1, 1]",
            "[1, 1]",
            "[1, 1]",
            "False",
            "[0, 0]",
            "1",
            "[True, True, True]",
        ],
    ),
    c(
        "aten::convolution_backward",
        [[8, 32, 14, 14], [8, 32, 28, 28], [32, 1, 3, 3], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SL, SC, SL, SC, SL],
        [
            "",
            "",
            "",
            "[0]",
            "[2, 2]",
            "[1, 1]",
            "[1, 1]",
            "False",
            "[0, 0]",
            "32",
            "[False, True, False]",
        ],
    ),
    c(
        "aten::native_layer_norm",
        [[4, 128, 768], [], [768], [768], []],
        ["c10::BFloat16", SL, "c10::BFloat16", "c10::BFloat16", SC],
        ["", "[768]", "", "", "1e-05"],
    ),
    c(
        "aten::native_layer_norm",
        [[4, 128, 768], [], [], [], []],
        [F, SL, "", "", SC],
        ["", "[768]", "", "", "1e-05"],
    ),
    c(
        "aten::native_layer_norm_backward",
        [[4, 128, 768], [4, 128, 768], [], [4, 128, 1], [4, 128, 1], [768], [768], []],
        [F, F, SL, F, F, F, F, SL],
        ["", "", "[768]", "", "", "", "", "[True, True, True]"],
    ),
    c(
        "aten::native_batch_norm",
        [[8, 16, 14, 14]] + [[16]] * 4 + [[]] * 3,
        [F] * 5 + [SC] * 3,
        [""] * 5 + ["True", "0.1", "1e-05"],
    ),
    c(
        "aten::_native_batch_norm_legit",
        [[8, 16, 14, 14]] + [[16]] * 4 + [[]] * 3,
        ["c10::BFloat16"] + [F] * 4 + [SC] * 3,
        [""] * 5 + ["True", "0.1", "1e-05"],
    ),
    c(
        "aten::_native_batch_norm_legit_no_training",
        [[8, 16, 14, 14]] + [[16]] * 4 + [[]] * 2,
        [F] * 5 + [SC] * 2,
        [""] * 5 + ["0.1", "1e-05"],
    ),
    c(
        "aten::native_batch_norm",
        [[8, 16, 14, 14]] + [[8]] * 4 + [[]] * 3,
        [F] * 5 + [SC] * 3,
        [""] * 5 + ["True", "0.1", "1e-05"],
    ),
    c(
        "aten::native_batch_norm_backward",
        [[8, 16, 14, 14]] * 2 + [[16]] * 5 + [[]] * 3,
        [F] * 7 + [SC, SC, SL],
        [""] * 7 + ["True", "1e-05", "[True, True, True]"],
    ),
    c(
        "aten::native_group_norm",
        [[8, 32, 14, 14], [32], [32]] + [[]] * 5,
        [F] * 3 + [SC] * 5,
        [""] * 3 + ["8", "32", "196", "4", "1e-05"],
    ),
    c(
        "aten::native_group_norm_backward",
        [[8, 32, 14, 14]] * 2 + [[8, 4], [8, 4], [32]] + [[]] * 5,
        [F] * 5 + [SC] * 4 + [SL],
        [""] * 5 + ["8", "32", "196", "4", "[True, False, True]"],
    ),
    c(
        "aten::_scaled_dot_product_efficient_attention",
        [[2, 8, 128, 64]] * 3 + [[]] * 5,
        [BF] * 3 + ["", SC, SC, SC, ""],
        ["", "", "", "", "True", "0.0", "True", ""],
    ),
    c(
        "aten::_scaled_dot_product_efficient_attention",
        [[2, 8, 100, 64], [2, 8, 256, 64], [2, 8, 256, 32], [2, 8, 100, 256]] + [[]] * 4,
        [BF] * 4 + [SC, SC, SC, ""],
        ["", "", "", "", "True", "0.1", "False", ""],
    ),
    c(
        "aten::_scaled_dot_product_efficient_attention",
        [[2, 8, 128, 64]] * 3 + [[]] * 5,
        [BF] * 3 + ["", SC, SC, SC, ""],
        ["", "", "", "", "False", "0.0", "False", ""],
    ),
    c(
        "aten::_scaled_dot_product_flash_attention",
        [[2, 8, 128, 64]] * 3 + [[]] * 4,
        [BF] * 3 + [SC, SC, SC, ""],
        ["", "", "", "0.0", "True", "False", ""],
    ),
    c(
        "aten::_scaled_dot_product_flash_attention",
        [[2, 8, 64, 64]] + [[2, 8, 256, 64]] * 2 + [[]] * 4,
        [BF] * 3 + [SC, SC, SC, ""],
        ["", "", "", "0.0", "True", "False", ""],
    ),
    c(
        "aten::embedding",
        [[50000, 768], [4, 128], [], [], []],
        [F, "long int", SC, SC, SC],
        ["", "", "-1", "False", "False"],
    ),
    c(
        "aten::embedding_dense_backward",
        [[4, 128, 768], [4, 128], [], [], []],
        [F, "long int", SC, SC, SC],
        ["", "", "50000", "-1", "False"],
    ),
    c("aten::index_select", [[1000, 64], [], [32]], [F, SC, "long int"], ["", "0", ""]),
    c("aten::native_dropout", [[4, 128, 768], [], []], [F, SC, SC], ["", "0.1", "True"]),
    c(
        "aten::max_pool2d_with_indices",
        [[32, 64, 112, 112]] + [[]] * 5,
        [F, SL, SL, SL, SL, SC],
        ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"],
    ),
    c(
        "aten::max_pool2d_with_indices",
        [[8, 16, 15, 15]] + [[]] * 5,
        [F, SL, SL, SL, SL, SC],
        ["", "[2, 2]", "[]", "[0, 0]", "[1, 1]", "True"],
    ),
    c("aten::_adaptive_avg_pool2d", [[32, 2048, 7, 7], []], [F, SL], ["", "[1, 1]"]),
    c("aten::_foreach_addcdiv_", [TWO] * 3 + [[]], [TL] * 3 + [SC], ["", "", "", "0.5"]),
    c("aten::_foreach_addcmul_", [TWO] * 3 + [[]], [TL] * 3 + [SC], ["", "", "", "0.1"]),
    c("aten::_foreach_sqrt", [TWO], [TL], [""]),
    c("aten::_foreach_div_", [TWO] * 2, [TL] * 2, ["", ""]),
    c("aten::_foreach_add", [TWO, []], [TL, SC], ["", "1e-8"]),
    c("aten::_foreach_mul_", [TWO, []], [TL, SC], ["", "0.9"]),
    c("aten::_foreach_sub_", [TWO, [[128, 64]]], [TL, TL], ["", ""]),
    c(
        "aten::_fused_adamw_",
        [TWO] * 4 + [[], [[], []]] + [[]] * 9,
        [TL] * 6 + [SC] * 7 + ["", ""],
        [""] * 6 + ["0.001", "0.9", "0.999", "0.01", "1e-08", "False", "False", "", ""],
    ),
    # composites: no rule of their own, the ops they run are counted (mm, addmm, bmm...)
    c("aten::linear", [[4, 128, 768], [3072, 768], [3072]], [BF] * 3),
    c("aten::matmul", [[4, 128, 768], [768, 3072]], [BF] * 2),
    c("aten::addmv", [[64], [64, 32], [32], [], []], [F] * 3 + [SC] * 2, ["", "", "", "1", "1"]),
    c("aten::mv", [[64, 32], [32]], [F] * 2),
    c("aten::_softmax", [[4, 12, 128, 128], [], []], ["c10::Half", SC, SC], ["", "-1", "True"]),
    c("aten::_softmax", [[4, 12, 128, 128], [], []], [F, SC, SC], ["", "-1", "False"]),
    c("aten::_log_softmax", [[32, 1000], [], []], [F, SC, SC], ["", "1", "False"]),
    c(
        "aten::_softmax_backward_data",
        [[4, 12, 128, 128], [4, 12, 128, 128], [], []],
        [F, F, SC, SC],
        ["", "", "-1", "6"],
    ),
    c(
        "aten::_log_softmax_backward_data",
        [[32, 1000], [32, 1000], [], []],
        [F, F, SC, SC],
        ["", "", "1", "6"],
    ),
    c("aten::gelu", [[4, 128, 3072], []], ["c10::BFloat16", "String"], ["", "none"]),
    c("aten::gelu", [[4, 128, 3072], []], [F, "String"], ["", "tanh"]),
    c(
        "aten::gelu_backward",
        [[4, 128, 3072], [4, 128, 3072], []],
        [F, F, "String"],
        ["", "", "none"],
    ),
    c("aten::silu", [[4, 128, 3072]], ["c10::BFloat16"]),
    c("aten::silu_backward", [[4, 128, 3072], [4, 128, 3072]], [F, F]),
    c(
        "aten::add",
        [[4, 128, 768], [768], []],
        ["c10::BFloat16", "c10::BFloat16", SC],
        ["", "", "1"],
    ),
    c("aten::add", [[4, 128, 768], [], []], ["c10::BFloat16", F, SC], ["", "", "1"]),
    c("aten::mul", [[4, 128, 768], [4, 1, 768]], ["c10::Half", "float"]),
    c("aten::div", [[4, 128], []], ["long int", SC], ["", "2"]),
    c("aten::sum", [[4, 128, 768], [], [], []], [F, SL, SC, ""], ["", "[0, 1]", "False", ""]),
    c(
        "aten::sum",
        [[4, 128, 768], [], [], []],
        ["c10::BFloat16", SL, SC, ""],
        ["", "[-1]", "True", ""],
    ),
    c("aten::mean", [[4, 128, 768], [], [], []], [F, SL, SC, ""], ["", "[-1]", "True", ""]),
    c(
        "aten::copy_",
        [[4, 128, 768], [4, 128, 768], []],
        ["c10::BFloat16", F, SC],
        ["", "", "False"],
        [[98304, 768, 1], [1, 512, 4], []],
    ),
    c(
        "aten::_to_copy",
        [[4, 128, 768], [], [], [], [], [], []],
        [F, SC, "", "", "", SC, ""],
        ["", "15", "", "", "", "False", ""],
    ),
    c("aten::view", [[4, 128, 768], []], [F, SL], ["", "[512, -1]"]),
    c("aten::view", [[4, 128, 768], []], [F, SL], ["", "[500, -1]"]),
    c("aten::transpose", [[4, 128, 12, 64], [], []], [F, SC, SC], ["", "1", "2"]),
    c("aten::expand", [[1, 768], [], []], [F, SL, SC], ["", "[4, 128, 768]", "False"]),
    c("aten::cat", [[[4, 128], [4, 64]], []], ["TensorList", SC], ["", "1"]),
    c("aten::clone", [[4, 128, 768], []], [F, ""], ["", ""], [[1, 512, 4], []]),
    c("aten::zeros", [[], [], [], [], []], [SL, SC, "", "", ""], ["[4, 128]", "6", "", "", ""]),
    c("aten::fill_", [[4, 128], []], ["c10::BFloat16", SC], ["", "0"]),
    c(
        "aten::addmm_",
        [[8, 16], [8, 32], [32, 16], [], []],
        [F, F, F, SC, SC],
        ["", "", "", "1", "1"],
    ),
    c("aten::where", [[4, 128], [4, 128], []], ["bool", F, F]),
    c("aten::sigmoid", [[4, 128]], ["long int"]),
    c("aten::relu_", [[4, 128]], [F]),
]


@pytest.mark.parametrize("call", MODERN, ids=lambda call: call[0] if isinstance(call, list) else "")
def test_calls_of_a_current_profiler_cost_what_the_replay_gives(call):
    ruled = op_rules.rule_cost(*call)
    assert ruled is not op_rules.UNSURE
    assert ruled == _expected(*call)


def _small_training_step():
    """Two steps of a model with the usual layers (embedding, layer/batch/group norm,
    linear, causal attention, convolutions plain and depthwise, pooling, softmax, a loss,
    AdamW), as `torch.profiler` records them with shapes."""
    import torch
    from torch import nn
    from torch.nn import functional as f

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.lin = nn.Embedding(100, 64), nn.LayerNorm(64), nn.Linear(64, 64)
            self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.gn, self.dw = nn.GroupNorm(2, 8), nn.Conv2d(8, 8, 3, groups=8, stride=2)

        def forward(self, ids, img):
            x = f.gelu(self.lin(self.ln(self.emb(ids))))
            q = x.view(2, 16, 4, 16).transpose(1, 2)
            a = f.scaled_dot_product_attention(q, q, q, is_causal=True)
            x = x + a.transpose(1, 2).reshape(2, 16, 64)
            y = f.max_pool2d(self.dw(self.gn(torch.relu(self.bn(self.conv(img))))), 2)
            z = f.softmax(x, -1).sum() + y.mean() + f.silu(x).pow(2).mean()
            return z + f.cross_entropy(x.reshape(-1, 64), ids.reshape(-1))

    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters())
    ids, img = torch.randint(0, 64, (2, 16)), torch.randn(2, 3, 16, 16)
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(2):
            model(ids, img).backward()
            opt.step()
            opt.zero_grad()
    return prof


def test_every_call_of_a_trace_recorded_here_costs_what_the_replay_gives(tmp_path):
    path = tmp_path / "trace.json"
    _small_training_step().export_chrome_trace(str(path))
    calls = calls_of(path)
    assert len(calls) > 200
    for name, dims, types, concrete, strides in calls:
        shaped = _shaped(dims, types)
        ruled = op_rules.rule_cost(name, dims if shaped else None, types, concrete, strides)
        assert ruled is not op_rules.UNSURE, (name, dims, types)
        assert ruled == _expected(name, dims, types, concrete, strides), (name, dims, types)


_DTYPES = ["float", "c10::BFloat16", "c10::Half", "long int", "bool", "double"]
_VALUES = ["0", "1", "-1", "2", "5", "0.5", "True", "False", "[1, 1]", "[0]", "[]"]


def _mutated(call, rng):
    """The call with one recorded input changed: a size, a rank, a dtype or a scalar."""
    name, dims, types, concrete, strides = json.loads(json.dumps(call))
    i = rng.randrange(len(dims))
    if isinstance(dims[i], list) and dims[i] and all(isinstance(x, int) for x in dims[i]):
        j, r = rng.randrange(len(dims[i])), rng.random()
        if r < 0.4:
            dims[i][j] = rng.choice([0, 1, 2, 3, 7, dims[i][j] * 2])
        elif r < 0.6:
            dims[i] = dims[i][1:]
        elif r < 0.8 and types[i] in _DTYPES:
            types[i] = rng.choice(_DTYPES)
        else:
            dims[i] = [1, *dims[i]]
    elif concrete and concrete[i] not in ("", None):
        concrete[i] = rng.choice(_VALUES)
    else:
        return None
    return [name, dims, types, concrete, None if rng.random() < 0.5 else strides]


def test_calls_with_odd_shapes_and_values_cost_what_the_replay_gives_or_are_left_to_it():
    # where the rules answer at all, they answer as torch's meta kernels do: a shape or a
    # value they cannot judge goes to the replay, never to a count of their own
    rng = random.Random(26)
    answered = 0
    for _ in range(400):
        call = _mutated(rng.choice(MODERN), rng)
        if call is None:
            continue
        ruled = op_rules.rule_cost(*call)
        if ruled is not op_rules.UNSURE:
            answered += 1
            assert ruled == _expected(*call), call
    assert answered > 150


def test_a_call_without_a_rule_is_left_to_the_replay():
    assert op_rules.rule_cost("aten::my_op", [[2]], ["float"], None, None) is op_rules.UNSURE
    # an argument these rules do not model (a rounding mode) is left to the replay too
    call = ("aten::div", [[2, 3], [2, 3], []], ["float", "float", ""], ["", "", "'floor'"], None)
    assert op_rules.rule_cost(*call) is op_rules.UNSURE


def test_a_call_the_meta_kernel_refuses_gets_the_op_kind_alone():
    # shapes that do not broadcast: FLOPs and bytes unknown, as the replay answers
    call = ("aten::add", [[2, 3], [4, 3], []], ["float", "float", "Scalar"], None, None)
    refused = op_rules.rule_cost(*call)
    assert refused == astuple(op_replay.replayed(*call))
    assert refused[0] is None and refused[2] == "elementwise"


RUN = """
import io, json, sys, contextlib
from ceiling.cli.app import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["trace", sys.argv[1], "--json"])
    except SystemExit as exc:
        assert not exc.code, exc.code
print(json.dumps({"torch": "torch" in sys.modules, "answer": json.loads(out.getvalue())}))
"""


@pytest.mark.parametrize("trace", SHAPED)
def test_a_first_read_of_a_shaped_real_trace_does_not_load_torch(trace, tmp_path, monkeypatch):
    cache = tmp_path / "cache"  # an empty memo
    src = str(Path(op_cost.__file__).resolve().parents[2])
    env = {"XDG_CACHE_HOME": str(cache), "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    ran = subprocess.run(
        [sys.executable, "-c", RUN, str(DATA / trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["torch"] is False
    # the same answer as costing every call by the replay, as before
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "replayed"))
    for name, empty in (("_MEMO", {}), ("_RULED", {}), ("_NEW", set()), ("_LOADED", set())):
        monkeypatch.setattr(op_cost, name, empty)
    monkeypatch.setattr(op_rules, "rule_cost", lambda *a: op_rules.UNSURE)
    assert got["answer"] == json.loads(json.dumps(analyze(DATA / trace).to_dict()))
