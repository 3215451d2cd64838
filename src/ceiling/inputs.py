"""The inputs several capabilities share, declared once.

Each `Input` is one thing a user gives — the model, the device, the cluster's size, the
sequence, the batch, the layout, the output — with the keyword a Python call takes, the flag
the command line takes and what it means. The command line builds its options from these
(`ceiling.cli.inputs`), the API documents its arguments with the same words
(`ceiling.api.arguments.checked`), and an error about one names the keyword in Python and the
flag on the command line (`ceiling.cli.argument_names`). A command adds only what is its own
(a default, a limit) after the shared text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Input:
    """One shared input: `name` in Python, `flag` (and `short`) on the command line."""

    name: str
    flag: str
    help: str
    short: str | None = None
    metavar: str | None = None
    cli_words: str | None = None  # how the command line takes it, when not just `flag`

    @property
    def said(self) -> str:
        """How the command line takes it, for the API's documentation."""
        return self.cli_words or ", ".join(self.flags)

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, self.short) if self.short else (self.flag,)


MODEL = Input(
    "model",
    "--model",
    "A transformer: a catalog name (`ceiling models`), custom:layers=..,hidden=..,heads=.., "
    "or hf:PATH (a Hugging Face config.json or its folder); from Python also a config dict "
    "or a transformers config object.",
    metavar="MODEL",
    cli_words="the MODEL argument (--model in `ceiling report`)",
)
# what names a device, said alike wherever one is asked for
SPEC_FORMS = (
    "a catalog name (`ceiling specs`), a driver name, or FILE.toml (FILE.toml#KEY picks "
    "one of several devices in it)"
)
SPEC = Input(
    "spec", "--spec", f"Device datasheet: {SPEC_FORMS}. Not with --profile.", metavar="NAME"
)
MACHINE_PROFILE = Input(
    "machine_profile",
    "--profile",
    "Device measured by `ceiling bench` (default: the saved profile). Not with --spec.",
    metavar="PATH",
)
GPUS = Input("gpus", "--gpus", "Devices in the cluster.", short="-n")
SEQ = Input("seq", "--seq", "Sequence length in tokens.", short="-s")
GLOBAL_BATCH = Input("global_batch", "--global-batch", "Sequences per optimizer step.", short="-b")
TP = Input("tp", "--tp", "Tensor-parallel degree (devices per model replica).")
WEIGHTS = Input(
    "weights",
    "--weights",
    "Weight dtype: fp32 fp16 bf16 fp8 int8 int4, or a 4-bit format: awq gptq mxfp4 (default bf16).",
)
KV_DTYPE = Input("kv_dtype", "--kv-dtype", "KV cache dtype (default: the activation dtype).")
ACTIVATIONS = Input(
    "activations", "--activations", "Activation dtype for int8/int4/fp8 weights: bf16 fp16 fp32."
)
JSON = Input("json", "--json", "Print one JSON object on stdout instead of tables.")
PLOT = Input("plot", "--plot", "Write a figure to FILE (.png or .svg).", metavar="FILE")

SHARED: tuple[Input, ...] = (
    MODEL,
    SPEC,
    MACHINE_PROFILE,
    GPUS,
    SEQ,
    GLOBAL_BATCH,
    TP,
    WEIGHTS,
    KV_DTYPE,
    ACTIVATIONS,
    JSON,
    PLOT,
)
BY_NAME = {i.name: i for i in SHARED}


def flag_of(name: str) -> str | None:
    """The command line's word for a Python keyword when it is another (`machine_profile`
    is `profile`), else None."""
    shared = BY_NAME.get(name)
    if shared is None:
        return None
    word = shared.flag.removeprefix("--")
    return None if word.replace("-", "_") == name else word
