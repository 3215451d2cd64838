"""What `ceiling profile` and `ceiling step` run: a built-in model or the user's own.

Built-ins: "gpt:tiny", "gpt:small" (decoder-only transformers), "mlp", "cnn"; any dense
model of the catalog by name ("llama-2-7b", `ceiling models` lists them) or
"custom:layers=..,hidden=..,heads=.." built as the same decoder with random weights (too
large to run here? `--device meta` counts its FLOPs and bytes without running it);
"hf:PATH" (a Hugging Face config.json) built by `transformers` with random weights.
Your own: "package.module:function" or "path/to/file.py:function". The function takes no
arguments and returns a dict (or a model alone):

    {"model": nn.Module,             # required
     "batch": tensor, tuple or dict, # required unless "dataloader" is given; model(*batch),
                                     #   or model(**batch) for a dict (Hugging Face style)
     "forward": f(model, batch),     # optional; default model(*batch) (a tuple unpacked)
     "loss_fn": f(output, batch),    # optional; default: the output's `loss` when it has
                                     #   one, a tuple's last element when it is a scalar (like
                                     #   (logits, loss)), else the output's (logits') mean
     "optimizer": torch.optim.X,     # optional; default AdamW over the model's parameters
     "dataloader": iterable,         # optional; used by `ceiling step`
     "tokens_per_step": int}         # optional; MFU per token (else per sample; a dict
                                     #   batch's input_ids give it)
`--batch`/`--seq` reach the function when it takes parameters named `batch`/`seq`; for a
function that does not, giving them is an error (they would be silently ignored).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ceiling import usercode
from ceiling.errors import InvalidInput, UnknownName, argument

BUILTINS = ("gpt:tiny", "gpt:small", "mlp", "cnn")


@dataclass
class Workload:
    name: str
    build: Callable[[torch.device, torch.dtype], nn.Module]  # the model on a device/dtype
    params: int
    batch: Any  # one step's inputs, on the CPU
    loss_fn: Callable[[Any, Any], torch.Tensor]
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    samples_per_step: int
    tokens_per_step: int | None = None
    transformer: Any = None  # a TransformerConfig for GPT-style models
    seq_len: int | None = None
    dataset: Any = None  # a map-style dataset for `ceiling step` (built-ins)
    dataloader: Iterable | None = None
    forward: Callable[[nn.Module, Any], Any] | None = None  # default: model(*batch)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


def default_loss(output: Any, batch: Any) -> torch.Tensor:
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:  # outputs that carry their loss
        return loss
    if isinstance(output, Mapping):  # a Hugging Face output without labels: its logits
        output = output.get("logits", next(iter(output.values()), None))
    if isinstance(output, (tuple, list)):
        last = output[-1]
        if isinstance(last, torch.Tensor) and last.dim() == 0:
            return last
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise InvalidInput("the model's output is not a tensor: pass a loss_fn(output, batch)")
    return output.float().mean()


def _adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def as_args(batch: Any) -> tuple:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def run_forward(model: nn.Module, batch: Any, forward=None) -> Any:
    """The model's output on a batch: the target's own `forward(model, batch)`, else
    model(**batch) for a dict, model(*batch) with a tuple or list unpacked."""
    if forward is not None:
        return forward(model, batch)
    if isinstance(batch, Mapping):
        return model(**batch)
    return model(*as_args(batch))


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The batch's first tensor (a dict's first tensor value): its leading dim is samples."""
    values = batch.values() if isinstance(batch, Mapping) else as_args(batch)
    return next((x for x in values if isinstance(x, torch.Tensor)), None)


def move_batch(batch: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """Batch tensors onto the device; floating-point ones into the model's dtype."""

    def move(x):
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            return x.to(dtype) if x.is_floating_point() else x
        return x

    if isinstance(batch, Mapping):  # dicts and Hugging Face BatchEncoding: a plain dict back
        return {k: move(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(move(x) for x in batch)
    return move(batch)


# ---- built-ins -------------------------------------------------------------------------


class _TokenData(torch.utils.data.Dataset):
    """Random token windows; `delay_s` per item makes the loader deliberately slow."""

    def __init__(self, vocab: int, seq: int, size: int = 4096, delay_s: float = 0.0):
        self.vocab, self.seq, self.size, self.delay_s = vocab, seq, size, delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        _sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return x[:-1], x[1:]


class _VectorData(torch.utils.data.Dataset):
    def __init__(self, shape: tuple[int, ...], classes: int, size: int = 4096, delay_s=0.0):
        self.shape, self.classes, self.size, self.delay_s = shape, classes, size, delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        _sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.shape, generator=g), int(i % self.classes)


def _sleep(seconds: float) -> None:
    if seconds > 0:
        import time

        time.sleep(seconds)


def _classifier_loss(output, batch):
    return nn.functional.cross_entropy(output.float(), batch[-1])


class Classifier(nn.Module):
    """Wraps a classifier so that model(*batch) takes (inputs, labels) and ignores labels."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x, labels=None):
        return self.net(x)


def _gpt(name: str, batch: int | None, seq: int | None, delay_s: float, cfg=None) -> Workload:
    from ceiling.workloads.gpt import build_gpt, preset_config

    cfg = cfg or preset_config(name)
    s = seq or cfg.max_seq
    if not 1 <= s <= cfg.max_seq:
        raise InvalidInput(f"{argument('seq')} must be in 1..{cfg.max_seq} for {name}, got {s}")
    b = batch or 4
    data = _TokenData(cfg.vocab, s, delay_s=delay_s)
    xs = [data[i] for i in range(b)]
    idx = torch.stack([x for x, _ in xs])
    targets = torch.stack([y for _, y in xs])
    return Workload(
        name=name,
        build=lambda device, dtype: _on(device, build_gpt, cfg, device=device, dtype=dtype),
        params=cfg.params_total,
        batch=(idx, targets),
        loss_fn=default_loss,
        make_optimizer=_adamw,
        samples_per_step=b,
        tokens_per_step=b * s,
        transformer=cfg,
        seq_len=s,
        dataset=data,
    )


def _on(where: torch.device, build, *args, **kwargs):
    """Build on "meta" directly: a model too large for memory is never materialised."""
    if torch.device(where).type != "meta":
        return build(*args, **kwargs)
    with torch.device("meta"):
        return build(*args, **kwargs)


def _mlp(batch: int | None, delay_s: float) -> Workload:
    width = 256
    net = nn.Sequential(
        nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Linear(width, 10)
    )
    b = batch or 64
    data = _VectorData((width,), 10, delay_s=delay_s)
    xs = [data[i] for i in range(b)]
    inputs = (torch.stack([x for x, _ in xs]), torch.tensor([y for _, y in xs]))
    return _local("mlp", Classifier(net), inputs, _classifier_loss, b, data)


def _cnn(batch: int | None, delay_s: float) -> Workload:
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    b = batch or 32
    data = _VectorData((3, 32, 32), 10, delay_s=delay_s)
    xs = [data[i] for i in range(b)]
    inputs = (torch.stack([x for x, _ in xs]), torch.tensor([y for _, y in xs]))
    return _local("cnn", Classifier(net), inputs, _classifier_loss, b, data)


def _mover(model: nn.Module):
    def build(device, dtype):
        return model.to(device=device, dtype=dtype)

    return build


def _local(name, model, inputs, loss_fn, b, data) -> Workload:
    params = sum(p.numel() for p in model.parameters())
    return Workload(name, _mover(model), params, inputs, loss_fn, _adamw, b, dataset=data)


# ---- user targets ----------------------------------------------------------------------


def _import_callable(target: str) -> Callable[[], Any]:
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise InvalidInput(
            f"target {target!r} is neither a built-in ({', '.join(BUILTINS)}) nor 'module:callable'"
        )
    return usercode.load_callable(target)


def _sizes(target: str, fn, batch: int | None, seq: int | None) -> dict[str, int]:
    """--batch/--seq as keyword arguments, for a function that names them; refused for one
    that does not (they would be silently ignored)."""
    given = {k: v for k, v in (("batch", batch), ("seq", seq)) if v is not None}
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unused = [k for k in given if k not in params and not takes_any]
    if unused:
        flags = " and ".join(argument(k) for k in unused)
        raise InvalidInput(
            f"{flags} cannot reach {target}: the function takes no parameter named "
            f"{' or '.join(unused)}; add one (def f(batch=8, seq=512)) or size the batch there"
        )
    return given


def _user(target: str, batch: int | None = None, seq: int | None = None) -> Workload:
    fn = _import_callable(target)
    sizes = _sizes(target, fn, batch, seq)
    made = usercode.call(fn, target, **sizes)
    return from_parts(target, made)


def from_parts(target: str, made: Any) -> Workload:
    """A Workload from what a user's function returns (or the API is given): a model, or a
    dict / tuple of model, batch, optimizer, loss_fn, dataloader, forward, tokens_per_step."""
    if isinstance(made, nn.Module):
        made = {"model": made}
    if isinstance(made, (tuple, list)):
        keys = ("model", "batch", "optimizer", "loss_fn", "dataloader")
        made = dict(zip(keys, made, strict=False))
    if not isinstance(made, dict) or not isinstance(made.get("model"), nn.Module):
        raise InvalidInput(f"{target} must return a dict with an nn.Module under 'model'")
    for key in ("forward", "loss_fn"):
        if made.get(key) is not None and not callable(made[key]):
            raise InvalidInput(
                f"{target}: {key!r} must be a function, got {type(made[key]).__name__}"
            )
    batch = made.get("batch")
    loader = made.get("dataloader")
    if batch is None and loader is not None:
        try:
            batch = next(iter(loader))
        except Exception as exc:
            raise InvalidInput(f"{target}: its dataloader raised {one_line(exc)}") from None
    if batch is None:
        raise InvalidInput(f"{target} returned no 'batch' (and no 'dataloader' to take one from)")
    first = first_tensor(batch)
    samples = int(first.shape[0]) if first is not None and first.dim() else 1
    tokens = made.get("tokens_per_step")
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if tokens is None and isinstance(ids, torch.Tensor):
        tokens = ids.numel()
    opt = made.get("optimizer")
    return Workload(
        name=target,
        build=_mover(made["model"]),
        params=sum(p.numel() for p in made["model"].parameters()),
        batch=batch,
        loss_fn=made.get("loss_fn") or default_loss,
        make_optimizer=(lambda _m: opt) if opt is not None else _adamw,
        samples_per_step=samples,
        tokens_per_step=tokens,
        dataloader=loader,
        forward=made.get("forward"),
    )


def load_target(
    target: str, batch: int | None = None, seq: int | None = None, delay_s: float = 0.0
) -> Workload:
    """A Workload for a built-in name or 'module:callable' (see the module docstring)."""
    key = target.strip()
    low = key.lower()
    if batch is not None and batch < 1:
        raise InvalidInput(f"{argument('batch')} must be ≥ 1, got {batch}")
    if low.startswith("gpt:"):
        return _gpt(low, batch, seq, delay_s)
    if low.startswith("hf:"):
        return _hf(key, batch, seq, delay_s)
    if low == "mlp":
        return _mlp(batch, delay_s)
    if low == "cnn":
        return _cnn(batch, delay_s)
    if ":" not in key or low.startswith("custom:"):
        return _gpt(key, batch, seq, delay_s, cfg=_catalog_model(target, key))
    return _user(key, batch, seq)


def _hf(key: str, batch: int | None, seq: int | None, delay_s: float) -> Workload:
    """A Workload whose model is `AutoModelForCausalLM.from_config` of the config at `key`."""
    from ceiling.profile.hf_target import DEFAULT_SEQ, hf_forward, hf_loss, hf_model

    cfg, make = hf_model(key)
    # The same token batch as a catalog model's; labels are the inputs (the model shifts them)
    s = seq or min(cfg.max_seq, DEFAULT_SEQ)
    workload = _gpt(cfg.name, batch, s, delay_s, cfg=cfg)
    return dataclasses.replace(
        workload,
        build=lambda device, dtype: _on(device, make, device, dtype),
        loss_fn=hf_loss,
        forward=hf_forward,
    )


def _catalog_model(target: str, key: str):
    from ceiling.model.transformer import get_model, parse_model

    if key.lower().startswith("custom:"):
        return parse_model(key)
    try:
        return get_model(key)
    except UnknownName as exc:
        raise UnknownName(
            f"unknown target {target!r}; built-ins: {', '.join(BUILTINS)}, a catalog model "
            f"(`ceiling models`), or 'module:callable' ({exc})"
        ) from None
