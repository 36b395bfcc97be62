"""The language model's reproducibility gate replays its own training, as the fraud model's does.

A real fine-tune (torchrun, one CPU process, tracked and registered in MLflow) of a tiny LLaMA checkpoint made
here records its weights hash at ``evaluation.repro_steps`` and at its last step. ``evaluate`` replays the first
``repro_steps`` steps of the recorded recipe and must hit the recorded hash bit for bit; the greedy-decoding check
runs beside it under its own name. An altered record fails: the old gate only decoded the export twice, which
passes whatever the record says. (The replay of a fine-tune on 2 processes, as the loop trains it, is asserted by
tests/e2e/test_lm_pipeline.py's reproducibility gate; what is checked here is the gate's logic.)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from mlops_config import PlatformConfig, load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
STEPS = ("training.nproc=1", "training.max_steps=6", "training.checkpoint.every_steps=0", "training.eval_every=0",
         "training.warmup_steps=2", "training.batch_size=16", "training.lr=0.01", "evaluation.repro_steps=3",
         "evaluation.lm.max_new_tokens=4", "training.causal_lm.checkpoint=pretrained")


def _config(root: Path, *sets: str) -> PlatformConfig:
    return load_config(model="llm-sft", config_dir=root / "configs", environ={},
                       overrides=["training.causal_lm.finetune=full", *STEPS, *sets]).config


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A repo root with configs, datasets and a made checkpoint; one full fine-tune, registered as version 1."""
    from mlops_training import launch

    root = tmp_path_factory.mktemp("lm-replay") / "repo"
    shutil.copytree(REPO / "configs", root / "configs")
    shutil.copytree(REPO / "datasets", root / "datasets")
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    make_checkpoint(root / "pretrained", "tiny", seed=3)
    result = launch(_config(root), root, run_name="tuned", track=True)
    assert result is not None and result.model_version == "1" and result.steps == 6
    return {"root": root, "result": result}


def _evaluate(world: dict[str, Any], tmp: Path, *sets: str) -> dict[str, Any]:
    from mlops_evaluation import evaluate

    cfg = _config(world["root"], *sets)
    report = evaluate(cfg, world["root"], "1", report_dir=tmp, gates=("reproducibility",), log_to_run=False)
    return {g.name: g for g in report.gates}


def _model_json(world: dict[str, Any]) -> Path:
    run_id = world["result"].run_id
    (path,) = [p for p in (world["root"] / ".mlops").rglob("model.json") if run_id in p.parts]
    return path


def test_the_gate_replays_the_fine_tunes_own_trajectory(world: dict[str, Any], tmp_path: Path) -> None:
    from mlops_model import load_exported, weights_hash

    meta = json.loads(_model_json(world).read_text())
    trajectory = meta["lineage"]["trajectory"]
    assert sorted(trajectory, key=int) == ["3", "6"] and trajectory["3"] != trajectory["6"]
    tensors, _ = load_exported(world["result"].export_dir, verify=False)
    assert trajectory["6"] == weights_hash(tensors) == meta["weights_sha256"]  # a full fine-tune exports its state
    gates = _evaluate(world, tmp_path)
    assert list(gates) == ["reproducibility", "decode_determinism"]
    repro = gates["reproducibility"]
    assert repro.passed, repro.reason
    assert "own trajectory reproduced" in repro.reason and "3 of its 6 steps" in repro.reason
    assert repro.evidence["replay"] == {"weights_sha256": trajectory["3"], "data_hash": meta["lineage"]["data_hash"],
                                        "steps": 3}
    assert gates["decode_determinism"].passed and "greedy decoding" in gates["decode_determinism"].reason


@pytest.mark.parametrize(("step", "expected"), [
    ("3", "weights differ at step 3"),  # the replay does not give what the record says
    ("6", "are not the end of its recorded trajectory"),  # the export is not what the run ended at
])
def test_an_altered_trajectory_fails_the_gate(world: dict[str, Any], tmp_path: Path, step: str,
                                              expected: str) -> None:
    path = _model_json(world)
    original = path.read_text()
    meta = json.loads(original)
    meta["lineage"]["trajectory"][step] = "0" * 64
    path.write_text(json.dumps(meta))
    try:
        gates = _evaluate(world, tmp_path)
    finally:
        path.write_text(original)
    assert not gates["reproducibility"].passed and expected in gates["reproducibility"].reason, \
        gates["reproducibility"].reason
    assert gates["decode_determinism"].passed  # the inference check cannot tell: it is not the gate


def test_a_lora_export_is_re_run_whole_or_is_not_verifiable(world: dict[str, Any], tmp_path: Path) -> None:
    """A LoRA run exports base + adapters merged: not the state its trajectory hashes. A prefix replay cannot tie
    the export to the run, so it is "not verifiable"; with ``repro_steps`` ≥ the run's steps the gate re-runs it
    whole and compares the exported weights themselves."""
    from mlops_training import launch

    sets = ("training.causal_lm.finetune=lora", "training.max_steps=4")
    result = launch(_config(world["root"], *sets), world["root"], run_name="lora", track=True)
    assert result is not None and result.model_version == "2"
    meta = json.loads(Path(result.export_dir, "model.json").read_text())
    assert meta["lineage"]["trajectory"]["4"] != meta["weights_sha256"]  # why the end check cannot apply

    def gate(*more: str) -> Any:
        from mlops_evaluation import evaluate

        cfg = _config(world["root"], *sets, *more)
        report = evaluate(cfg, world["root"], "2", report_dir=tmp_path, gates=("reproducibility",), log_to_run=False)
        return report.gates[0]

    prefix = gate()
    assert not prefix.passed and prefix.reason.startswith("not verifiable"), prefix.reason
    assert "LoRA adapters merged into the base" in prefix.reason and "evaluation.repro_steps ≥ 4" in prefix.reason
    whole = gate("evaluation.repro_steps=4")
    assert whole.passed, whole.reason
    assert whole.evidence["reruns"][0]["weights_sha256"] == meta["weights_sha256"]
    # `mlops registry verify` on the same version: the old walk called the link broken (its last hash is not the
    # merged export's); it is a record until a whole re-run ties the export to it
    from mlops_pipeline import verify_version

    def link(rerun: bool, *more: str) -> Any:
        audit = verify_version(_config(world["root"], *sets, *more), world["root"], "2", rerun=rerun)
        return next(x for x in audit.links if x.name == "trajectory")

    recorded = link(False)
    assert recorded.status == "recorded, not replayed" and "LoRA adapters merged" in recorded.detail, recorded
    assert link(True).status == "not verifiable"  # repro_steps 3 < 4 steps: no whole re-run
    replayed = link(True, "evaluation.repro_steps=4")
    assert replayed.status == "verified" and "whole 4-step re-run" in replayed.detail, replayed
