"""A user's script with five mistakes a type checker catches before anything runs, each
a wrong keyword or a wrong type, marked in its comment (tests/test_typed_api.py)."""

import ceiling

ceiling.plan("llama-3-8b", 64, spce="h100-sxm")  # mistake: keyword, misspelt
ceiling.plan("llama-3-8b", gpus=64.5, spec="h100-sxm")  # mistake: type, a fraction of a GPU
ceiling.decode("llama-3-8b", spec="h100-sxm", batch="8")  # mistake: type, text for batch sizes
ceiling.serve("llama-3-8b", spec="h100-sxm", gpu=8)  # mistake: keyword, gpu for gpus
ceiling.amdahl(parallel="0.95")  # mistake: type, text for a fraction
