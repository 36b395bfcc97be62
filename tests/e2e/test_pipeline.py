"""`mlops pipeline run --fast` end to end in a copy of the repo, as a person runs it (no --json), asserting the
outcome of every step from the figures the run keeps in its folder (what --json prints), and what the person saw:
one line per step and the summary, no library's warning and no JSON, each step's log in the run's folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]  # the demo runs in the module fixture

FRAUD_RATE = 0.03
TRIVIAL_F1 = 2 * FRAUD_RATE / (1 + FRAUD_RATE)  # "everything is fraud": precision = rate, recall = 1
# What the same command printed before the console kept it in the step logs (Feast, ibis and Python's warning format)
THIRD_PARTY = re.compile(r"Warning:|warnings\.warn|site-packages|experimental feature|Running stage|Created feature")


class Demo:
    """The demo's repository copy, what it printed, its run folder and its figures (``result.json`` there)."""

    def __init__(self, repo: Path, res: subprocess.CompletedProcess[str]) -> None:
        self.repo, self.stdout, self.stderr = repo, res.stdout, res.stderr
        found = re.search(r"each step's output: (\S+)/<step>\.log", res.stderr)
        assert found, res.stderr[-3000:]
        self.run_dir = Path(found.group(1))
        self.doc: dict = json.loads((self.run_dir / "result.json").read_text())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, copy_repo: Any, run_mlops: Any) -> Demo:
    repo = tmp_path_factory.mktemp("demo") / "repo"
    copy_repo(repo)
    res = run_mlops(repo, "pipeline", "run", "--fast", timeout=1700)  # within the file's limit: a loaded machine
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return Demo(repo, res)


def _step(doc: dict, name: str) -> dict:
    step = next(s for s in doc["steps"] if s["name"] == name)
    assert step["status"] == "ok", f"step {name} {step['status']}: {step.get('error')}"  # a str: pytest shows it whole
    return step["outputs"]


def test_data_step_quarantines_the_corrupted_batches(demo: Demo) -> None:
    doc = demo.doc
    data = _step(doc, "data")
    # the demo injects 4 faults × 40 rows into one batch and truncates another (see steps.corrupt_batch)
    assert data["quarantined_rows"] == 160
    assert data["rejected_batches"] == ["truncated_batch"]
    assert data["input_rows"] == data["accepted_rows"] + data["quarantined_rows"]
    assert data["batches"] == 5


def test_features_and_training(demo: Demo) -> None:
    doc = demo.doc
    assert _step(doc, "features")["probe_known_entity"] is True
    train = _step(doc, "train")
    assert train["first_champion"]["version"] == "1"
    assert train["version"] == "2"
    assert train["metrics"]["val_f1"] > 3 * TRIVIAL_F1
    assert train["dvc"]["ran"] == ["train"]


def test_gates_canary_and_rollback(demo: Demo) -> None:
    doc = demo.doc
    gates = _step(doc, "gates")
    assert gates["gates"] == {"quality": True, "reproducibility": True, "latency": True, "contract": True,
                              "calibration": True}
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
    labels = _step(doc, "labels")  # a week later: every served prediction's label, through the labels gate
    assert labels["labels"]["quarantined_rows"] == 0 and labels["labels"]["accepted_rows"] > 0
    versions = labels["versions"]  # the champion now (v1, served normal traffic) and the rolled-back v2
    assert {"v1 normal", "v2 normal", "v2 drifted"} <= set(versions)
    assert all(x["realized_f1"] is not None and x["estimated_f1"] is not None for x in versions.values())


def test_console_tells_the_steps_and_nothing_else(demo: Demo) -> None:
    """(From tests/integration/pipeline/test_pipeline_console.py, which ran the first two steps again for it.)"""
    console = demo.stdout + demo.stderr
    assert not THIRD_PARTY.search(console), console
    for line in console.splitlines():
        text = line.strip()
        if text.startswith(("{", "[")) and text.endswith(("}", "]")):
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)  # a step line starts with "[1/8]", which is not JSON
    lines, total = demo.stderr.splitlines(), len(demo.doc["steps"])
    assert re.fullmatch(rf"\[1/{total}\] data: .* ok in \d+\.\ds: \d+ rows in 5 batches: \d+ accepted, 160 "
                        r"quarantined; rejected whole: truncated_batch", lines[2]), lines[2]
    assert re.fullmatch(rf"\[2/{total}\] features: .* ok in \d+\.\ds: fraud_v1: \d+ features, online store built",
                        lines[4]), lines[4]
    for i, step in enumerate(demo.doc["steps"], 1):  # each step: one line as it starts, one as it ends
        assert sum(line.startswith(f"[{i}/{total}] {step['name']}: ") for line in lines) == 2, step["name"]
    assert len(console.splitlines()) <= 100, console  # two screens; `make demo` printed 1,159 lines before


def test_run_folder_holds_each_steps_log_and_the_figures(demo: Demo) -> None:
    assert demo.run_dir.parent == demo.repo / ".mlops" / "runs"
    assert {p.name for p in demo.run_dir.iterdir()} >= {f"{s['name']}.log" for s in demo.doc["steps"]} | {
        "result.json"}
    assert f"the run's figures (what --json prints): {demo.run_dir / 'result.json'}" in demo.stderr
    data_log = (demo.run_dir / "data.log").read_text()
    assert "Running stage 'validate'" in data_log, "DVC's own output, from the stage it ran"
    features_log = (demo.run_dir / "features.log").read_text()
    assert "> .venv/bin/mlops features build" in features_log
    assert "Created feature service fraud_v1" in features_log, "the stage command's (a child process's) output"


def test_ledger_records_the_whole_story(demo: Demo, run_mlops: Any) -> None:
    repo = demo.repo
    res = run_mlops(repo, "registry", "history", "--model", "fraud", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    entries = json.loads(res.stdout)
    entries = entries.get("entries", entries) if isinstance(entries, dict) else entries
    moves = [(e["action"], e["to_alias"], str(e["version"])) for e in entries]
    assert moves[-1][0] == "rollback"
    assert ("promote", "champion", "2") in moves
    assert moves.index(("promote", "champion", "2")) < len(moves) - 1


def test_report_has_every_plot_and_renders_cleanly(demo: Demo, render_in_chromium) -> None:
    doc = demo.doc
    boxes, problems = render_in_chromium(Path(doc["report"]))
    assert problems == []
    assert all(b is not None and b["width"] > 100 for b in boxes.values())
    assert set(boxes) == {"training-loss", "training-throughput", "gate-f1-delta", "gate-latency", "shadow-latency",
                          "canary-compare", "canary-scores", "drift-psi", "ledger-timeline"}


def test_second_run_is_cached_and_a_training_key_retrains(demo: Demo) -> None:
    repo = demo.repo
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
