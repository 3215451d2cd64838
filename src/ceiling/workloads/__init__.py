"""Real PyTorch workloads (import torch when imported): ceiling.workloads.gpt."""
