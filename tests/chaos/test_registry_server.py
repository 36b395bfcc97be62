"""Registry moves through a real ``mlflow server`` on PostgreSQL while PostgreSQL crashes, or the server is
SIGKILLed, right after a drawn registry write (see tests/chaos/registry_server.py). ``make test`` runs one seed of
two scenarios (a database crash mid-promotion, a server kill mid-rollback); ``benchmarks/chaos.py`` runs all four
over more seeds (``--server-seeds``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .registry_server import RegistryBackend, restart_fault

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(900)]

SEEDS = [int(s) for s in os.environ.get("MLOPS_CHAOS_SEEDS", "1").split(",") if s.strip()]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryBackend]:
    own = RegistryBackend(tmp_path_factory.mktemp("registry-backend"))
    try:
        yield own
    finally:
        own.close()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("dependency", "op"), [("postgres", "promote"), ("mlflow", "rollback")])
def test_a_dependency_restarted_mid_move_leaves_one_champion_and_a_ledger_that_explains_it(
        backend: RegistryBackend, dependency: str, op: str, seed: int, tmp_path: Path) -> None:
    rec = restart_fault(backend, dependency, op, seed, tmp_path)
    assert rec["injected"], f"the restart did not hit the move: {rec}"
    assert rec["lost_versions"] == 0 and rec["survived"], rec
