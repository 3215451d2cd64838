"""One dtype vocabulary: every spelling maps to one canonical name, accepted by every command."""

import json

import pytest

from ceiling.errors import InvalidInput, UnknownName
from ceiling.vocabulary import (
    DTYPES,
    PRECISIONS,
    STORAGE_DTYPES,
    UnknownDtype,
    dtype_bytes,
    element_bytes,
    normalize_dtype,
    torch_dtype,
)


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("bf16", "bf16"),
        ("BF16", "bf16"),
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        (" Half ", "fp16"),
        ("torch.float32", "fp32"),
        ("float8_e4m3fn", "fp8"),
        ("double", "fp64"),
    ],
)
def test_spellings_map_to_one_name(spelling, name):
    assert normalize_dtype(spelling) == name


def test_unknown_or_unusable_names_say_what_is_accepted():
    with pytest.raises(InvalidInput, match="use one of fp64, fp32"):
        normalize_dtype("fp128")
    with pytest.raises(UnknownName):  # also a KeyError for look-up callers
        normalize_dtype("fp128")
    with pytest.raises(InvalidInput, match="weights dtype 'fp64' cannot be used; use one of bf16"):
        normalize_dtype("fp64", ("bf16", "fp16"), what="weights dtype")


def test_table_is_consistent():
    assert set(DTYPES) <= set(STORAGE_DTYPES) <= set(PRECISIONS)
    assert "int4" not in DTYPES and dtype_bytes("int4") == 0.5
    assert dtype_bytes("torch.bfloat16") == 2 and dtype_bytes("tf32") == 4


def test_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert torch_dtype("BF16") is torch.bfloat16
    assert torch_dtype("tf32") is torch.float32
    assert torch_dtype("int4") is None


def _json(cli, *args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("command", "flag", "alias", "canonical"),
    [
        (["plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "64", "-k", "1"], "--dtype",
         "bfloat16", "bf16"),
        (["decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1"], "--weights", "BF16",
         "bf16"),
        (["decode", "llama-3-8b", "--spec", "h100-sxm", "--batch", "1"], "--kv-dtype",
         "float8_e4m3fn", "fp8"),
        (["roofline", "--spec", "h100-sxm", "--op", "matmul:64x64x64"], "--dtype",
         "torch.float16", "fp16"),
    ],
)  # fmt: skip
def test_every_command_accepts_the_same_spellings(cli, command, flag, alias, canonical):
    assert _json(cli, *command, flag, alias) == _json(cli, *command, flag, canonical)


@pytest.mark.parametrize(
    ("name", "size"),
    [("Float", 4), ("BFloat16", 2), ("Half", 2), ("Double", 8), ("Long", 8), ("Int", 4),
     ("Short", 2), ("Char", 1), ("Byte", 1), ("Bool", 1), ("torch.int64", 8), ("fp8", 1)],
)  # fmt: skip
def test_element_bytes_knows_the_c10_names_a_trace_writes(name, size):
    assert element_bytes(name) == size


def test_element_bytes_of_an_unknown_name_is_none():
    assert element_bytes("") is None and element_bytes("complex32") is None


def test_integer_element_types_are_not_storage_or_compute_dtypes():
    for name in ("int64", "int32", "int16", "uint8", "bool"):
        assert name not in STORAGE_DTYPES and name not in DTYPES
    with pytest.raises(UnknownDtype):
        normalize_dtype("long", STORAGE_DTYPES)


@pytest.mark.parametrize(("dtype", "size"), [("Long", 8), ("Byte", 1), ("BFloat16", 2)])
def test_a_collective_is_sized_by_its_recorded_dtype(dtype, size):
    from ceiling.trace.collectives import message_bytes

    args = {"In msg nelems": 1000, "Out msg nelems": 4000, "dtype": dtype}
    assert message_bytes("all_reduce", args) == 1000 * size
    assert message_bytes("all_gather", args) == 4000 * size
