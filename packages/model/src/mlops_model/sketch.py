"""A weights sketch: a few numbers per tensor that can be compared within a tolerance, where a hash cannot.

On CPU the reproducibility gate needs the replayed weights bit for bit (SHA-256). On GPU, kernels that
reduce in a different order (atomics in cuBLAS/cuDNN backward passes) make two honest runs differ in the last
bits, so a hash says nothing there. Training therefore also records, at each trajectory step, this sketch:
per tensor its L2 norm and its projections on ``PROJECTIONS`` fixed pseudo-random unit directions (seeded by
the tensor's name, drawn in fixed-size chunks, so the same weights always give the same sketch whatever the
device). A replay within tolerance matches every number; weights from another recipe do not, even when they
keep each tensor's norm (a permutation moves the projections).

The comparison scales by the tensor: ``|recorded - replayed| <= rtol * max(norm_recorded, norm_replayed)``.
A unit direction's projection is at most the norm (Cauchy-Schwarz), so this is a relative tolerance on the
tensor as a whole; per-value relative tolerances would fail on projections that happen to be near zero.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PROJECTIONS = 4
"""Projections per tensor (besides its norm)."""
_CHUNK = 1 << 20
"""Elements per draw of a direction: bounds memory for large tensors; fixed, so sketches are reproducible."""

Sketch = dict[str, list[float]]
"""Tensor name → ``[norm, projection 0, …, projection PROJECTIONS-1]``."""


def _seed(name: str, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{name}\0{index}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def weights_sketch(state: Mapping[str, torch.Tensor], *, projections: int = PROJECTIONS) -> Sketch:
    """The sketch of a state dict (computed in float64 on CPU; DTensors must be gathered first)."""
    import torch

    out: Sketch = {}
    for name in sorted(state):
        flat = state[name].detach().to(device="cpu", dtype=torch.float64).reshape(-1)
        values = [float(torch.linalg.vector_norm(flat))]
        for index in range(projections):
            gen = torch.Generator().manual_seed(_seed(name, index))
            dot = torch.zeros((), dtype=torch.float64)
            square = torch.zeros((), dtype=torch.float64)
            for start in range(0, flat.numel(), _CHUNK):
                part = flat[start : start + _CHUNK]
                direction = torch.randn(part.numel(), generator=gen, dtype=torch.float64)
                dot += direction @ part
                square += direction @ direction
            values.append(float(dot / square.sqrt()) if square > 0 else 0.0)
        out[name] = values
    return out


def compare_sketches(recorded: Mapping[str, list[float]], replayed: Mapping[str, list[float]],
                     rtol: float) -> list[str]:
    """Differences beyond ``rtol`` (scaled by each tensor's norm), one sentence per tensor; empty when they agree.

    Raises:
        ValueError: ``rtol`` is negative.
    """
    if rtol < 0:
        raise ValueError(f"rtol {rtol!r} must be >= 0")
    missing, extra = sorted(set(recorded) - set(replayed)), sorted(set(replayed) - set(recorded))
    problems = [f"tensor {name!r} was recorded but the replay has none" for name in missing]
    problems += [f"tensor {name!r} is in the replay but was not recorded" for name in extra]
    for name in sorted(set(recorded) & set(replayed)):
        want, got = list(recorded[name]), list(replayed[name])
        if len(want) != len(got):
            problems.append(f"tensor {name!r}: recorded {len(want)} sketch values, the replay {len(got)}")
            continue
        scale = max(abs(want[0]), abs(got[0]))
        for index, (a, b) in enumerate(zip(want, got, strict=True)):
            if abs(a - b) > rtol * scale:
                what = "norm" if index == 0 else f"projection {index - 1}"
                problems.append(f"tensor {name!r}: {what} recorded {a:.9g}, replayed {b:.9g} (|diff| {abs(a - b):.3g} "
                                f"> rtol {rtol:g} x norm {scale:.6g})")
                break
    return problems
