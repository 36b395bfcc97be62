"""`mlops pipeline run --fast` end to end in a copy of the repo, asserting the outcome of every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]  # the demo runs in the module fixture

FRAUD_RATE = 0.03
TRIVIAL_F1 = 2 * FRAUD_RATE / (1 + FRAUD_RATE)  # "everything is fraud": precision = rate, recall = 1


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, copy_repo: Any, run_mlops: Any) -> tuple[Path, dict]:
    repo = tmp_path_factory.mktemp("demo") / "repo"
    copy_repo(repo)
    res = run_mlops(repo, "pipeline", "run", "--fast", "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return repo, json.loads(res.stdout)


def _step(doc: dict, name: str) -> dict:
    step = next(s for s in doc["steps"] if s["name"] == name)
    assert step["status"] == "ok", step
    return step["outputs"]


def test_data_step_quarantines_the_corrupted_batches(demo: tuple[Path, dict]) -> None:
    _, doc = demo
    data = _step(doc, "data")
    # the demo injects 4 faults × 40 rows into one batch and truncates another (see steps.corrupt_batch)
    assert data["quarantined_rows"] == 160
    assert data["rejected_batches"] == ["truncated_batch"]
    assert data["input_rows"] == data["accepted_rows"] + data["quarantined_rows"]
    assert data["batches"] == 5


def test_features_and_training(demo: tuple[Path, dict]) -> None:
    _, doc = demo
    assert _step(doc, "features")["probe_known_entity"] is True
    train = _step(doc, "train")
    assert train["first_champion"]["version"] == "1"
    assert train["version"] == "2"
    assert train["metrics"]["val_f1"] > 3 * TRIVIAL_F1
    assert train["dvc"]["ran"] == ["train"]


def test_gates_canary_and_rollback(demo: tuple[Path, dict]) -> None:
    _, doc = demo
    gates = _step(doc, "gates")
    assert gates["gates"] == {"quality": True, "reproducibility": True, "latency": True, "contract": True}
    assert gates["champion"] == "1"
    shadow = _step(doc, "shadow")  # every live request mirrored to the candidate; callers saw only champion's
    assert (shadow["stable"], shadow["candidate"]) == ("1", "2")
    assert shadow["statuses"] == {"200": shadow["requests"]}
    assert shadow["counters"]["mirrored"] + shadow["counters"]["dropped"] == shadow["requests"]
    assert shadow["mirrored"] == shadow["counters"]["mirrored"] and shadow["errors"] == 0
    assert shadow["pearson"] is not None and shadow["pearson"] > 0  # two fits of one task agree in direction
    canary = _step(doc, "canary")
    assert canary["decision"] == "promote"
    assert (canary["champion_now"], canary["fallback_now"]) == ("2", "1")
    assert canary["statuses"] == {"200": canary["requests"]}
    drift = _step(doc, "drift")
    assert drift["level"] == "CRITICAL"
    assert "amount" in drift["drifted_features"]
    assert drift["rolled_back"] is True
    assert (drift["champion_before"], drift["champion_after"]) == ("2", "1")


def test_ledger_records_the_whole_story(demo: tuple[Path, dict], run_mlops: Any) -> None:
    repo, _ = demo
    res = run_mlops(repo, "registry", "history", "--model", "fraud", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    entries = json.loads(res.stdout)
    entries = entries.get("entries", entries) if isinstance(entries, dict) else entries
    moves = [(e["action"], e["to_alias"], str(e["version"])) for e in entries]
    assert moves[-1][0] == "rollback"
    assert ("promote", "champion", "2") in moves
    assert moves.index(("promote", "champion", "2")) < len(moves) - 1


def test_report_has_every_plot_and_renders_cleanly(demo: tuple[Path, dict], render_in_chromium) -> None:
    _, doc = demo
    boxes, problems = render_in_chromium(Path(doc["report"]))
    assert problems == []
    assert all(b is not None and b["width"] > 100 for b in boxes.values())
    assert set(boxes) == {"training-loss", "training-throughput", "gate-f1-delta", "gate-latency", "shadow-latency",
                          "canary-compare", "canary-scores", "drift-psi", "ledger-timeline"}


def test_second_run_is_cached_and_a_training_key_retrains(demo: tuple[Path, dict]) -> None:
    repo, _ = demo
    dvc = [str(Path(sys.executable).with_name("dvc"))]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}, "DVC_NO_ANALYTICS": "1"}

    def changed() -> dict[str, list]:
        """Stages DVC would re-run, once the config stage has written the resolved config again."""
        subprocess.run([*dvc, "repro", "config"], cwd=repo, env=env, capture_output=True, text=True, check=True)
        res = subprocess.run([*dvc, "status", "train", "--json"], cwd=repo, env=env, capture_output=True, text=True,
                             check=True)
        return {k: v for k, v in json.loads(res.stdout).items() if k != "config"}  # config always runs

    assert changed() == {}
    fraud = repo / "configs" / "models" / "fraud.yaml"
    fraud.write_text(fraud.read_text().replace("lr: 0.003", "lr: 0.002"))
    assert list(changed()) == ["train"]
