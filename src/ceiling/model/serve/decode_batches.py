"""What one run's requests tell of the batch: each request's TPOT against the sequences that
decoded beside it, which separates an iteration's fixed time from its time per sequence.

A request r decodes from its first token (f_r) to its end (e_r), s_r = tokens − 1 steps.
Sequences decoding at time t: n(t) = #{j : f_j ≤ t < e_j}; over r's decode their mean is
n̄_r (r itself included). If an iteration of n decoding sequences takes a + b·n,

    TPOT_r = (e_r − f_r) / s_r ≈ a + b·n̄_r

(each step of r is one iteration; the mean of n over its steps is taken as its mean over
time). The prompts prefilled meanwhile lengthen some of r's iterations: they come with the
arrivals that also raise n̄, so their time is shared between a and b as the load shares it
(what predicts another load of the same workload; the simulation's requests, read the same
way, are matched to these figures by `calibrate`).

Fitted over the requests by least squares weighted by s_r (a request of more steps averages
more iterations), robust to the odd request the host stalled (scipy's soft-L1 loss, its
scale the residuals' median absolute deviation); the standard errors are the weighted least
squares' at the fitted costs. One load holds a range of n̄ as its arrivals bunch and thin;
when that range is too narrow for the slope to be told from the fixed time (`separable`),
the time per sequence is left unfitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_REQUESTS = 8
MIN_SPREAD = 0.5  # sequences between the 10th and 90th percentile of n̄
MAX_SPREAD_ERROR = 0.25  # the slope's error over the spread, as a share of the mean TPOT


@dataclass(frozen=True)
class DecodeBatches:
    """The costs of an iteration told apart by one run's requests (seconds), with their
    standard errors, and the range of sequences decoding that the run held."""

    per_iteration_s: float  # a: an iteration of no sequence decoding (the fixed time)
    per_sequence_s: float  # b: what each sequence decoding adds to an iteration
    errors_s: tuple[float, float]  # standard errors of a and b
    concurrency: tuple[float, float]  # 10th and 90th percentile of n̄ over the requests
    requests: int
    mean_tpot_s: float

    @property
    def separable(self) -> bool:
        """Whether the run's range of batches tells the time per sequence from the fixed
        time: a spread of n̄ of `MIN_SPREAD` sequences or more, over which the slope's error
        moves TPOT by at most `MAX_SPREAD_ERROR` of its mean."""
        lo, hi = self.concurrency
        spread = hi - lo
        return (self.requests >= MIN_REQUESTS and spread >= MIN_SPREAD
                and self.errors_s[1] * spread <= MAX_SPREAD_ERROR * self.mean_tpot_s)  # fmt: skip

    def tpot_s(self, concurrency: float) -> float:
        """TPOT at `concurrency` sequences decoding and no prefill beside them."""
        return self.per_iteration_s + self.per_sequence_s * concurrency

    def to_json(self) -> dict:
        return {
            "per_iteration_s": self.per_iteration_s,
            "per_sequence_s": self.per_sequence_s,
            "errors_s": list(self.errors_s),
            "concurrency": list(self.concurrency),
            "requests": self.requests,
            "separable": self.separable,
        }


def beside(first, end) -> np.ndarray:
    """Per request, the mean number of sequences decoding over its decode (itself included);
    `first`, `end`: its first token's and its end's times (seconds)."""
    first, end = np.asarray(first, dtype=float), np.asarray(end, dtype=float)
    cuts = np.unique(np.concatenate([first, end]))
    # sequences decoding on each segment [cuts[i], cuts[i+1]) and the area up to each cut
    starts = np.searchsorted(np.sort(first), cuts[:-1], side="right")
    ends = np.searchsorted(np.sort(end), cuts[:-1], side="right")
    area = np.concatenate([[0.0], np.cumsum((starts - ends) * np.diff(cuts))])
    length = end - first
    inside = np.interp(end, cuts, area) - np.interp(first, cuts, area)
    return np.where(length > 0, inside / np.where(length > 0, length, 1.0), 1.0)


def decode_batches(first, end, tokens, n_bar=None) -> DecodeBatches | None:
    """The fit of the module's docstring over requests given by their first-token and end
    times (seconds, one clock) and output tokens (`n_bar`: their `beside`, when the requests
    ran on several engines); None with fewer than `MIN_REQUESTS` requests of two tokens or
    more."""
    from scipy.optimize import least_squares

    first, end, tokens = (np.asarray(x, dtype=float) for x in (first, end, tokens))
    if len(first) < MIN_REQUESTS:
        return None
    n_bar = beside(first, end) if n_bar is None else np.asarray(n_bar, dtype=float)
    keep = (tokens > 1) & (end > first)
    if keep.sum() < MIN_REQUESTS:
        return None
    steps = tokens[keep] - 1
    tpot = (end[keep] - first[keep]) / steps
    x = np.column_stack([np.ones_like(tpot), n_bar[keep]])
    w = np.sqrt(steps)
    scale = float(np.median(tpot))
    ols = np.linalg.lstsq(x * w[:, None], tpot * w, rcond=None)[0]
    spread = 1.4826 * float(np.median(np.abs((x @ ols - tpot) * w / scale)))  # robust σ
    sol = least_squares(lambda c: (x @ c - tpot) * w / scale, ols, loss="soft_l1",
                        f_scale=max(spread, 1e-6))  # fmt: skip
    resid = (x @ sol.x - tpot) * w
    dof = max(len(tpot) - 2, 1)
    cov = np.linalg.pinv((x * w[:, None]).T @ (x * w[:, None])) * float(resid @ resid) / dof
    lo, hi = np.percentile(n_bar[keep], [10, 90])
    return DecodeBatches(*(float(v) for v in sol.x), tuple(float(v) for v in np.sqrt(np.diag(cov))),
                         (float(lo), float(hi)), int(keep.sum()), float(np.mean(tpot)))  # fmt: skip
