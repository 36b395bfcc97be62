"""The LM loop's training step: the first champion of an empty registry trains from the base checkpoint; every
candidate after it continues from the champion, named by the version the alias names (``models:/<name>/<v>``),
for ``training.causal_lm.candidate_steps`` steps. The registry and the trainer are fakes that record what each
training run was configured with."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import mlops_training
from mlops_config import load_config
from mlops_pipeline import lm_loop
from mlops_pipeline.context import PipelineContext

pytestmark = pytest.mark.unit


class FakeRegistry:
    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = dict(aliases)
        self.versions = max((int(v) for v in self.aliases.values()), default=0)
        self.trained: list[dict[str, Any]] = []

    def train_model(self, cfg: Any, root: Path, *, run_name: str) -> SimpleNamespace:
        self.versions += 1
        self.trained.append({"run_name": run_name, "checkpoint": cfg.training.causal_lm.checkpoint,
                             "max_steps": cfg.training.max_steps, "version": str(self.versions)})
        return SimpleNamespace(model_version=str(self.versions), run_id=f"run{self.versions}",
                               steps=cfg.training.max_steps, metrics={}, weights_sha256="0" * 64, system={})


@pytest.fixture
def loop(monkeypatch: pytest.MonkeyPatch, config_dir: Path) -> Any:
    def make(aliases: dict[str, str], *overrides: str) -> tuple[PipelineContext, FakeRegistry]:
        registry = FakeRegistry(aliases)
        monkeypatch.setattr(mlops_training, "train_model", registry.train_model)
        monkeypatch.setattr(lm_loop, "_aliases", lambda ctx: dict(registry.aliases))

        def promote(ctx: PipelineContext, version: str, alias: str, reason: str) -> dict[str, Any]:
            registry.aliases[alias] = version
            return {"aliases_after": dict(registry.aliases)}

        monkeypatch.setattr(lm_loop, "_promote", promote)
        monkeypatch.setattr(lm_loop, "_evaluate", lambda ctx, version, name: SimpleNamespace(passed=True, gates=[]))
        loaded = load_config(model="llm-sft", config_dir=config_dir, environ={}, overrides=list(overrides))
        return PipelineContext(loaded=loaded, fast=True), registry

    return make


def test_the_candidate_continues_from_the_champion_pinned_to_its_version(loop: Any) -> None:
    ctx, registry = loop({"champion": "3", "fallback": "2"}, "training.causal_lm.candidate_steps=50")
    out = lm_loop.step_lm_train(ctx)
    assert registry.trained == [{"run_name": "llm-sft-candidate", "checkpoint": "models:/llm-sft/3",
                                 "max_steps": 50, "version": "4"}]
    assert out["start"] == "models:/llm-sft/3" and out["steps"] == 50 and out["version"] == "4"
    assert ctx.facts["candidate_version"] == "4" and "first_champion" not in out


def test_the_start_names_the_registered_model_with_its_prefix(loop: Any) -> None:
    ctx, registry = loop({"champion": "7"}, "tracking.registered_model_prefix=team-",
                         "training.causal_lm.candidate_steps=50")
    lm_loop.step_lm_train(ctx)
    assert registry.trained[0]["checkpoint"] == "models:/team-llm-sft/7"


def test_an_empty_registry_trains_the_first_champion_from_base_then_continues_from_it(loop: Any) -> None:
    ctx, registry = loop({})
    lm = ctx.cfg.training
    assert lm.causal_lm.candidate_steps is not None and lm.causal_lm.candidate_steps < 2 * lm.max_steps // 3
    out = lm_loop.step_lm_train(ctx)
    assert registry.trained == [
        {"run_name": "llm-sft-first-champion", "checkpoint": "data/llm/base", "max_steps": 2 * lm.max_steps // 3,
         "version": "1"},
        {"run_name": "llm-sft-candidate", "checkpoint": "models:/llm-sft/1", "max_steps": lm.causal_lm.candidate_steps,
         "version": "2"},
    ]
    assert out["first_champion"]["version"] == "1" and out["version"] == "2"
    assert out["start"] == "models:/llm-sft/1"


def test_without_candidate_steps_the_candidate_trains_from_the_base_checkpoint(loop: Any) -> None:
    ctx, registry = loop({"champion": "3"}, "training.causal_lm.candidate_steps=null")
    out = lm_loop.step_lm_train(ctx)
    assert registry.trained == [{"run_name": "llm-sft-candidate", "checkpoint": "data/llm/base",
                                 "max_steps": ctx.cfg.training.max_steps, "version": "4"}]
    assert out["start"] == "data/llm/base"
