"""The ingestion (validate, ``dvc add``, ``dvc push``, publish) and the Feast materialization SIGKILLed at a point
drawn from the seed, then run again (see tests/chaos/data_faults.py). ``make test`` runs one seed each
(``MLOPS_CHAOS_SEEDS``); ``benchmarks/chaos.py`` covers every kill point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .data_faults import ingest_fault, materialize_fault

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(900)]

SEEDS = [int(s) for s in os.environ.get("MLOPS_CHAOS_SEEDS", "1").split(",") if s.strip()]


def _check(rec: dict) -> None:
    assert rec["injected"], f"the fault did not hit: {rec}"
    assert rec["lost_rows"] == 0 and rec["survived"], rec


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_ingestion_publishes_no_torn_version_and_the_rerun_loses_no_row(
        seed: int, tmp_path: Path) -> None:
    _check(ingest_fault(seed, tmp_path))


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_materialization_leaves_a_usable_store_and_the_rerun_matches_an_uninterrupted_one(
        seed: int, tmp_path: Path) -> None:
    _check(materialize_fault(seed, tmp_path))
