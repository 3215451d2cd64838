"""The same calls as mistakes.py, right: a type checker finds nothing (tests/test_typed_api.py)."""

import ceiling

plan = ceiling.plan("llama-3-8b", 64, spec="h100-sxm")
ceiling.plan("llama-3-8b", gpus=64, spec="h100-sxm")
decoded = ceiling.decode("llama-3-8b", spec="h100-sxm", batch=[8])
ceiling.serve("llama-3-8b", spec="h100-sxm", gpus=8)
speedup = ceiling.amdahl(parallel=0.95)
rows: list[dict] = plan.table()
print(plan.best.step_time_s, decoded.max_batch, rows, speedup.to_dict())
