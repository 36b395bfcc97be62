"""Per-request cost of Platt calibration: the old path (float32 sigmoid, then its logit again, then Platt: separate
NumPy calls) against Platt folded onto the logit in one expression (:func:`mlops_model.served_scores`, what
``ExportedModel.score_encoded`` does now), in one run.

An export of the fraud MLP (``training.tabular`` defaults: hidden 64, 32) with a recorded Platt calibrator, scored
one row per request as serving's hot path does, on one torch thread. Each timing is ``--calls`` requests measured
with ``time.thread_time_ns`` (this thread's CPU time: other processes on the machine do not count); the arms
alternate for ``--rounds`` rounds and each arm's figure is the median over rounds, in µs per request. Reported:
the whole scorer (forward + calibration) old and new, and the calibration step alone (from the network's output
tensor to served float64 probabilities) old and new, with the largest difference of the probabilities between the
arms. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def old_calibrate(model: Any, out: Any) -> np.ndarray:
    """The calibration step as it was: float32 sigmoid on the output tensor, float64, Calibration.apply."""
    import torch

    scores = torch.sigmoid(out).reshape(-1).numpy().astype(np.float64)
    return model.calibration.apply(scores)


def new_calibrate(model: Any, out: Any) -> np.ndarray:
    from mlops_model import served_scores

    return served_scores(out.reshape(-1).numpy(), model.calibration)


def old_score(model: Any, x: np.ndarray) -> np.ndarray:
    """``ExportedModel.score_encoded`` as it was before Platt was folded onto the logit (one batch)."""
    import torch

    if x.ndim != 2 or x.shape[1] != model.input_dim:
        raise ValueError(x.shape)
    x = np.ascontiguousarray(x, dtype=np.float32)
    with torch.inference_mode():
        parts = [torch.sigmoid(model.network(torch.from_numpy(x))).reshape(-1).numpy()]
    scores = np.concatenate(parts).astype(np.float64)
    return model.calibration.apply(scores)


def timed(fn: Any, calls: int) -> float:
    """µs of this thread's CPU time per call, over ``calls`` calls."""
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls / 1e3


def export(folder: Path, input_dim: int, a: float, b: float) -> Path:
    import torch

    from mlops_config import TrainingConfig
    from mlops_model import Calibration, build_tabular_mlp, save_exported

    tab = TrainingConfig().tabular
    arch = {"input_dim": input_dim, "hidden_sizes": list(tab.hidden_sizes), "dropout": 0.0}
    encoder = {"version": 1, "input_dim": input_dim, "derived": [], "categorical": [],
               "numeric": [{"name": f"f{i}", "log": False, "mean": 0.0, "std": 1.0} for i in range(input_dim)]}
    torch.manual_seed(0)
    meta = {"kind": "tabular_mlp", "architecture": arch, "features": {"encoder": encoder},
            "calibration": Calibration("platt", a=a, b=b).to_dict()}
    return save_exported(folder, build_tabular_mlp(arch).state_dict(), meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-dim", type=int, default=32, help="encoded width of one row")
    parser.add_argument("--calls", type=int, default=2000, help="requests per timing")
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds per arm")
    args = parser.parse_args()

    import torch

    from mlops_model import ExportedModel

    torch.set_num_threads(1)  # one request, one thread: what serving's per-request cost is
    with tempfile.TemporaryDirectory(prefix="platt-fold-") as tmp:
        model = ExportedModel.load(export(Path(tmp) / "m", args.input_dim, a=0.84, b=-2.3))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, args.input_dim)).astype(np.float32)
    with torch.inference_mode():
        out = model.network(torch.from_numpy(x))
    many = rng.normal(size=(4096, args.input_dim)).astype(np.float32)
    max_diff = float(np.max(np.abs(model.score_encoded(many) - old_score(model, many))))
    arms = {"score_old": lambda: old_score(model, x), "score_new": lambda: model.score_encoded(x),
            "calibrate_old": lambda: old_calibrate(model, out), "calibrate_new": lambda: new_calibrate(model, out)}
    for fn in arms.values():  # warm up
        timed(fn, 200)
    samples: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(args.rounds):
        for name, fn in arms.items():
            samples[name].append(timed(fn, args.calls))
    med = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    print(json.dumps({
        "benchmark": "platt_fold", "unit": "us_per_one_row_request_thread_cpu_median",
        "input_dim": args.input_dim, "hidden_sizes": list(model.meta["architecture"]["hidden_sizes"]),
        "calls": args.calls, "rounds": args.rounds, "torch_threads": torch.get_num_threads(), **med,
        "score_saved_us": round(med["score_old"] - med["score_new"], 3),
        "score_ratio_new_old": round(med["score_new"] / med["score_old"], 4),
        "calibrate_saved_us": round(med["calibrate_old"] - med["calibrate_new"], 3),
        "max_abs_prob_diff_4096_rows": max_diff,
    }))


if __name__ == "__main__":
    main()
