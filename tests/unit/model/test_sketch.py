"""The weights sketch (mlops_model.sketch): what the reproducibility gate compares within rtol on GPU.

Expected values are worked out by hand (a 3-4-5 norm, Cauchy-Schwarz bounds), never taken from the sketch."""

from __future__ import annotations

import math

import pytest
import torch

from mlops_model import compare_sketches, weights_sketch


def _state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"a.weight": torch.tensor([[3.0, 0.0], [0.0, 4.0]]), "b.bias": torch.randn(50, generator=gen),
            "zero": torch.zeros(3)}


def test_sketch_is_the_norm_then_bounded_projections_and_is_stable() -> None:
    state = _state()
    sketch = weights_sketch(state)
    assert sorted(sketch) == ["a.weight", "b.bias", "zero"]
    assert sketch["a.weight"][0] == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    assert sketch["zero"] == [0.0] * 5
    for name, values in sketch.items():
        assert len(values) == 5
        assert all(abs(p) <= values[0] * (1 + 1e-12) for p in values[1:]), name  # unit directions
    assert weights_sketch({k: v.clone() for k, v in state.items()}) == sketch  # same weights, same numbers
    assert weights_sketch({k: v.double() for k, v in state.items()}) == sketch  # dtype of the copy: irrelevant


def test_within_tolerance_passes() -> None:
    state = _state()
    nudged = dict(state, **{"b.bias": state["b.bias"] * (1 + 1e-6)})
    assert compare_sketches(weights_sketch(state), weights_sketch(nudged), rtol=1e-4) == []


def test_beyond_tolerance_fails_naming_the_tensor() -> None:
    state = _state()
    moved = dict(state, **{"a.weight": torch.tensor([[3.0, 0.0], [0.0, 4.1]])})  # norm 5 -> sqrt(9 + 16.81)
    problems = compare_sketches(weights_sketch(state), weights_sketch(moved), rtol=1e-3)
    assert len(problems) == 1
    assert problems[0].startswith("tensor 'a.weight': norm recorded 5, replayed 5.0803") and "rtol 0.001" in problems[0]
    assert math.isclose(math.hypot(3.0, 4.1), 5.080354, rel_tol=1e-6)


def test_a_permutation_keeps_the_norm_but_moves_a_projection() -> None:
    state = _state()
    permuted = dict(state, **{"b.bias": state["b.bias"].flip(0)})
    problems = compare_sketches(weights_sketch(state), weights_sketch(permuted), rtol=1e-3)
    assert len(problems) == 1 and problems[0].startswith("tensor 'b.bias': projection ")


def test_missing_or_extra_tensors_are_named() -> None:
    sketch = weights_sketch(_state())
    fewer = {k: v for k, v in sketch.items() if k != "zero"}
    assert compare_sketches(sketch, fewer, rtol=1e-3) == ["tensor 'zero' was recorded but the replay has none"]
    assert compare_sketches(fewer, sketch, rtol=1e-3) == ["tensor 'zero' is in the replay but was not recorded"]
    with pytest.raises(ValueError, match="rtol -1"):
        compare_sketches(sketch, sketch, rtol=-1)
