"""The chaos suite: faults injected at points drawn from seeds, against real processes and servers.

``make test`` runs one seed per scenario (``MLOPS_CHAOS_SEEDS``, default ``1``, e.g. ``1,2,3``);
``benchmarks/chaos.py`` runs many and prints the figures. Each scenario's record says whether the fault really
hit, what survived and what was lost (see tests/chaos/harness.py); any loss or unrecovered state fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .harness import gate_fault, prediction_log_fault, redis_fault, registry_fault

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(900)]

SEEDS = [int(s) for s in os.environ.get("MLOPS_CHAOS_SEEDS", "1").split(",") if s.strip()]


def _check(rec: dict) -> None:
    assert rec["injected"], f"the fault did not hit: {rec}"
    assert rec["lost_rows"] == 0 and rec["lost_versions"] == 0, rec
    assert rec["survived"], rec


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["promote", "rollback"])
def test_sigkill_during_a_registry_move_leaves_one_champion_and_a_ledger_that_explains_it(
        op: str, seed: int, tmp_path: Path) -> None:
    _check(registry_fault(op, seed, tmp_path))


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_validation_shows_no_torn_file_and_loses_no_row(seed: int, tmp_path: Path) -> None:
    _check(gate_fault(seed, tmp_path))


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_a_prediction_log_flush_keeps_every_acknowledged_row(seed: int, tmp_path: Path) -> None:
    _check(prediction_log_fault(seed, tmp_path))


@pytest.mark.parametrize("seed", SEEDS)
def test_online_store_killed_under_load_degrades_recovers_and_loses_nothing(seed: int, tmp_path: Path) -> None:
    _check(redis_fault(seed, tmp_path))
