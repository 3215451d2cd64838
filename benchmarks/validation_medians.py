"""Every published run of the planner's validation set, predicted against published, with the
sign of each error and the medians: over the mixture-of-experts and long-context cases
(tests/test_plan_validation_moe.py) and over all of them with the dense runs
(tests/test_plan_validation_v2.py). Errors are predicted/published - 1: + the prediction above the
published figure (a longer step time, or more tokens/s where the figure is a rate).

Run: PYTHONPATH=src:tests .venv/bin/python benchmarks/validation_medians.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_plan_validation_moe as moe
import test_plan_validation_v2 as dense


def show(title: str, rows) -> None:
    print(title)
    for name, predicted, published, error in rows:
        sign = "above" if error > 0 else "below"
        print(
            f"  {name:44s} predicted {predicted:10.4g}  published {published:10.4g}  "
            f"{error:+7.1%}  (predicted {sign} published)"
        )
    print(f"  median |error| {statistics.median(abs(r[3]) for r in rows):.1%} over {len(rows)}")


if __name__ == "__main__":
    moe_rows, dense_rows = moe.validation_rows(), dense.validation_rows()
    skipped = [name for name, *_ in moe.CASES if name not in {r[0] for r in moe_rows}]
    show("Mixture-of-experts and long-context runs (step time, s)", moe_rows)
    if skipped:
        print(f"  not run yet: {', '.join(skipped)} (needs MLA model fields)")
    show("Dense runs (step time s, or tokens/s per GPU)", dense_rows)
    every = moe_rows + dense_rows
    print(
        f"median |error| over all {len(every)}: {statistics.median(abs(r[3]) for r in every):.1%}"
    )
