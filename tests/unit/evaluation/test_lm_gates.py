"""Gates for a Hugging Face causal LM (``kind: hf_causal_lm``): the perplexity bootstrap against numpy by hand and
hand-built cases, then every gate on a tiny LLaMA checkpoint made here (never downloaded): a fine-tune trained in
the test beats its base; a damaged copy fails perplexity; a changed chat template fails the contract; and
``evaluate()`` dispatches a registered version (real MLflow, SQLite) to these gates."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlops_config import EvaluationConfig, LMEvaluationConfig, PlatformConfig, ProjectConfig, TrackingConfig
from mlops_evaluation import EvaluationError
from mlops_evaluation.bootstrap import paired_bootstrap_perplexity
from mlops_evaluation.lm_evaluate import hf_gates, load_hf
from mlops_evaluation.lm_gates import decode_determinism_gate, perplexity_gate

# latency: shape only here (tolerance 100×, no wall-clock bound); its verdicts are tested in test_lm_latency.py
SECTION = EvaluationConfig(bootstrap_samples=400, latency_max_noise=100.0, latency_tolerance=100.0,
                           lm=LMEvaluationConfig(generation_requests=3, generation_warmup=1, max_new_tokens=4,
                                                 generation_max_noise=100.0, generation_wall_max_ratio=None,
                                                 generation_max_rounds=1, task_max_examples=12))


def test_perplexity_bootstrap_equals_numpy_by_hand() -> None:
    rng = np.random.default_rng(7)
    tokens = rng.integers(3, 12, size=25).astype(float)
    a = tokens * rng.uniform(1.0, 2.0, size=25)
    b = tokens * rng.uniform(1.5, 2.5, size=25)
    got = paired_bootstrap_perplexity(a, b, tokens, samples=500, confidence=0.9, seed=11)
    # Independent: one resample at a time, with the same draws.
    idx = np.random.default_rng(11).integers(0, 25, size=(500, 25))
    stats = []
    for row in idx:
        pa = np.exp(sum(a[i] for i in row) / sum(tokens[i] for i in row))
        pb = np.exp(sum(b[i] for i in row) / sum(tokens[i] for i in row))
        stats.append((pb - pa) / pb)
    lo, hi = np.quantile(stats, [0.05, 0.95])
    full = (np.exp(b.sum() / tokens.sum()) - np.exp(a.sum() / tokens.sum())) / np.exp(b.sum() / tokens.sum())
    assert got.estimate == pytest.approx(full, rel=1e-12)
    assert (got.lower, got.upper) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))


def test_perplexity_gate_hand_built_cases() -> None:
    tokens = np.array([4.0, 4.0, 4.0, 4.0])
    same = np.log(10.0) * tokens  # perplexity exactly 10 on every example
    gate = perplexity_gate(same, same, tokens, SECTION, reference="champion")
    assert gate.evidence["candidate"]["perplexity"] == pytest.approx(10.0)
    assert gate.evidence["bootstrap"]["lower"] == gate.evidence["bootstrap"]["upper"] == 0.0
    assert gate.passed  # no worse, and lm.min_perplexity_reduction 0 by default
    worse = perplexity_gate(np.log(20.0) * tokens, same, tokens, SECTION, reference="champion")
    assert not worse.passed and worse.evidence["bootstrap"]["estimate"] == pytest.approx(-1.0)
    assert "20.0000 vs champion 10.0000" in worse.reason
    demanding = SECTION.model_copy(update={"lm": SECTION.lm.model_copy(update={"min_perplexity_reduction": 0.6})})
    better = perplexity_gate(np.log(5.0) * tokens, same, tokens, demanding, reference="champion")
    assert not better.passed and "+0.5000 < required +0.6000" in better.reason
    with pytest.raises(EvaluationError, match="score no tokens"):
        paired_bootstrap_perplexity([1.0], [1.0], [0.0])


def test_decode_determinism_on_hand_built_numbers() -> None:
    assert decode_determinism_gate(["p", "q"], [[1, 2], [3]], [[1, 2], [3]], max_new_tokens=2).passed
    bad = decode_determinism_gate(["p", "q"], [[1, 2], [3]], [[1, 2], [4]], max_new_tokens=2)
    assert not bad.passed and bad.evidence["differing_prompts"] == [1] and "'q'" in bad.reason
    assert bad.name == "decode_determinism"  # its own name: it is not the reproducibility gate


def test_generations_are_timed_in_cpu_time_so_waiting_for_the_cpu_is_not_the_model() -> None:
    """On a shared machine a 12 ms first token waited up to 300 ms for a core; the gate times what the model
    costs (CPU time of the process) and reports wall-clock beside it."""
    import torch

    from mlops_evaluation.lm_evaluate import HFModel, timed_generation

    class Waiting:  # a generate that waits 0.3 s (as if preempted) before its first token, then computes
        def generate(self, input_ids: Any, streamer: Any, max_new_tokens: int, **_: Any) -> Any:
            streamer.put(input_ids)
            time.sleep(0.3)
            busy = time.process_time() + 0.05
            while time.process_time() < busy:
                pass
            streamer.put(torch.tensor([7]))
            streamer.end()
            return torch.cat([input_ids, torch.full((1, max_new_tokens), 7)], dim=1)

    class Tokenizer:
        pad_token_id = 0

        def __call__(self, prompt: str, return_tensors: str) -> dict[str, Any]:
            return {"input_ids": torch.tensor([[1, 2]])}

    hf = HFModel(Path("unused"), Waiting(), Tokenizer())
    t = timed_generation(hf, "p", 4)
    assert t.wall_ttft_s is not None and t.wall_ttft_s >= 0.35
    assert 0.04 <= t.ttft_s < 0.2  # the 0.3 s wait is not counted
    assert t.new_tokens == 4


# --- a tiny checkpoint, a fine-tune of it and a damaged copy -------------------------------------------------


def _meta(seq_len: int = 64) -> dict[str, Any]:
    return {"features": {"tokenizer": "checkpoint", "dataset": "datasets/instructions.jsonl", "checkpoint": "base",
                         "finetune": "full", "seq_len": seq_len, "val_fraction": 0.1}, "lineage": {}}


def _save(model: Any, base: Path, folder: Path) -> Path:
    """A merged export as training writes it (``export_hf``: model.json, safetensors, tokenizer, generation)."""
    from mlops_training.hf_export import export_hf

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    export_hf(folder, state, {**model.config.to_dict(), "finetune": "full"}, base, _meta(), lora=None)
    return folder


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    import torch

    from mlops_training import encode_padded, held_out

    base_dir = tmp_path_factory.mktemp("lmgates")
    shutil.copytree(repo_root / "datasets", base_dir / "datasets")
    instructions = base_dir / "datasets" / "instructions.jsonl"  # the 240 hand-written lines: a held-out set of 24
    instructions.write_text("\n".join(instructions.read_text().splitlines()[:240]) + "\n")
    sys.path.insert(0, str(repo_root / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    make_checkpoint(base_dir / "base", "tiny", seed=3)
    hf = load_hf(base_dir / "base")
    examples = [json.loads(line) for line in (base_dir / "datasets" / "instructions.jsonl").read_text().splitlines()]
    train = [e for e in examples if not held_out(e, 0.1)]
    ids, labels = encode_padded(hf.tokenizer, train, 64)
    model = hf.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):  # the fine-tune: plain torch, independent of the platform's trainer
        pick = torch.randint(0, len(ids), (16,), generator=gen)
        loss = model(input_ids=torch.from_numpy(ids[pick]), labels=torch.from_numpy(labels[pick])).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    _save(model.eval(), base_dir / "base", base_dir / "tuned")
    damaged = load_hf(base_dir / "base").model
    with torch.no_grad():
        for p in damaged.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    _save(damaged, base_dir / "base", base_dir / "damaged")
    return base_dir


def test_fine_tune_passes_every_gate_but_an_unreplayable_reproducibility(root: Path) -> None:
    cand = load_hf(root / "tuned")
    results, held = hf_gates(cand, _meta(), None, ("quality", "reproducibility", "latency", "contract"), SECTION,
                             None, root, seed=0)
    gates = {g.name: g for g in results}
    assert held["reference"] == "base checkpoint" and held["rows"] > 5
    # 40 steps lower the perplexity below the base's, but do not teach the task: the quality gate's task check
    # (exact match of greedy answers on the held-out prompts, floor lm.min_exact_match) blocks it
    assert gates["quality"].evidence["perplexity_passed"], gates["quality"].reason
    assert gates["quality"].evidence["candidate"]["perplexity"] < gates["quality"].evidence["reference_metrics"][
        "perplexity"]
    assert not gates["quality"].passed and "< floor" in gates["quality"].reason
    # a folder with no recorded run has no training to replay: not verifiable, whatever decoding shows (the old
    # gate called two equal greedy decodings "reproducibility" and passed)
    assert not gates["reproducibility"].passed and gates["reproducibility"].reason.startswith("not verifiable")
    assert gates["decode_determinism"].passed, gates["decode_determinism"].reason
    assert all(len(ids) <= SECTION.lm.max_new_tokens for ids in gates["decode_determinism"].evidence["completion_ids"])
    assert gates["latency"].evidence["requests"] == 3 and gates["latency"].passed  # tolerance 100×: shape only
    assert gates["latency"].evidence["candidate"]["ttft_ms"]["p50"] > 0
    assert gates["contract"].passed, gates["contract"].reason


@pytest.mark.parametrize("candidate", ["silent", "base"])
def test_a_model_that_cannot_do_the_task_fails_quality_however_its_perplexity_compares(root: Path,
                                                                                       candidate: str) -> None:
    """Two real checkpoints that cannot answer, each against a reference it beats on perplexity (the old gate
    judged perplexity alone and passed both): ``silent``, the random base with its output head zeroed, so every
    logit is 0, greedy decoding picks token 0 (``<s>``) and serving, which drops special tokens, returns "" to
    every prompt; and ``base``, the untrained random checkpoint itself. The reference is the random base with its
    head scaled ×8 (the same guesses, far more confident: a worse perplexity)."""
    import torch

    from mlops_training import held_out

    def variant(name: str, scale: float) -> Path:
        folder = root / f"head-{name}"
        if not folder.is_dir():
            model = load_hf(root / "base").model
            with torch.no_grad():
                model.lm_head.weight.mul_(scale)
            _save(model, root / "base", folder)
        return folder

    cand = load_hf(variant("silent", 0.0) if candidate == "silent" else root / "base")
    reference = ("champion v1", load_hf(variant("sharp", 8.0)))
    results, _ = hf_gates(cand, _meta(), reference, ("quality",), SECTION, None, root, seed=0)
    gate = results[0]
    assert not gate.passed and "exact match 0/" in gate.reason and "< floor" in gate.reason, gate.reason
    assert gate.evidence["perplexity_passed"], gate.reason  # what the old gate decided on alone
    assert gate.evidence["task"]["candidate"]["exact_match"] == 0.0
    rows = [json.loads(line) for line in (root / "datasets" / "instructions.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in rows if held_out(r, 0.1)][:3]
    for prompt in prompts:  # independently: plain generate, decoded as serving returns text
        enc = cand.tokenizer(prompt, return_tensors="pt")
        out = cand.model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=cand.tokenizer.pad_token_id)
        text = cand.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        assert text == "" if candidate == "silent" else text not in {r["completion"] for r in rows}
    if candidate == "silent":  # uniform next-token distribution: perplexity is the vocabulary size, by arithmetic
        assert gate.evidence["candidate"]["perplexity"] == pytest.approx(cand.model.config.vocab_size, rel=1e-4)


def test_damaged_candidate_fails_perplexity_and_changed_template_fails_contract(root: Path) -> None:
    champion = ("champion v1", load_hf(root / "tuned"))
    results, _ = hf_gates(load_hf(root / "damaged"), _meta(), champion, ("quality",), SECTION, None, root, seed=0)
    assert not results[0].passed and results[0].evidence["bootstrap"]["upper"] < 0, results[0].reason
    other = load_hf(root / "tuned")
    other.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    results, _ = hf_gates(other, _meta(), champion, ("contract",), SECTION, None, root, seed=0)
    assert not results[0].passed and "chat template" in results[0].reason
    too_short = _meta(seq_len=512)  # more than the checkpoint's 256 positions: the held-out set itself says so
    results, _ = hf_gates(load_hf(root / "tuned"), too_short, champion, ("contract",), SECTION, None, root, seed=0)
    assert not results[0].passed and "context length 256 < training seq_len 512" in results[0].reason


@pytest.mark.parametrize("eos_early", [False, True])
def test_batched_greedy_answers_are_each_prompts_own_greedy_answer(root: Path, eos_early: bool) -> None:
    """The quality gate answers its held-out prompts in left-padded batches: each row must be exactly the ids
    ``generate`` gives that prompt alone, up to and with its end of sequence. Prompts of different lengths in
    batches of 4 (so rows are padded, and the last batch is short). With ``eos_early`` the fine-tune's
    end-of-sequence logit is raised, by the first of a few fixed shifts that does it, until answers end at
    different lengths: rows that end inside a batch that goes on (padded after their end, which must be cut)."""
    import torch

    from mlops_evaluation.lm_evaluate import HFModel, greedy_batched
    from mlops_training import held_out

    hf = load_hf(root / "tuned")
    rows = [json.loads(line) for line in (root / "datasets" / "instructions.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in rows if held_out(r, 0.1)][:10]
    assert len({len(hf.tokenizer(p)["input_ids"]) for p in prompts}) > 1  # the batches are padded
    eos = hf.tokenizer.eos_token_id

    def alone(model: HFModel) -> list[list[int]]:  # independently: plain generate, one prompt at a time
        out = []
        for prompt in prompts:
            enc = model.tokenizer(prompt, return_tensors="pt")
            ids = model.model.generate(**enc, do_sample=False, max_new_tokens=8,
                                       pad_token_id=model.tokenizer.pad_token_id)
            out.append(ids[0, enc["input_ids"].shape[1]:].tolist())
        return out

    expected = alone(hf)
    if eos_early:
        row = hf.model.lm_head.weight[eos].detach().clone()
        # the smallest shift of the eos logit, up or down, that ends answers at different lengths: the checkpoint
        # is trained here with a tokenizer trained on the repo's prose, so how far its answers are from ending
        # early (or late) changes with the docs (+0.01 once stopped all but one at once, another time none)
        shifts = [sign * 1e-4 * 2 ** (k / 2) for k in range(40) for sign in (1, -1)]  # |shift| 1e-4 .. ~74
        for shift in shifts:
            with torch.no_grad():
                hf.model.lm_head.weight[eos] = row + shift
            expected = alone(hf)
            if any(a[-1] == eos for a in expected) and len({len(a) for a in expected}) > 1:
                break
        else:
            pytest.fail(f"no shift of the eos logit ended answers at different lengths: {expected}")
    assert greedy_batched(hf, prompts, 8, batch=4) == expected
    assert greedy_batched(hf, prompts[:1], 8) == expected[:1]  # a batch of one: no padding at all


def test_evaluate_dispatches_a_registered_hf_version(root: Path, tmp_path: Path) -> None:
    import mlflow

    from mlops_core import mlflow_client
    from mlops_core.tracking import start_run
    from mlops_evaluation import evaluate

    work = tmp_path / "repo"
    shutil.copytree(root, work)
    tracking = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="artifacts", experiment="hf")
    client = mlflow_client(tracking, work)
    with start_run(tracking, work, run_name="damaged", seed=0) as run:
        mlflow.log_artifacts(str(work / "damaged"), "model")
    client.create_registered_model("hf")
    client.create_model_version("hf", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    cfg = PlatformConfig(project=ProjectConfig(model="hf", seed=0), evaluation=SECTION, tracking=tracking)
    report = evaluate(cfg, work, "latest", report_dir=tmp_path / "report", gates=("quality", "contract"),
                      log_to_run=False)
    gates = {g.name: g for g in report.gates}
    assert report.holdout["reference"] == "base checkpoint"
    assert not gates["quality"].passed and gates["contract"].passed
    markdown = (tmp_path / "report" / "evaluation.md").read_text()
    assert "perplexity" in markdown and "| model | exact match (floor 50%) | token accuracy |" in markdown
