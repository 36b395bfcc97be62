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
    assert step["status"] == "ok", f"step {name} {step['status']}: {step.get('error')}"  # a str: pytest shows it whole
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
    assert int(candidate) > int(first)
    gates = _step(doc, "lm-gates")
    assert gates["candidate"] == candidate and gates["champion"] == first
    # reproducibility replays the fine-tune's trajectory; greedy decoding twice is its own, separately named check
    assert gates["gates"] == {"quality": True, "reproducibility": True, "decode_determinism": True, "latency": True,
                              "contract": True}
    canary = _step(doc, "lm-canary")
    assert canary["decision"] == "promote" and canary["champion_now"] == candidate
    assert canary["fallback_now"] == first
    assert all(set(t["statuses"]) == {"200"} for t in canary["traffic"].values())  # JSON keys


def test_the_candidate_continues_from_the_first_champion_pinned_to_its_version(loop: tuple[Path, dict]) -> None:
    """The first champion trains from the base checkpoint; the candidate continues from the champion, named by its
    version (not the alias, which the canary moves), for training.causal_lm.candidate_steps steps, and the
    candidate's model.json (what the gates read) and its run's recorded config (what the reproducibility gate
    replays) name that start."""
    import yaml

    repo, doc = loop
    train = _step(doc, "lm-train")
    first, candidate = train["first_champion"]["version"], train["version"]
    lm = yaml.safe_load((repo / "configs" / "models" / "llm-sft.yaml").read_text())["training"]
    start = f"models:/llm-sft/{first}"  # registered_model_prefix is empty in the repo's configs
    assert train["start"] == start
    assert train["first_champion"]["steps"] == 2 * lm["max_steps"] // 3
    assert train["steps"] == lm["causal_lm"]["candidate_steps"] < train["first_champion"]["steps"]
    versions = repo / "data" / "pipeline" / "versions"
    meta = json.loads(next((versions / f"v{candidate}").rglob("model.json")).read_text())
    assert meta["features"]["checkpoint"] == start
    recorded = json.loads(next((repo / ".mlops").rglob(f"{train['run_id']}/artifacts/config.json")).read_text())
    assert recorded["training"]["causal_lm"]["checkpoint"] == start
    assert recorded["training"]["max_steps"] == train["steps"]


def test_drifted_prompts_roll_back_to_the_fallback(loop: tuple[Path, dict]) -> None:
    repo, doc = loop
    train = _step(doc, "lm-train")
    drift = _step(doc, "lm-drift")
    assert drift["level"] == "CRITICAL" and "prompt_tokens" in drift["drifted_features"]
    assert drift["champion_before"] == train["version"]
    assert drift["rolled_back"] and drift["champion_after"] == train["first_champion"]["version"]
    assert (repo / "reports" / "latest" / "index.html").is_file()


def test_gates_judged_the_task_by_exact_match_and_token_accuracy(loop: tuple[Path, dict]) -> None:
    _, doc = loop
    quality = _step(doc, "lm-gates")["quality"]
    assert quality["verdict"] == "pass" and quality["floor"] == 0.9
    assert "exact match" in quality["reason"] and "token accuracy" in quality["reason"]
    assert quality["exact_match"] >= 0.9 and quality["token_accuracy"] >= quality["exact_match"]


def test_champion_answers_held_out_prompts_through_the_openai_routes(loop: tuple[Path, dict]) -> None:
    """The champion the loop leaves (after the rollback: the first champion, gated and canaried like the
    candidate), served by a real `mlops serve` process and asked with the official ``openai`` client, answers at
    least 90 % of the held-out prompts exactly. The held-out split is recomputed here from the dataset with
    sha256, not taken from the platform's code, and checked to share no prompt with the training examples."""
    import hashlib

    import openai

    from mlops_pipeline.local_server import run_server

    repo, doc = loop
    champion = _step(doc, "lm-drift")["champion_after"]
    rows = [json.loads(line) for line in (repo / "datasets" / "instructions.jsonl").read_text().splitlines()
            if line.strip()]

    def held(row: dict) -> bool:  # the documented split: the first 8 bytes of sha256(prompt NUL completion) < 10 %
        digest = hashlib.sha256(f"{row['prompt']}\x00{row['completion']}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < 0.1

    held_out = [r for r in rows if held(r)]
    assert not {r["prompt"] for r in held_out} & {r["prompt"] for r in rows if not held(r)}
    sample = held_out[:: max(1, len(held_out) // 60)]  # ~60 prompts over the whole split, every task in it
    folder = next((repo / "data" / "pipeline" / "versions" / f"v{champion}").rglob("config.json")).parent
    args = ["--model-dir", str(folder), "--model-version", str(champion)]
    with run_server(repo, "llm-sft", repo / "data" / "pipeline" / "serve-openai-check.log", args) as server:
        client = openai.OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused", max_retries=0, timeout=120)
        answers = [client.completions.create(model=server.model, prompt=r["prompt"], max_tokens=24,
                                             temperature=0).choices[0].text for r in sample]
        chat = client.chat.completions.create(model=server.model, max_tokens=24, temperature=0, messages=[
            {"role": "user", "content": "Write in capitals: north window\nAnswer:"}]).choices[0].message.content
    exact = sum(a == r["completion"] for a, r in zip(answers, sample, strict=True)) / len(sample)
    misses = [(r["prompt"], r["completion"], a) for a, r in zip(answers, sample, strict=True) if a != r["completion"]]
    assert exact >= 0.9, (exact, misses[:10])
    assert chat is not None  # the chat route answers through the same model (its text is not graded here)
