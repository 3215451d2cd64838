"""Reproducibility: run one computation many times, on several thread counts, and compare.

Parallel code can be right ten times and wrong the eleventh: floating-point addition is
not associative, so a reduction whose order depends on thread timing, on the number of
threads or on the kernel's blocking gives results that differ in the last bits. This
module reruns a target and reports whether the outputs are bitwise identical, how far the
most distant one lies from the first, and whether torch.use_deterministic_algorithms
changes that.

Targets: "gpt[:preset]" (forward and backward of the built-in model: the loss and every
gradient), "reduction" (a float32 sum whose chunks are added in the order threads finish
them), "matmul" (torch.mm, blocked differently per thread count), or "module:callable"
returning an array, a tensor or a number.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ceiling.errors import InvalidInput
from ceiling.measure.deadline import DEFAULT_TIMEOUT_S, deadline

METHOD_VERSION = 1
BUILTIN = ("gpt", "reduction", "matmul")
REDUCTION_ELEMENTS = 2**21
REDUCTION_CHUNKS = 64


def _as_array(value: Any):
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise InvalidInput(f"the target must return numbers (an array or tensor), got {arr.dtype}")
    return np.ascontiguousarray(arr)


def _gpt(preset: str) -> Callable[[], Any]:
    import torch

    from ceiling.workloads.gpt import build_gpt

    model = build_gpt(preset, device="cpu", dtype=torch.float32, seed=0)
    vocab = model.transformer_config().vocab
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab, (2, 33), generator=gen)

    def run():
        model.zero_grad(set_to_none=True)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
        return torch.cat([loss.detach().reshape(1), *grads])

    return run


def _reduction(threads: Callable[[], int]) -> Callable[[], Any]:
    """Chunk sums added into one float32 total in the order the threads finish them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed

    import numpy as np

    data = np.random.default_rng(0).standard_normal(REDUCTION_ELEMENTS).astype(np.float32)
    chunks = np.array_split(data, REDUCTION_CHUNKS)
    lock = threading.Lock()

    def run():
        total = np.float32(0.0)
        with ThreadPoolExecutor(max_workers=threads()) as pool:
            futures = [pool.submit(np.sum, c, dtype=np.float32) for c in chunks]
            for f in as_completed(futures):
                with lock:
                    total = np.float32(total + f.result())
        return np.array([total], dtype=np.float32)

    return run


def _matmul() -> Callable[[], Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(384, 1536, generator=gen)
    b = torch.randn(1536, 384, generator=gen)
    return lambda: torch.mm(a, b)


def make_target(name: str, threads: Callable[[], int]) -> Callable[[], Any]:
    base, _, arg = name.partition(":")
    if base == "gpt":
        return _gpt(arg or "tiny")
    if name == "reduction":
        return _reduction(threads)
    if name == "matmul":
        return _matmul()
    if ":" in name:
        from ceiling import usercode

        return usercode.guarded(usercode.load_callable(name), name)
    raise InvalidInput(
        f"unknown target {name!r}; built in: gpt[:tiny|small], reduction, matmul, or your "
        "MODULE:CALLABLE (no arguments, returns an array, tensor or number)"
    )


def _digest(arr) -> str:
    return hashlib.sha256(arr.tobytes() + str(arr.shape).encode()).hexdigest()[:16]


def run_repeat(
    target: str,
    runs: int,
    thread_counts: list[int],
    *,
    check_deterministic: bool = True,
    on_run: Callable[[], None] | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Run `target` `runs` times per thread count (and again with deterministic algorithms).

    Returns, per (deterministic flag, thread count): the distinct output digests, whether
    the runs were bitwise identical, and the largest absolute and relative deviation from
    the very first output. Stopped with TimedOut after `timeout_s` (None: no deadline).
    """
    if runs < 2:
        raise InvalidInput(f"need at least 2 runs to compare, got {runs}")
    if not thread_counts or any(t < 1 for t in thread_counts):
        raise InvalidInput(f"thread counts must be at least 1, got {thread_counts}")
    # Imports before the clock starts: one cut short by the deadline would leave a half-made
    # module behind. torch's first use_deterministic_algorithms call imports its compiler.
    import numpy  # noqa: F401
    import torch

    torch.use_deterministic_algorithms(
        torch.are_deterministic_algorithms_enabled(),
        warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
    )

    with deadline(timeout_s, f"repeat {target}"):
        return _repeat(target, runs, thread_counts, check_deterministic, on_run)


def _repeat(target, runs, thread_counts, check_deterministic, on_run) -> dict[str, Any]:
    import numpy as np
    import torch

    current = {"threads": thread_counts[0]}
    fn = make_target(target, lambda: current["threads"])
    before_threads = torch.get_num_threads()
    before_det = torch.are_deterministic_algorithms_enabled()
    reference = None
    groups = []
    try:
        for det in (False, True) if check_deterministic else (False,):
            torch.use_deterministic_algorithms(det)
            for t in thread_counts:
                current["threads"] = t
                torch.set_num_threads(t)
                digests, max_abs = [], 0.0
                for _ in range(runs):
                    out = _as_array(fn())
                    if reference is None:
                        reference = out.copy()
                    if out.shape != reference.shape:
                        raise InvalidInput(
                            f"the target returned shape {out.shape}, then {reference.shape}"
                        )
                    digests.append(_digest(out))
                    diff = np.abs(out.astype(np.float64) - reference.astype(np.float64))
                    max_abs = max(max_abs, float(diff.max()) if diff.size else 0.0)
                    if on_run is not None:
                        on_run()
                scale = float(np.abs(reference.astype(np.float64)).max()) if reference.size else 0
                groups.append(
                    {
                        "deterministic_algorithms": det,
                        "threads": t,
                        "runs": runs,
                        "distinct_results": len(set(digests)),
                        "identical_across_runs": len(set(digests)) == 1,
                        "matches_first_result": set(digests) == {_digest(reference)},
                        "max_abs_deviation": max_abs,
                        "max_rel_deviation": max_abs / scale if scale > 0 else 0.0,
                        "digests": sorted(set(digests)),
                    }
                )
    finally:
        torch.set_num_threads(before_threads)
        torch.use_deterministic_algorithms(before_det)
    return {
        "method_version": METHOD_VERSION,
        "target": target,
        "runs": runs,
        "thread_counts": list(thread_counts),
        "dtype": str(reference.dtype),
        "shape": list(reference.shape),
        "torch": torch.__version__,
        "groups": groups,
    }


def verdict(raw: dict[str, Any]) -> list[str]:
    """Plain-language findings."""
    plain = [g for g in raw["groups"] if not g["deterministic_algorithms"]]
    det = [g for g in raw["groups"] if g["deterministic_algorithms"]]
    lines = []
    all_same = all(g["matches_first_result"] for g in plain)
    if all_same:
        lines.append(
            f"bitwise identical: all {raw['runs']} runs at every thread count "
            f"({', '.join(map(str, raw['thread_counts']))}) gave the same bits."
        )
    else:
        unstable = [g["threads"] for g in plain if not g["identical_across_runs"]]
        if unstable:
            lines.append(
                "not reproducible run to run at "
                + ", ".join(f"{t} thread(s)" for t in unstable)
                + ": the result depends on timing (a reduction whose order changes)."
            )
        shifted = [
            g["threads"]
            for g in plain
            if g["identical_across_runs"] and not g["matches_first_result"]
        ]
        if shifted:
            lines.append(
                "reproducible at a fixed thread count, but a different result at "
                + ", ".join(f"{t} thread(s)" for t in shifted)
                + " than at the first: the summation order follows the thread count."
            )
        worst = max(plain, key=lambda g: g["max_abs_deviation"])
        lines.append(
            f"largest deviation from the first result: {worst['max_abs_deviation']:.3g} "
            f"absolute, {worst['max_rel_deviation']:.3g} relative to its largest value."
        )
    if det:
        det_same = all(g["identical_across_runs"] for g in det)
        plain_same = all(g["identical_across_runs"] for g in plain)
        if det_same and not plain_same:
            lines.append("torch.use_deterministic_algorithms(True) made every run identical.")
        elif not det_same and not plain_same:
            lines.append(
                "torch.use_deterministic_algorithms(True) did not help: the varying order is "
                "in the program's own threads, not in torch's kernels."
            )
        else:
            lines.append(
                "torch.use_deterministic_algorithms(True) changed nothing here (runs were "
                "already identical at a fixed thread count)."
            )
    return lines
