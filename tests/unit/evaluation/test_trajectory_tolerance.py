"""The trajectory check on GPU compares the recorded weights sketch within evaluation.repro_gpu_rtol; on CPU it
stays bit-exact. The replay is a hand-built result (weights chosen here), the recorded run a real git checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mlops_config import load_config
from mlops_evaluation import check_trajectory
from mlops_model import weights_sketch
from mlops_training import config_hash

REPO = Path(__file__).resolve().parents[3]


def _state(scale: float = 1.0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {"0.weight": torch.randn(8, 4, generator=gen) * scale, "0.bias": torch.randn(8, generator=gen)}


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "recipe.txt").write_text("as committed\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "recorded"]):
        subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                       capture_output=True)
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    cfg = load_config(config_dir=REPO / "configs", environ={}).config
    lineage = {"config_sha256": config_hash(cfg), "git_commit": head, "code_dirty_files": [], "data_hash": "d" * 64,
               "steps": 20, "trajectory": {"5": "a" * 64, "20": "b" * 64},
               "trajectory_sketch": {"5": weights_sketch(_state())}}
    return root, lineage, cfg.model_dump(mode="json")


def _replay(state: dict[str, torch.Tensor]) -> Any:
    # a GPU replay: its bits (and so its hash) differ from the record's whatever the weights
    return lambda doc, root, n: SimpleNamespace(weights_sha256="c" * 64, data_hash="d" * 64, steps=5,
                                                trajectory_sketch={"5": weights_sketch(state)})


def test_gpu_replay_within_rtol_passes(recorded: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    root, lineage, doc = recorded
    nudged = {k: v * (1 + 1e-6) for k, v in _state().items()}
    gate = check_trajectory("3", lineage, doc, root, 5, _replay(nudged), device="cuda", rtol=1e-3)
    assert gate.passed, gate.reason
    assert "within rtol 0.001" in gate.reason and gate.evidence["comparison"] == "sketch"


def test_gpu_replay_beyond_rtol_fails_naming_the_tensor(recorded: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    root, lineage, doc = recorded
    moved = dict(_state(), **{"0.weight": _state()["0.weight"] * 1.01})  # 1% off: 10x the tolerance
    gate = check_trajectory("3", lineage, doc, root, 5, _replay(moved), device="cuda", rtol=1e-3)
    assert not gate.passed
    assert "beyond rtol 0.001" in gate.reason and "tensor '0.weight'" in gate.reason
    assert "'0.bias'" not in gate.reason


def test_cpu_stays_bit_exact_even_with_a_tolerance(recorded: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    root, lineage, doc = recorded
    gate = check_trajectory("3", lineage, doc, root, 5, _replay(_state()), device="cpu", rtol=1e-3)
    assert not gate.passed and "bit for bit" not in gate.reason and "weights differ at step 5 on cpu" in gate.reason


def test_a_gpu_record_without_a_sketch_is_compared_by_hash(recorded: tuple[Path, dict[str, Any], dict[str, Any]]
                                                           ) -> None:
    root, lineage, doc = recorded
    lineage = {k: v for k, v in lineage.items() if k != "trajectory_sketch"}
    gate = check_trajectory("3", lineage, doc, root, 5, _replay(_state()), device="cuda", rtol=1e-3)
    assert not gate.passed and "weights differ at step 5 on cuda" in gate.reason
