"""The training planner.

- `axes`: the `Plan` and its axes, each declared once (`Axis` on each field);
- `rules`: what a plan's axes must divide, with the arithmetic;
- `layout`: the plans of one pass as arrays (`Layout`), what every term reads;
- `memory`, `compute`, `communication`, `pipeline`: the terms of each group, per-piece
  formulas in `costs`, `recompute` (policies) and `eager_kernels`; `moe` (experts' terms),
  `attention_kernels` (fused attention's rates) and `host` (kernels a layer launches, and the
  time the GPU waits for them when a layer is host-bound);
- `step`: the `Job`, the terms combined into memory and step time, a plan's `PlanEstimate`;
- `search`: every valid plan enumerated, evaluated and ranked; `grid`: its plans evaluated
  as grids, each term over the axes it reads;
- `training`: the one call `ceiling plan`, `ceiling.plan()` and the report make.
"""
