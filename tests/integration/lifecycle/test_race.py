"""Promotions racing from separate processes: one linear ledger, one champion, no half-applied state.

Runs on the local profile's backend (MLflow on SQLite) and on a real ``mlflow server`` on PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import lifecycle
from mlops_core.ledger import LedgerEntry, load_entries
from tests.support.barrier import release_when_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKER = Path(__file__).with_name("race_worker.py")
PREV = {"staging": "candidate", "canary": "staging", "champion": "canary"}


def _expected_after(e: LedgerEntry) -> dict[str, str]:
    """The lifecycle rules restated by hand, to check each recorded move against."""
    state = dict(e.aliases_before)
    if e.action == "rollback":
        assert state["fallback"] == e.version
        del state["fallback"]
        state["champion"] = e.version
        return state
    if e.to_alias != "candidate":
        assert state[PREV[e.to_alias]] == e.version, f"#{e.seq} skipped a step"
        del state[PREV[e.to_alias]]
    if e.to_alias == "champion" and "champion" in e.aliases_before:
        state["fallback"] = e.aliases_before["champion"]
    if e.to_alias == "champion" and state.get("fallback") == e.version:
        del state["fallback"]
    state[e.to_alias] = e.version
    return state


def _register(tracking: TrackingConfig, root: Path, n: int) -> None:
    from mlops_core import mlflow_client

    client = mlflow_client(tracking, root)
    client.create_registered_model("fraud")
    for _ in range(n):
        run = client.create_run("0")
        client.create_model_version("fraud", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)


def _race(uri: str, root: Path, workers: int, rounds: int) -> None:
    tracking = TrackingConfig(uri=uri, artifact_location=str(root / "artifacts"))
    _register(tracking, root, workers)
    barrier = root / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), uri, str(root), str(v), str(rounds), str(barrier)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for v in range(1, workers + 1)
    ]
    release_when_ready(barrier, procs)  # a fixed 6 s head start lost the race to slow imports on a loaded runner
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))

    from mlops_core import mlflow_client

    client = mlflow_client(tracking, root)
    entries = load_entries(client, "fraud")
    written = sorted(s for r in results for s in r["written"])
    # Every move a process was told succeeded is in the ledger exactly once, and nothing else is.
    assert written == [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert len(written) >= workers * 2, f"too few moves succeeded to call it a race: {results}"
    assert sum(r["refused"] for r in results) > 0, "no process was ever refused: the workers did not overlap"
    assert len({e.actor for e in entries}) >= 2
    state: dict[str, str] = {}
    for e in entries:
        assert e.status == "applied", f"#{e.seq} left {e.status}"
        assert e.aliases_before == state, f"#{e.seq} did not start where #{e.seq - 1} ended: lost update"
        assert e.aliases_after == _expected_after(e), f"#{e.seq} moved aliases against the rules"
        assert "champion" not in e.aliases_after or e.aliases_after["champion"] != e.aliases_after.get("fallback")
        state = e.aliases_after
    assert lifecycle.aliases(tracking, root, "fraud") == state  # the registry agrees with the ledger's end
    assert not [m for m in client.search_registered_models() if m.name.endswith(".lifecycle-lock")]


def test_racing_processes_on_sqlite(tmp_path: Path) -> None:
    _race(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path, workers=3, rounds=3)


def test_racing_processes_on_mlflow_server_postgres(mlflow_server_pg: str, tmp_path: Path) -> None:
    _race(mlflow_server_pg, tmp_path, workers=3, rounds=2)
