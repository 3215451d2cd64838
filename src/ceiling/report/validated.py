"""How far each model's predictions have been from published runs: the one home of these
figures. tests/test_report_validated.py recomputes each from the validation tests' cases
(the same rows those tests check), so a model change that moves them fails there until
they are updated here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ValidatedError:
    what: str
    median_abs_error: float  # median over the runs of |predicted / published − 1|
    runs: int
    source: str

    def line(self) -> str:
        """`planner: median error 6 % on 10 published runs`."""
        return (
            f"{self.what}: median error {self.median_abs_error * 100:.0f} % on {self.runs} "
            f"published runs ({self.source})"
        )

    def short(self) -> str:
        return f"±{self.median_abs_error * 100:.0f} % (median, {self.runs} runs)"


# the planner at published layouts: hardware TFLOP/s per GPU of the 10 rows of Narayanan et al.
# 2021 Table 1 (tests/test_parallel.py: NARAYANAN and NARAYANAN_OTHER_ROWS) and the step time or
# tokens/s of the 7 recent public runs (BLOOM, LLaMA-65B, NeMo GPT-3 BF16/FP8 and Llama 3.1,
# MPT-70B, torchtitan; tests/test_plan_validation_v2.py: CASES), misses included
PLANNER = ValidatedError(
    "planner", 0.023, 17, "Megatron-LM, BLOOM, LLaMA, NeMo, MosaicML and torchtitan runs"
)

# expected batch-1 decode tokens/s, gpt-fast README (tests/test_decode_expected.py: PUBLISHED)
DECODE_EXPECTED = ValidatedError("expected decode", 0.089, 3, "gpt-fast")

# simulated serving against published runs (tests/serving_cases.py: CASES): output tokens/s
# of TensorRT-LLM, SGLang and NIM runs, and their TTFT, TPOT and end-to-end latencies
SERVING_THROUGHPUT = ValidatedError(
    "serving throughput", 0.144, 9, "TensorRT-LLM, SGLang and NIM runs"
)
SERVING_LATENCY = ValidatedError(
    "serving latency (TTFT, TPOT, E2E)", 0.213, 17, "SGLang, NIM and vLLM runs"
)

# the decode ceiling is a bound, not a prediction: it must stay above every published run
DECODE_CEILING_NOTE = "a bound: above all 3 published gpt-fast runs"
