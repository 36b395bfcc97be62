"""The reproducibility gate's decisions on synthetic lineage: what it can verify, what it must refuse, and that
config and code are checked on every path. The re-run is a stand-in that records its calls and returns a
fixed hash, so each verdict follows from the lineage alone (the real re-runs are in
tests/integration/evaluation/test_trajectory.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlops_config import EvaluationConfig, PlatformConfig
from mlops_evaluation.runner import _rerun_and_compare
from mlops_evaluation.scorer import Scorer
from mlops_training import config_hash

W, W20, OTHER = "a" * 64, "b" * 64, "c" * 64


def _case(tmp_path: Path, lineage: dict[str, Any], *, weights: str = W, rerun_hash: str = W20,
          **section: Any) -> tuple[Any, list[int | None]]:
    recorded = PlatformConfig().model_dump(mode="json")
    lineage = {"steps": 40, "data_hash": "d", "git_commit": "unknown", "config_sha256": config_hash(
        PlatformConfig.model_validate(recorded)), "code_dirty_files": [], **lineage}
    calls: list[int | None] = []

    def rerun(doc: dict[str, Any], root: Path, max_steps: int | None) -> Any:
        calls.append(max_steps)
        return SimpleNamespace(weights_sha256=rerun_hash, data_hash="d", steps=max_steps, export_dir=str(tmp_path))

    scorer = Scorer("7", "run", {"weights_sha256": weights, "lineage": lineage}, None, tmp_path)  # type: ignore[arg-type]
    gate = _rerun_and_compare(scorer, recorded, lineage, int(lineage["steps"]), tmp_path,
                              EvaluationConfig(repro_steps=20, **section), rerun)
    return gate, calls


def test_a_run_without_the_hash_at_repro_steps_is_not_verifiable_and_fails(tmp_path: Path) -> None:
    """The old gate re-ran twice, compared the re-runs with each other and said "bit-identical weights"."""
    gate, calls = _case(tmp_path, {"trajectory": {"40": W}})
    assert not gate.passed and gate.reason.startswith("not verifiable"), gate.reason
    assert "no weights hash at step 20" in gate.reason and "evaluation.reproducibility: trajectory" in gate.reason
    assert "bit-identical" not in gate.reason and calls == []
    bare, calls = _case(tmp_path, {})  # trained before trajectories were recorded
    assert not bare.passed and "no weights trajectory" in bare.reason and calls == []
    assert bare.evidence["mode"] == "trajectory" and bare.evidence["verifiable"] is False


def test_determinism_only_is_an_opt_out_that_names_itself(tmp_path: Path) -> None:
    gate, calls = _case(tmp_path, {}, reproducibility="determinism_only")
    assert gate.passed, gate.reason
    assert calls == [20, 20]
    assert gate.reason.startswith("determinism only (evaluation.reproducibility: determinism_only)")
    assert "own weights were not re-derived" in gate.reason
    assert gate.evidence["mode"] == "determinism_only" and gate.evidence["verifiable"] is False


def test_config_and_code_are_checked_on_the_determinism_only_path(tmp_path: Path) -> None:
    """The old two-re-runs path skipped recorded_differences: a dirty or moved tree passed."""
    gate, calls = _case(tmp_path, {"git_commit": "0123456789ab" * 3}, reproducibility="determinism_only")
    assert not gate.passed and "code differs" in gate.reason and "0123456789ab" in gate.reason
    assert calls == []
    gate, calls = _case(tmp_path, {"config_sha256": "f" * 64}, reproducibility="determinism_only")
    assert not gate.passed and "config differs" in gate.reason and calls == []


def test_weights_that_are_not_the_end_of_their_trajectory_fail(tmp_path: Path) -> None:
    """The replay of step 20 matches the record, but the exported weights are not what step 40 recorded: the
    old gate replayed the prefix and passed whatever weights sat beside that lineage."""
    gate, calls = _case(tmp_path, {"trajectory": {"20": W20, "40": OTHER}}, weights=W)
    assert not gate.passed, gate.reason
    assert "exported weights (sha256 aaaaaaaaaaaa…) are not the end of its recorded trajectory" in gate.reason
    assert "step 40: cccccccccccc…" in gate.reason and calls == []
    short, calls = _case(tmp_path, {"steps": 20, "trajectory": {"20": OTHER}}, weights=W, rerun_hash=W)
    assert not short.passed and "not the end of its recorded trajectory" in short.reason and calls == []


@pytest.mark.parametrize("mode", ["trajectory", "determinism_only"])
def test_a_run_no_longer_than_repro_steps_is_rerun_whole_in_either_mode(tmp_path: Path, mode: str) -> None:
    gate, calls = _case(tmp_path, {"steps": 20, "trajectory": {"20": W}}, weights=W, rerun_hash=W,
                        reproducibility=mode)
    assert gate.passed and "bit-identical" in gate.reason and calls == [None], gate.reason
    assert gate.evidence["reproducibility"] == mode


def test_an_unknown_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="determinism_only"):
        EvaluationConfig(reproducibility="hash")  # type: ignore[arg-type]
