"""How far each model's predictions have been from published runs, as the report prints them
beside modelled figures: the leave-one-source-out bands of the validation corpus
(`ceiling validate`, shipped and read by `ceiling.api.bands`), one regime family each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ValidatedError:
    what: str
    median_abs_error: float  # median over the runs of |predicted / published − 1|, held out
    runs: int
    source: str

    def line(self) -> str:
        """`planner: median error 6 % on 150 published runs (…)`."""
        return (
            f"{self.what}: median error {self.median_abs_error * 100:.0f} % on {self.runs} "
            f"published runs ({self.source})"
        )

    def short(self) -> str:
        return f"±{self.median_abs_error * 100:.0f} % (median, {self.runs} runs)"


def of(base: str, what: str) -> ValidatedError:
    """The validated error of a regime family (`model.accuracy` base) over the whole corpus."""
    from ceiling.api.bands import shipped_band

    b = shipped_band(base)
    return ValidatedError(
        what,
        b.median_abs_error if b.median_abs_error is not None else float("nan"),
        b.cases,
        f"{b.sources} sources, each scored leave-one-source-out",
    )


def ceiling_note() -> str:
    """The decode ceiling is a bound, not a prediction: how many published runs it is above."""
    from ceiling.api.bands import shipped_rows

    ceiling = [r for r in shipped_rows() if r["regime"] == "decode ceiling"]
    # errors are predicted/published − 1 of tokens/s, or of a step's time (ms per token)
    above = sum(1 for r in ceiling if (r["error"] > 0) == (r["metric"] == "tokens_per_s"))
    return f"a bound: above {above} of {len(ceiling)} published decode runs"


PLANNER = of("training", "planner")
DECODE_EXPECTED = of("decode expected", "expected decode")
SERVING_THROUGHPUT = of("serving throughput", "serving throughput")
SERVING_LATENCY = of("serving latency", "serving latency (TTFT, TPOT, E2E)")
DECODE_CEILING_NOTE = ceiling_note()
