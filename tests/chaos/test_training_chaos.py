"""A training run (``mlops train run``, torchrun with real workers) SIGKILLed at a drawn checkpoint, while it is
being written or just after, then run again: no worker outlives the kill, and the rerun resumes from a complete
checkpoint and ends bit-identical to an uninterrupted run (``harness.training_fault``). ``make test`` runs one
kind per seed (seed 1: the launcher alone, whose workers must not be orphaned); ``benchmarks/chaos.py
--training`` runs all three kinds (one rank, the launcher, the whole process group) per seed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .harness import run_training

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(1200)]

SEEDS = [int(s) for s in os.environ.get("MLOPS_CHAOS_SEEDS", "1").split(",") if s.strip()]
KINDS = ("launcher", "group", "rank")


def test_sigkill_of_a_training_run_leaves_no_worker_and_the_rerun_is_bit_identical(tmp_path: Path) -> None:
    kinds = tuple(dict.fromkeys(KINDS[(s - 1) % len(KINDS)] for s in SEEDS))
    for rec in run_training(SEEDS[:1], tmp_path, kinds=kinds):
        assert rec["injected"], f"the kill did not hit: {rec}"
        assert rec["survived"], rec
