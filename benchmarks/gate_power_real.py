"""The real-model arm of ``gate_power.py``: the tabular latency gate on real models, timed on this machine.

The data is the platform's own (``prepare_local_data``: generated transactions through the gate, Feast features,
the point-in-time training set) in a temporary folder; the holdout is :func:`mlops_evaluation.split_holdout`'s.
The champion is the fraud model as configured (``training.tabular.hidden_sizes``) with its encoder fitted on the
training split (``EncoderSpec.fit``, as training fits it) and a few full-batch steps of training; the slower
candidate is a wider and deeper network on the same encoder. Both are :class:`mlops_model.ExportedModel`\\ s, and
every gate is :func:`mlops_evaluation.runner.check_latency`, which times ``score_records`` (encode + forward) on
holdout records exactly as ``mlops evaluate`` does.

Before the gates, the candidate's end-to-end slowdown is measured (median over interleaved batches of the
per-batch ratio): it must be at least 1.5×, or the arm reports the precondition as not met instead of claiming
power it did not test. Targets: the slower candidate never passes; the champion against a second load of itself
passes at least 9 of 10.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlops_config import EvaluationConfig, load_config

REPO = Path(__file__).resolve().parents[1]
SLOW_HIDDEN = (768, 768, 384)
"""The slower candidate: 12× the width and one layer more than the configured (64, 32). (512, 512, 256) measured
only 1.345× end to end at one row per batch (load 1.1): encoding a record costs about 115 µs, the (64, 32)
forward 24 µs and that network's 72 µs on one thread, so the precondition failed; this one's forward is 116 µs,
about 1.65× end to end."""
MIN_SLOWDOWN = 1.5
TARGETS = {"real_slower_passed_max": 0.0, "real_self_passed_min": 0.9}


def _fit(x: np.ndarray, y: np.ndarray, hidden: tuple[int, ...], *, steps: int, seed: int) -> Any:
    """The fraud MLP trained ``steps`` full-batch AdamW steps (class-weighted BCE, like the trainer)."""
    import torch

    from mlops_model import build_tabular_mlp

    torch.manual_seed(seed)
    net = build_tabular_mlp({"input_dim": x.shape[1], "hidden_sizes": list(hidden)})
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor((len(y) - y.sum()) / max(y.sum(), 1.0)))
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(net(xt).squeeze(-1), yt).backward()
        opt.step()
    return net.eval()


def _scorer(name: str, net: Any, encoder: Any, hidden: tuple[int, ...], folder: Path) -> Any:
    from mlops_evaluation.scorer import Scorer
    from mlops_model import ExportedModel

    meta = {"kind": "tabular_mlp", "architecture": {"input_dim": encoder.input_dim, "hidden_sizes": list(hidden)},
            "features": {"encoder": encoder.to_dict()}}
    return Scorer(name, None, meta, net, folder, tabular=ExportedModel(folder, meta, net, encoder))


def _slowdown(champion: Any, candidate: Any, records: list[dict[str, Any]], *, batch: int, pairs: int = 2000
              ) -> float:
    """Median over interleaved single calls of candidate / champion time per batch (``score_records``)."""
    ratios = []
    batches = [records[i:i + batch] for i in range(0, len(records) - batch + 1, batch)]
    for i in range(pairs):
        b = batches[i % len(batches)]
        t0 = time.perf_counter_ns()
        champion(b)
        t1 = time.perf_counter_ns()
        candidate(b)
        t2 = time.perf_counter_ns()
        ratios.append((t2 - t1) / max(t1 - t0, 1))
    return float(np.median(ratios))


def power(section: EvaluationConfig, *, runs: int, seed: int) -> dict[str, Any]:
    """``runs`` latency gates of the slower candidate and of the champion against itself; rates and figures."""
    from mlops_evaluation.holdout import split_holdout
    from mlops_evaluation.runner import check_latency
    from mlops_features import prepare_local_data, training_set
    from mlops_model import EncoderSpec

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gate-power-") as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "configs", root / "configs")
        shutil.copytree(REPO / "feature_repo", root / "feature_repo")
        cfg = load_config(model="fraud", config_dir=root / "configs", overrides=["data.rows=20000"],
                          environ={}).config
        contract = cfg.declared_contract("the gate-power bench")
        prepare_local_data(cfg.data, cfg.features, root, contract=contract, seed=cfg.project.seed)
        df = training_set(cfg.features, cfg.data, root, contract=contract)
        holdout = split_holdout(df, cfg.evaluation.tabular.holdout_fraction, label=contract.label,
                                record_id=contract.record_id)
        train = df[~df["transaction_id"].isin(holdout.frame["transaction_id"])]
        encoder = EncoderSpec.fit(train, contract=contract)
        x, y = encoder.encode_frame(train), train["is_fraud"].to_numpy().astype(np.float64)
        hidden = tuple(cfg.training.tabular.hidden_sizes)
        net = _fit(x, y, hidden, steps=50, seed=seed)
        champion = _scorer("champion", net, encoder, hidden, root)
        itself = _scorer("itself", _fit(x, y, hidden, steps=50, seed=seed), encoder, hidden, root)
        slow = _scorer("slower", _fit(x[:2048], y[:2048], SLOW_HIDDEN, steps=5, seed=seed + 1), encoder,
                       SLOW_HIDDEN, root)
        rows = holdout.frame.iloc[:256]
        records = rows.astype(object).where(rows.notna(), None).to_dict("records")
        ratio = _slowdown(champion.serving_predictor()[1], slow.serving_predictor()[1], records,
                          batch=section.tabular.latency_batch_rows)
        verdicts: dict[str, dict[str, int]] = {}
        rounds: dict[str, list[int]] = {}
        missed: dict[str, list[str]] = {}
        for arm, cand, expected in (("slower", slow, "fail"), ("itself", itself, "pass")):
            verdicts[arm] = {"pass": 0, "fail": 0, "inconclusive": 0}
            rounds[arm], missed[arm] = [], []
            for run in range(runs):
                gate = check_latency(cand, champion, holdout, section, seed=seed * 1000 + run)
                verdicts[arm][gate.verdict] += 1
                rounds[arm].append(len(gate.evidence.get("rounds", [])))
                if gate.verdict != expected:  # the reviewer sees why: the gate's own reason, whole
                    missed[arm].append(gate.reason)
    table = {arm: {**{k: round(v / runs, 4) for k, v in counts.items()}, "runs": runs,
                   "rounds_median": float(np.median(rounds[arm])), "unexpected_reasons": missed[arm]}
             for arm, counts in verdicts.items()}
    precondition = ratio >= MIN_SLOWDOWN
    passed = {arm: counts["pass"] / runs for arm, counts in verdicts.items()}
    met = {"real_slower_passed_max": precondition and passed["slower"] <= TARGETS["real_slower_passed_max"],
           "real_self_passed_min": passed["itself"] >= TARGETS["real_self_passed_min"],
           "real_slowdown_at_least_1.5x": precondition}
    return {**table, "slowdown_end_to_end": round(ratio, 3), "champion_hidden": list(hidden),
            "slower_hidden": list(SLOW_HIDDEN), "batch_rows": section.tabular.latency_batch_rows,
            "load_average": [round(v, 2) for v in os.getloadavg()], "cpus": os.cpu_count(),
            "seconds": round(time.perf_counter() - started, 1), "met": met}
