"""`hf:PATH` as a profile target: the model `transformers` builds from a config.json.

Random weights (no checkpoint is read, nothing is downloaded). The shape model reads the same
config first, so a family it refuses is refused here too, and MFU uses its FLOP count.
"""

from __future__ import annotations

from typing import Any

import torch

from ceiling.errors import MissingDependency

DEFAULT_SEQ = 1024  # tokens per sequence when --seq is not given (capped at the model's)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise MissingDependency(
            "profiling an hf: model builds it with Hugging Face transformers, which is not "
            "installed: pip install transformers (decode, plan and models need only the config)"
        ) from None
    return transformers


def hf_loss(output: Any, batch: Any) -> torch.Tensor:
    return output.loss


def hf_forward(model, batch):
    input_ids = batch[0]
    return model(input_ids=input_ids, labels=input_ids)


def hf_model(key: str):
    """The shape model's config of `key` and a builder of `AutoModelForCausalLM.from_config`
    on a device and dtype (the workload around it is the catalog models' token batch)."""
    from ceiling.hf_files import locate_config
    from ceiling.model.transformer import parse_model

    cfg = parse_model(key)
    transformers = _transformers()
    hf_config = transformers.AutoConfig.from_pretrained(str(locate_config(key[len("hf:") :])))

    def make(device, dtype):
        # the dtype after building: its keyword is `torch_dtype` before transformers 4.56
        # and `dtype` after
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
        return model.to(device=device, dtype=dtype)

    return cfg, make
