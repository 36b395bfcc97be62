"""Language-model evaluation: windows, perplexity against hand-computed cases, and the gates end to end on a
tiny LLaMA-architecture model exported and registered in a real MLflow (SQLite) registry."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from mlops_config import EvaluationConfig, LMEvaluationConfig, PlatformConfig, ProjectConfig, TrackingConfig
from mlops_evaluation import EvaluationError
from mlops_evaluation.lm import build_lm, lm_contract_gate, lm_quality_gate, lm_windows, window_nll

ARCH = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "use_cache": False}
META = {"kind": "causal_lm", "architecture": ARCH, "features": {"tokenizer": "bytes", "vocab_size": 256}}


def _state(zero_head: bool, seed: int = 0) -> dict:
    import torch

    from mlops_training.zoo import build_causal_lm

    torch.manual_seed(seed)
    model = build_causal_lm(ARCH)
    if zero_head:
        torch.nn.init.zeros_(model.lm_head.weight)  # every logit 0: the uniform byte model, perplexity 256
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_windows_are_fixed_and_fingerprinted() -> None:
    val = np.arange(50, dtype=np.uint8)
    windows, digest = lm_windows(val, seq_len=9, count=3)
    assert windows.tolist() == [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]
    assert digest == hashlib.sha256(bytes(range(30))).hexdigest()
    assert lm_windows(val, seq_len=9, count=99)[0].shape == (5, 10)
    with pytest.raises(EvaluationError, match="a window needs 51"):
        lm_windows(val, seq_len=50, count=1)


def test_uniform_model_has_perplexity_256() -> None:
    windows, _ = lm_windows(np.frombuffer(b"def f(x):\n    return x\n" * 20, dtype=np.uint8), 31, 8)
    nll = window_nll(build_lm(META, _state(zero_head=True)), windows)
    assert nll == pytest.approx(np.full(8, math.log(256)), abs=1e-5)
    cfg = EvaluationConfig(bootstrap_samples=100)
    gate = lm_quality_gate(nll, None, cfg)  # no better than the uniform baseline: blocked
    assert not gate.passed and "uniform byte baseline" in gate.reason
    assert gate.evidence["candidate"]["perplexity"] == pytest.approx(256.0, rel=1e-5)


def test_lm_quality_arithmetic_and_contract() -> None:
    cand = np.full(10, math.log(100.0))  # perplexity 100
    ref = np.full(10, math.log(125.0))  # perplexity 125
    rel = lm_quality_gate(cand, ref, EvaluationConfig(improvement_mode="relative", min_improvement=0.15,
                                                      bootstrap_samples=100))
    assert rel.passed and rel.evidence["bootstrap"]["estimate"] == pytest.approx(0.2)  # (125 − 100) / 125
    strict = lm_quality_gate(cand, ref, EvaluationConfig(improvement_mode="relative", min_improvement=0.25,
                                                         bootstrap_samples=100))
    assert not strict.passed
    assert lm_contract_gate(META).passed
    bad = lm_contract_gate({**META, "features": {"tokenizer": "bpe", "vocab_size": 32000}})
    assert not bad.passed and "'bpe'" in bad.reason


def test_evaluate_runs_lm_gates_on_registered_versions(tmp_path: Path) -> None:
    import mlflow

    from mlops_core import lifecycle, mlflow_client
    from mlops_core.tracking import start_run
    from mlops_evaluation import evaluate
    from mlops_model import save_exported

    tracking = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="artifacts", experiment="lm")
    client = mlflow_client(tracking, tmp_path)

    def register(state: dict, name: str) -> str:
        folder = save_exported(tmp_path / name, state, META)
        with start_run(tracking, tmp_path, run_name=name, seed=0) as run:
            mlflow.log_artifacts(str(folder), "model")
        return client.create_model_version("llm", f"runs:/{run.info.run_id}/model",
                                                   run_id=run.info.run_id).version

    with start_run(tracking, tmp_path, run_name="init", seed=0):
        pass
    client.create_registered_model("llm")
    uniform = register(_state(zero_head=True), "uniform")
    random_init = register(_state(zero_head=False, seed=3), "random")
    for to in lifecycle.LIFECYCLE:
        lifecycle.promote(tracking, tmp_path, "llm", uniform, to, reason="set-up", actor="t", required_gates={})
    cfg = EvaluationConfig(lm=LMEvaluationConfig(windows=8, seq_len=32, corpus_max_bytes=200_000),
                           bootstrap_samples=100, latency_requests=20, latency_warmup=2, latency_repeats=1,
                           latency_max_noise=100.0)
    platform = PlatformConfig(project=ProjectConfig(model="llm", seed=0), evaluation=cfg, tracking=tracking)
    report = evaluate(platform, tmp_path, str(random_init), report_dir=tmp_path / "report",
                      gates=("quality", "latency", "contract"))
    gates = {g.name: g for g in report.gates}
    assert report.champion["version"] == str(uniform)
    assert gates["contract"].passed
    assert gates["quality"].evidence["reference_metrics"]["perplexity"] == pytest.approx(256.0, rel=1e-5)
    assert report.holdout["rows"] == 8 and report.holdout["tokens"] == 8 * 32
    assert "perplexity" in (tmp_path / "report" / "evaluation.md").read_text()
    run_id = client.get_model_version("llm", str(random_init)).run_id
    assert "evaluation/evaluation.json" in [f.path for f in client.list_artifacts(run_id, "evaluation")]


def test_byte_lm_latency_gate_times_on_one_torch_thread_and_restores_the_setting() -> None:
    """As the tabular gate and the HF generation gate: the timed forwards run on one intra-op thread (with the
    default, one per core, the idle helper threads spin on a loaded machine's cores and the timings with them);
    the caller's setting comes back afterwards. Fails on the gate that timed under the caller's setting."""
    import types

    import torch

    from mlops_evaluation.runner import ByteLMSuite, SuiteRun, run_suite

    seen: list[int] = []

    class Recording(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> types.SimpleNamespace:
            seen.append(torch.get_num_threads())
            return types.SimpleNamespace(logits=torch.zeros(*input_ids.shape, 256))

    cand = types.SimpleNamespace(module=Recording(), version="2", meta=META)
    champ = types.SimpleNamespace(module=Recording(), version="1", meta=META)
    cfg = EvaluationConfig(lm=LMEvaluationConfig(windows=4, seq_len=16, corpus_max_bytes=200_000), latency_requests=20,
                           latency_warmup=2, latency_repeats=1, latency_max_rounds=1, latency_max_noise=100.0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run = SuiteRun(cfg, None, None, None, Path("."), 0, None, None)  # type: ignore[arg-type]
        (gate,) = run_suite(ByteLMSuite(cand, champ, run), ["latency"])  # type: ignore[arg-type]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(seen) == 3 * 22 and set(seen) == {1}
    assert "one torch thread" in gate.evidence["timed"]
