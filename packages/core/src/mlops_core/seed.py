"""Seeding and determinism."""

from __future__ import annotations

import os
import random


def seed_everything(seed: int, *, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch (when installed); with ``deterministic``, force deterministic kernels.

    On CPU this makes the same seed give bit-identical weights; on CUDA it also sets the cuBLAS workspace
    so ``torch.use_deterministic_algorithms`` does not raise.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed {seed!r} must be a non-negative int")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional for this helper
        pass
    else:
        np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
