"""Seeding and determinism."""

from __future__ import annotations

import os
import random
import sys
from typing import Any


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
        _use_deterministic_algorithms(torch)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def _use_deterministic_algorithms(torch: Any) -> None:
    """``torch.use_deterministic_algorithms(True)``, without importing Inductor only to set its flag.

    The public call sets ``torch._inductor.config.deterministic`` and so imports Inductor (and Dynamo): about 1 s
    of CPU per process, more at exit, in every training worker, none of which compiles anything. Inductor reads
    the same flag from ``TORCHINDUCTOR_DETERMINISTIC`` when it is first imported, so setting that and the
    kernel switch leaves torch in the state the public call leaves it in; once Inductor is loaded, the public
    call is used.
    """
    set_kernels = getattr(torch._C, "_set_deterministic_algorithms", None)
    if "torch._inductor.config" in sys.modules or set_kernels is None:
        torch.use_deterministic_algorithms(True, warn_only=False)
        return
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    set_kernels(True, warn_only=False)
