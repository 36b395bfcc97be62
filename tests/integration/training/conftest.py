"""Helpers for the training integration tests: a tiny LLaMA config in a temp repo root per module."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mlops_config import PlatformConfig, load_config

TINY = (
    "training.batch_size=16",
    "training.eval_every=0",
    "training.warmup_steps=2",
    "training.causal_lm.corpus_max_bytes=300000",
    "training.causal_lm.seq_len=64",
)


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
