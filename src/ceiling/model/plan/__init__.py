"""The training planner: a plan's axes (`axes`), its validity rules (`rules`), what it costs
(`step`, from the terms in `costs`, `communication`, `pipeline`, `recompute`,
`eager_kernels`) and the search over every valid plan (`search`)."""
