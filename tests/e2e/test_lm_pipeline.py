"""`mlops pipeline run --model llm-sft` end to end in a copy of the repo (the base checkpoint is made by the DVC
stage from tests/hf_checkpoint.py, nothing downloaded), asserting the outcome of every step of the LM loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, copy_repo: Any, run_mlops: Any) -> tuple[Path, dict]:
    repo = tmp_path_factory.mktemp("lmloop") / "repo"
    copy_repo(repo)
    res = run_mlops(repo, "pipeline", "run", "--model", "llm-sft", "--fast", "--json", timeout=1500)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return repo, json.loads(res.stdout)


def _step(doc: dict, name: str) -> dict:
    step = next(s for s in doc["steps"] if s["name"] == name)
    assert step["status"] == "ok", step
    return step["outputs"]


def test_every_step_ran(loop: tuple[Path, dict]) -> None:
    _, doc = loop
    assert [s["name"] for s in doc["steps"]] == ["lm-data", "lm-train", "lm-gates", "lm-canary", "lm-drift"]
    assert doc["ok"], doc


def test_data_gate_quarantines_every_injected_fault(loop: tuple[Path, dict]) -> None:
    _, doc = loop
    data = _step(doc, "lm-data")
    injected = sum(data["injected_faults"].values())
    assert data["accepted_rows"] == data["clean_accepted"]  # the faults, and only they, were quarantined
    assert data["quarantined_rows"] == injected and data["input_rows"] == data["clean_accepted"] + injected


def test_fine_tune_gates_canary_champion(loop: tuple[Path, dict]) -> None:
    _, doc = loop
    train = _step(doc, "lm-train")
    first, candidate = train["first_champion"]["version"], train["version"]
    assert int(candidate) > int(first) and train["steps"] > train["first_champion"]["steps"]
    gates = _step(doc, "lm-gates")
    assert gates["candidate"] == candidate and gates["champion"] == first
    # reproducibility replays the fine-tune's trajectory; greedy decoding twice is its own, separately named check
    assert gates["gates"] == {"quality": True, "reproducibility": True, "decode_determinism": True, "latency": True,
                              "contract": True}
    canary = _step(doc, "lm-canary")
    assert canary["decision"] == "promote" and canary["champion_now"] == candidate
    assert canary["fallback_now"] == first
    assert all(set(t["statuses"]) == {"200"} for t in canary["traffic"].values())  # JSON keys


def test_drifted_prompts_roll_back_to_the_fallback(loop: tuple[Path, dict]) -> None:
    repo, doc = loop
    train = _step(doc, "lm-train")
    drift = _step(doc, "lm-drift")
    assert drift["level"] == "CRITICAL" and "prompt_tokens" in drift["drifted_features"]
    assert drift["champion_before"] == train["version"]
    assert drift["rolled_back"] and drift["champion_after"] == train["first_champion"]["version"]
    assert (repo / "reports" / "latest" / "index.html").is_file()
