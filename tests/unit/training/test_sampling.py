"""Batches are a pure function of (seed, step); ranks partition each global batch whatever the world size."""

from __future__ import annotations

import numpy as np
import pytest

from mlops_training import sampling


@pytest.mark.parametrize(("world", "accum"), [(1, 1), (2, 1), (2, 2), (4, 2)])
def test_rank_slices_partition_the_global_batch(world: int, accum: int) -> None:
    batch = np.arange(100, 116)  # 16 rows
    parts = [sampling.rank_slice(batch, m, r, world, accum) for m in range(accum) for r in range(world)]
    assert all(len(p) == 16 // (world * accum) for p in parts)
    assert sorted(np.concatenate(parts).tolist()) == list(range(100, 116))


def test_epoch_batches_cover_every_row_once_per_epoch_and_reshuffle() -> None:
    n, bs = 50, 10  # 5 steps per epoch
    epoch0 = np.concatenate([sampling.epoch_batch_indices(n, bs, s, seed=3) for s in range(5)])
    epoch1 = np.concatenate([sampling.epoch_batch_indices(n, bs, s, seed=3) for s in range(5, 10)])
    assert sorted(epoch0.tolist()) == list(range(50))
    assert sorted(epoch1.tolist()) == list(range(50))
    assert epoch0.tolist() != epoch1.tolist()


def test_same_seed_and_step_give_the_same_batch_other_seed_does_not() -> None:
    a = sampling.window_offsets(10_000, 64, 8, step=7, seed=1)
    assert a.tolist() == sampling.window_offsets(10_000, 64, 8, step=7, seed=1).tolist()
    assert a.tolist() != sampling.window_offsets(10_000, 64, 8, step=7, seed=2).tolist()
    assert a.max() <= 10_000 - 65


def test_batch_larger_than_data_is_refused_with_the_numbers() -> None:
    with pytest.raises(ValueError, match="batch_size 64 is larger than the 10 training rows"):
        sampling.epoch_batch_indices(10, 64, 0, seed=0)
