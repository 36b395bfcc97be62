"""The gates on real models: a better candidate passes all four and can be promoted; one trained on shuffled
labels is blocked by quality (and by promotion); a nondeterministic re-run is caught by reproducibility; a
much larger network is caught by latency. Runs the real ``mlops`` CLI where a user would."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlops_core import lifecycle, mlflow_client
from mlops_core.ledger import report_hash

# The first test's limit also pays for the module's world (a torchrun training and three fits): 556 s of setup
# alone on a machine at load ~14 ran the first test past the suite's default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
MLOPS = str(Path(sys.executable).with_name("mlops"))


def _mlops(world: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(world.root / "configs")}
    sets = [a for s in world.sets for a in ("--set", s)]
    return subprocess.run([MLOPS, *args, *sets], capture_output=True, text=True, env=env, cwd=world.root,
                          timeout=400, check=False)


def _make_champion(world: Any) -> None:
    cfg = world.loaded.config
    if lifecycle.aliases(cfg.tracking, world.root, "fraud").get("champion") == world.versions["champion"]:
        return
    for to in lifecycle.LIFECYCLE:  # test set-up: the old champion predates the gates
        lifecycle.promote(cfg.tracking, world.root, "fraud", world.versions["champion"], to, reason="set-up",
                          actor="test", required_gates={})


def _holdout_f1(world: Any, version: str) -> float:
    """F1 on the holdout recomputed independently: exported weights → torch → sklearn."""
    import torch
    from sklearn.metrics import f1_score

    from mlops_model import EncoderSpec, build_tabular_mlp, load_exported

    client = mlflow_client(world.loaded.config.tracking, world.root)
    run_id = client.get_model_version("fraud", version).run_id
    (world.root / f"check-{version}").mkdir(parents=True, exist_ok=True)
    folder = client.download_artifacts(run_id, "model", str(world.root / f"check-{version}"))
    tensors, meta = load_exported(folder)
    net = build_tabular_mlp(meta["architecture"])
    net.load_state_dict(tensors)
    hold = world.holdout
    # served as the export says: the float32 sigmoid score, its Platt calibrator (sigmoid(a * logit(score) + b), in
    # float64, the score clipped to (1e-6, 1 - 1e-6)), decided at its recorded threshold (0.5 without). The
    # threshold lies midway between two validation scores (these rows), so a last-bit difference of this one-batch
    # forward from the served batches flips no decision
    cal = meta.get("calibration")
    threshold = (meta.get("decision_threshold") or {}).get("value", 0.5)
    with torch.no_grad():
        x = EncoderSpec.from_dict(meta["features"]["encoder"]).encode_frame(hold)
        p = torch.sigmoid(net(torch.from_numpy(x))).squeeze(-1).numpy().astype(np.float64)
    if cal is not None:
        assert cal["method"] == "platt", cal
        eps = 1e-6
        z = np.log(np.clip(p, eps, 1 - eps) / np.clip(1 - p, eps, 1))
        p = 1 / (1 + np.exp(-(cal["a"] * z + cal["b"])))
    return float(f1_score(hold["is_fraud"].to_numpy(), (p >= threshold).astype(int)))


def _gates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in doc["gates"]}


def test_better_candidate_passes_every_gate_and_is_promoted(world: Any, tmp_path: Path) -> None:
    _make_champion(world)
    version = world.versions["better"]
    proc = _mlops(world, "evaluate", "run", "--candidate", version, "--json", "--report-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    gates = _gates(doc)
    assert doc["passed"] is True and list(gates) == ["quality", "reproducibility", "latency", "contract",
                                                     "calibration"]
    # the pipeline's export records its Platt calibrator (training.calibration's default): checked on the holdout
    assert gates["calibration"]["passed"] is True and "platt calibrator holds" in gates["calibration"]["reason"]
    assert gates["calibration"]["evidence"].get("checked", True) is True  # only an unchecked pass says False
    assert doc["champion"]["version"] == world.versions["champion"]
    quality = gates["quality"]["evidence"]
    assert quality["candidate"]["f1"] == pytest.approx(_holdout_f1(world, version), abs=1e-9)
    assert quality["reference_metrics"]["f1"] == pytest.approx(_holdout_f1(world, world.versions["champion"]),
                                                               abs=1e-9)
    assert quality["bootstrap"]["lower"] >= 0.02
    assert "bit-identical" in gates["reproducibility"]["reason"]
    assert gates["reproducibility"]["evidence"]["reruns"][0]["weights_sha256"] == world.pipeline_result.weights_sha256
    assert (tmp_path / "evaluation.json").is_file() and "PASSED" in (tmp_path / "evaluation.md").read_text()
    # Logged on the candidate's run, where promotion reads it.
    promote = _mlops(world, "registry", "promote", "--version", version, "--to", "candidate", "--reason", "trained")
    assert promote.returncode == 0, promote.stderr
    promote = _mlops(world, "registry", "promote", "--version", version, "--to", "staging", "--reason", "gates green",
                     "--json")
    assert promote.returncode == 0, promote.stderr
    entry = json.loads(promote.stdout)
    assert entry["gate_report_sha256"] == report_hash(json.loads((tmp_path / "evaluation.json").read_text()))
    assert entry["data_hash"] == world.pipeline_result.data_hash


def test_candidate_trained_on_shuffled_labels_is_blocked(world: Any, tmp_path: Path) -> None:
    _make_champion(world)
    version = world.versions["shuffled"]
    proc = _mlops(world, "evaluate", "run", "--candidate", version, "--gate", "quality", "--gate", "contract",
                  "--json", "--report-dir", str(tmp_path))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    gates = _gates(doc)
    assert doc["passed"] is False and gates["quality"]["passed"] is False and gates["contract"]["passed"] is True
    assert "< required +0.0200" in gates["quality"]["reason"]
    assert "BLOCKED" in (tmp_path / "evaluation.md").read_text()
    assert _mlops(world, "registry", "promote", "-v", version, "--to", "candidate", "-r", "try").returncode == 0
    blocked = _mlops(world, "registry", "promote", "-v", version, "--to", "staging", "-r", "try")
    assert blocked.returncode == 1 and "blocked" in blocked.stderr and "quality" in blocked.stderr


def test_nondeterministic_rerun_is_caught_by_reproducibility(world: Any) -> None:
    from mlops_evaluation.runner import check_reproducibility
    from mlops_evaluation.scorer import load_version
    from mlops_training import reproduce

    def jittered(recorded: dict[str, Any], root: Path, max_steps: int | None) -> Any:
        """A real re-run made nondeterministic on purpose: the learning rate moves by a random 1e-6."""
        noisy = json.loads(json.dumps(recorded))
        noisy["training"]["lr"] *= 1 + (1 + secrets.randbelow(1000)) * 1e-9
        return reproduce(noisy, root, max_steps=max_steps)

    cfg = world.loaded.config
    client = mlflow_client(cfg.tracking, world.root)
    scorer = load_version(client, "fraud", world.versions["better"], world.root / "repro-check")
    gate = check_reproducibility(scorer, world.root, cfg.evaluation, jittered, client=client)
    assert not gate.passed
    assert "not deterministic" in gate.reason
    assert gate.evidence["reruns"][0]["weights_sha256"] != world.pipeline_result.weights_sha256


def test_larger_model_is_caught_by_latency(world: Any, tmp_path: Path) -> None:
    from mlops_evaluation import evaluate

    _make_champion(world)
    cfg = world.loaded.config
    report = evaluate(cfg, world.root, world.versions["slow"], report_dir=tmp_path, gates=("latency",),
                      log_to_run=False)
    gate = report.gates[0]
    assert not report.passed and report.exit_code == 1
    assert "too noisy" not in gate.reason, gate.reason
    # judged on the CPU time the 3×1536 network burns, not only on the wall-clock backstop
    assert gate.evidence["clock"] == "cpu" and gate.reason.startswith("slower than allowed: CPU-time"), gate.reason
    assert gate.evidence["p99_regression"] > 1.0  # > 2× the champion's p99
    assert gate.evidence["candidate"]["p50"] > 2 * gate.evidence["champion"]["p50"]
    assert np.isfinite(gate.evidence["aa_noise"])
