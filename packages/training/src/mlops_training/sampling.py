"""Which examples a step trains on: a pure function of (seed, step), so the data position is the step.

The *global* batch of a step does not depend on the world size; each rank takes its slice of each
micro-batch. That is what makes resume bit-exact and a 2 → 1 rank resume train on the same data.
"""

from __future__ import annotations

import numpy as np


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def epoch_batch_indices(n: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """Global batch of ``step`` from a per-epoch permutation of ``n`` rows (the last partial batch is skipped
    within an epoch and comes first in no other; every epoch reshuffles)."""
    per_epoch = n // batch_size
    if per_epoch < 1:
        raise ValueError(f"batch_size {batch_size!r} is larger than the {n!r} training rows")
    epoch, k = divmod(step, per_epoch)
    perm = _rng(seed, 1, epoch).permutation(n)
    return perm[k * batch_size : (k + 1) * batch_size]


def window_offsets(n_tokens: int, seq_len: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """Start offsets of ``batch_size`` random windows of ``seq_len + 1`` tokens for ``step``."""
    high = n_tokens - seq_len - 1
    if high < 1:
        raise ValueError(f"corpus of {n_tokens!r} tokens is shorter than seq_len+1={seq_len + 1!r}")
    return _rng(seed, 2, step).integers(0, high, size=batch_size)


def rank_slice(global_batch: np.ndarray, micro: int, rank: int, world: int, accum: int) -> np.ndarray:
    """This rank's rows of micro-batch ``micro`` (of ``accum``) of a global batch split over ``world`` ranks."""
    per = len(global_batch) // (world * accum)
    start = (micro * world + rank) * per
    return global_batch[start : start + per]


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimizer steps in one pass over ``n`` rows."""
    return max(n // batch_size, 1)
