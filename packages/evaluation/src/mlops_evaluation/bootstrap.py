"""Paired bootstrap of the F1 difference between two models scored on the same rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from mlops_evaluation.errors import EvaluationError
from mlops_model import statistics

f1 = statistics.f1_counts

Mode = Literal["absolute", "relative"]


@dataclass(frozen=True)
class BootstrapResult:
    """Point estimate and percentile interval of the improvement of A over B (``mode`` says which kind)."""

    mode: Mode
    estimate: float
    lower: float
    upper: float
    confidence: float
    samples: int
    seed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def improvement(f1_a: Any, f1_b: Any, mode: Mode) -> Any:
    """``f1_a − f1_b`` (absolute) or ``(f1_a − f1_b) / f1_b`` (relative; +inf when B scores 0 and A more)."""
    a, b = np.asarray(f1_a, dtype=np.float64), np.asarray(f1_b, dtype=np.float64)
    if mode == "absolute":
        return a - b
    if mode == "relative":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b > 0, (a - b) / np.where(b > 0, b, 1.0), np.where(a > b, np.inf, 0.0))
    raise EvaluationError(f"improvement mode {mode!r} is not 'absolute' or 'relative'")


def paired_bootstrap_f1(
    labels: Any, pred_a: Any, pred_b: Any, *, mode: Mode = "absolute", samples: int = 1000,
    confidence: float = 0.95, seed: int = 0, chunk: int = 100,
) -> BootstrapResult:
    """Resample rows with replacement (the same rows for both models) and take percentiles of the improvement.

    Args:
        labels: 0/1 truth. pred_a, pred_b: 0/1 predictions of the candidate (A) and reference (B).
        mode: ``absolute`` F1 difference or ``relative`` to B's F1.
        samples: bootstrap resamples. confidence: two-sided level of the interval. seed: RNG seed.
        chunk: resamples drawn at once (memory: ``chunk × rows`` indices).
    """
    y = np.asarray(labels).astype(bool)
    a = np.asarray(pred_a).astype(bool)
    b = np.asarray(pred_b).astype(bool)
    if not (y.shape == a.shape == b.shape) or y.ndim != 1 or len(y) == 0:
        raise EvaluationError(f"labels {y.shape}, pred_a {a.shape}, pred_b {b.shape}: expected equal non-empty 1-D")
    if samples < 1 or not 0 < confidence < 1:
        raise EvaluationError(f"samples={samples!r} must be ≥ 1 and confidence={confidence!r} in (0, 1)")
    # Per-row contributions: resampling rows resamples the confusion counts of both models together.
    parts = np.stack([a & y, a & ~y, ~a & y, b & y, b & ~y, ~b & y]).astype(np.int32)
    rng = np.random.default_rng(seed)
    stats = np.empty(samples)
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        idx = rng.integers(0, len(y), size=(n, len(y)))
        c = parts[:, idx].sum(axis=2)
        stats[start:start + n] = improvement(f1(c[0], c[1], c[2]), f1(c[3], c[4], c[5]), mode)
    full = parts.sum(axis=1)
    estimate = float(improvement(f1(full[0], full[1], full[2]), f1(full[3], full[4], full[5]), mode))
    alpha = (1 - confidence) / 2
    lower, upper = np.quantile(stats, [alpha, 1 - alpha])
    return BootstrapResult(mode, estimate, float(lower), float(upper), confidence, samples, seed)


def paired_bootstrap_perplexity(
    nll_a: Any, nll_b: Any, tokens: Any, *, samples: int = 1000, confidence: float = 0.95, seed: int = 0,
) -> BootstrapResult:
    """Relative perplexity reduction of A against B, ``(ppl_b − ppl_a) / ppl_b``, with a paired bootstrap over
    examples (the same examples for both models; positive = A is better).

    Perplexity is token-weighted: ``exp(Σ nll / Σ tokens)`` over the (resampled) examples.

    Args:
        nll_a, nll_b: per-example summed negative log-likelihood (nats) of the candidate (A) and reference (B).
        tokens: per-example count of scored tokens (the same for both: same tokenizer and examples).
        samples: resamples, drawn in one ``rng.integers(0, n, size=(samples, n))``. seed: RNG seed.
    """
    a, b = np.asarray(nll_a, dtype=np.float64), np.asarray(nll_b, dtype=np.float64)
    n = np.asarray(tokens, dtype=np.float64)
    if not (a.shape == b.shape == n.shape) or a.ndim != 1 or len(a) == 0:
        raise EvaluationError(f"nll_a {a.shape}, nll_b {b.shape}, tokens {n.shape}: expected equal non-empty 1-D")
    if (n <= 0).any():
        raise EvaluationError(f"examples {np.flatnonzero(n <= 0).tolist()[:5]} score no tokens; expected ≥ 1 each")
    if samples < 1 or not 0 < confidence < 1:
        raise EvaluationError(f"samples={samples!r} must be ≥ 1 and confidence={confidence!r} in (0, 1)")
    idx = np.random.default_rng(seed).integers(0, len(a), size=(samples, len(a)))
    count = n[idx].sum(axis=1)
    ppl_a, ppl_b = np.exp(a[idx].sum(axis=1) / count), np.exp(b[idx].sum(axis=1) / count)
    full_a, full_b = np.exp(a.sum() / n.sum()), np.exp(b.sum() / n.sum())
    alpha = (1 - confidence) / 2
    lower, upper = np.quantile((ppl_b - ppl_a) / ppl_b, [alpha, 1 - alpha])
    return BootstrapResult("relative", float((full_b - full_a) / full_b), float(lower), float(upper), confidence,
                           samples, seed)
