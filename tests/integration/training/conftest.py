"""Helpers for the training integration tests: a tiny LLaMA config in a temp repo root per module, the
uninterrupted run that the resume and launch-fault tests compare theirs with, and the fraud run that test_lineage
and test_calibration each check, both trained once per test run."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlops_config import PlatformConfig, load_config
from mlops_training import TrainResult
from tests.support.session_world import build_once

TINY = (
    "training.batch_size=16",
    "training.eval_every=0",
    "training.warmup_steps=2",
    "training.causal_lm.corpus_max_bytes=300000",
    "training.causal_lm.seq_len=64",
)
STRAIGHT_STEPS = ("training.max_steps=40", "training.checkpoint.every_steps=8")
"""The steps of the straight run (:func:`straight_tiny_lm`): 40, a checkpoint every 8."""
FRAUD = ("data.rows=20000", "training.max_steps=60", "training.eval_every=20", "training.checkpoint.every_steps=30")
"""The fraud run of :func:`trained_fraud`: the prepared 20,000 rows, 60 steps, the default calibration (platt)."""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    """A temp repo root with a copy of configs/; checkpoints, exports and MLflow land under it."""
    base = tmp_path_factory.mktemp("repo")
    shutil.copytree(repo_root / "configs", base / "configs")
    return base


@pytest.fixture(scope="module")
def tiny_lm(root: Path) -> Callable[..., PlatformConfig]:
    """``tiny_lm("training.max_steps=6", ...)``: the llm-tiny config plus overrides."""

    def make(*sets: str) -> PlatformConfig:
        return load_config(model="llm-tiny", config_dir=root / "configs", overrides=[*TINY, *sets],
                           environ={}).config

    return make


def history(run_dir: Path, name: str) -> list[float]:
    """Values of metric ``name`` recorded in the run's newest checkpoint."""
    import json

    newest = sorted(run_dir.glob("step_*"))[-1]
    return [v for _, v in json.loads((newest / "trainer_state.json").read_text())["history"][name]]


@pytest.fixture(scope="session")
def straight_tiny_lm(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> TrainResult:
    """The llm-tiny run of ``TINY + STRAIGHT_STEPS`` on two ranks, uninterrupted: what test_resume and
    test_launch_faults each trained for themselves, with the same config, as the bit-identical reference of their
    killed and resumed runs (a run's weights depend on its config and code, not on its name or folder). Built once
    per test run (tests/support/session_world) in a repo root of its own; read-only: a module that resumes from its
    checkpoints copies them (:func:`copy_straight`)."""
    from mlops_training import launch

    def build(folder: Path) -> None:
        shutil.copytree(repo_root / "configs", folder / "configs")
        config = load_config(model="llm-tiny", config_dir=folder / "configs", overrides=[*TINY, *STRAIGHT_STEPS],
                             environ={}).config
        result = launch(config, folder, run_name="straight", track=False)
        assert result is not None and result.resumed_from_step is None and result.steps == 40

    run_dir = build_once(tmp_path_factory, "llm-tiny-straight", build) / ".mlops/checkpoints/straight"
    return TrainResult.from_json(json.loads((run_dir / "result.json").read_text()), run_dir)


def copy_straight(straight: TrainResult, config: PlatformConfig, root: Path) -> TrainResult:
    """The straight run's checkpoints copied to ``root/.mlops/checkpoints/straight``, with the local key pair that
    sealed them (``config.provenance.local_key_dir``: a run resumes only from checkpoints its own key sealed), into
    a ``root`` that has no key yet; the result pointing there."""
    import dataclasses

    keys = config.provenance.local_key_dir
    assert keys is not None, "the straight run's checkpoints are sealed by the local demo key"
    world = straight.run_dir.parents[2]  # <world>/.mlops/checkpoints/straight
    assert not (root / keys).exists(), f"{root / keys} exists already: the key copy goes into a fresh root"
    shutil.copytree(world / keys, root / keys)
    run_dir = root / ".mlops/checkpoints/straight"
    shutil.copytree(straight.run_dir, run_dir)
    return dataclasses.replace(straight, run_dir=run_dir)


@pytest.fixture(scope="session")
def trained_fraud(tmp_path_factory: pytest.TempPathFactory, repo_root: Path,
                  prepared_fraud_data: Any) -> TrainResult:
    """``train_tabular`` with :data:`FRAUD` (tracked: MLflow run, registered as version 1) in a repo root of its own
    holding the prepared data: what test_lineage and test_calibration each trained for themselves with the same
    config. Built once per test run (tests/support/session_world); read-only: the result's ``run_dir.parents[2]``
    is that root (its MLflow store, read by test_lineage); a re-run goes into the test's own root."""
    from mlops_training import train_tabular

    def build(folder: Path) -> None:
        shutil.copytree(repo_root / "configs", folder / "configs")
        shutil.copytree(repo_root / "feature_repo", folder / "feature_repo")
        config = load_config(model="fraud", config_dir=folder / "configs", overrides=FRAUD, environ={}).config
        prepared_fraud_data(config, folder)  # prepare_local_data's output, prepared once per run
        result = train_tabular(model="fraud", config_dir=folder / "configs", overrides=FRAUD, run_name="fraud-60")
        assert result.model_version == "1" and result.steps == 60

    run_dir = build_once(tmp_path_factory, "fraud-60-steps", build) / ".mlops/checkpoints/fraud-60"
    return TrainResult.from_json(json.loads((run_dir / "result.json").read_text()), run_dir)
