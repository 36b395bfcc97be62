"""Language models (``causal_lm``): perplexity on a fixed, fingerprinted set of held-out corpus windows.

The windows are non-overlapping slices of the corpus's held-out tail (the part training validates on and
never fits), so every candidate and champion is scored on exactly the same bytes. Per window the mean
next-byte negative log-likelihood is kept; perplexity is ``exp`` of their mean (equal token counts per
window make that the token-level perplexity). The quality gate compares perplexities, lower being better,
with a paired bootstrap over windows; without a champion the baseline is the uniform byte model (256).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import GateResult

if TYPE_CHECKING:
    import torch

BYTE_VOCAB = 256


def build_lm(meta: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """Rebuild the exported LLaMA-architecture model (the training package owns its definition)."""
    from mlops_training import build_causal_lm

    module = build_causal_lm(meta["architecture"])
    missing, unexpected = module.load_state_dict(dict(tensors), strict=False)
    if [m for m in missing if not m.endswith("rotary_emb.inv_freq")] or unexpected:
        raise EvaluationError(f"exported LM weights do not fit its architecture: missing {missing[:5]!r}, "
                              f"unexpected {unexpected[:5]!r}")
    module.eval()
    return module


def lm_windows(val: np.ndarray, seq_len: int, count: int) -> tuple[np.ndarray, str]:
    """``count`` non-overlapping windows of ``seq_len + 1`` bytes from the start of ``val``, and their SHA-256."""
    width = seq_len + 1
    available = len(val) // width
    if available < 1:
        raise EvaluationError(f"held-out corpus has {len(val)} bytes; a window needs {width}: "
                              "raise evaluation.lm.corpus_max_bytes or lower evaluation.lm.seq_len")
    n = min(count, available)
    windows = np.asarray(val[: n * width], dtype=np.uint8).reshape(n, width)
    return windows, hashlib.sha256(windows.tobytes()).hexdigest()


def load_lm_holdout(section: EvaluationConfig) -> tuple[np.ndarray, dict[str, Any]]:
    """The fixed LM holdout from the corpus's held-out tail, with what the report says about it."""
    from mlops_training import load_corpus

    corpus = load_corpus(section.lm.corpus_max_bytes)
    windows, digest = lm_windows(corpus.val, section.lm.seq_len, section.lm.windows)
    return windows, {"rows": int(windows.shape[0]), "tokens": int(windows.shape[0] * section.lm.seq_len),
                     "fingerprint": digest, "corpus_sha256": corpus.sha256, "positives": None}


def window_nll(module: torch.nn.Module, windows: np.ndarray, batch: int = 8) -> np.ndarray:
    """Mean next-byte negative log-likelihood (nats) of each window."""
    import torch
    from torch.nn import functional

    out = []
    with torch.inference_mode():
        for i in range(0, len(windows), batch):
            t = torch.from_numpy(windows[i:i + batch].astype(np.int64))
            logits = module(input_ids=t[:, :-1]).logits.float()
            nll = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1),
                                           reduction="none").reshape(t.shape[0], -1)
            out.append(nll.mean(dim=1).numpy())
    return np.concatenate(out).astype(np.float64)


def _improvement(ppl_cand: Any, ppl_ref: Any, mode: str) -> Any:
    gain = np.asarray(ppl_ref) - np.asarray(ppl_cand)  # lower perplexity is better
    return gain if mode == "absolute" else gain / np.asarray(ppl_ref)


def lm_quality_gate(cand_nll: np.ndarray, ref_nll: np.ndarray | None, section: EvaluationConfig, *,
                    reference_name: str = "champion", seed: int = 0) -> GateResult:
    """Candidate perplexity must be lower than the reference's by ``min_improvement`` (point and CI bound)."""
    baseline = ref_nll is None
    ref = np.full_like(cand_nll, math.log(BYTE_VOCAB)) if ref_nll is None else np.asarray(ref_nll)
    label = "uniform byte baseline (perplexity 256)" if baseline else reference_name
    ppl_c, ppl_r = float(np.exp(cand_nll.mean())), float(np.exp(ref.mean()))
    estimate = float(_improvement(ppl_c, ppl_r, section.improvement_mode))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(cand_nll), size=(section.bootstrap_samples, len(cand_nll)))
    stats = _improvement(np.exp(cand_nll[idx].mean(axis=1)), np.exp(ref[idx].mean(axis=1)), section.improvement_mode)
    alpha = (1 - section.confidence) / 2
    lower, upper = (float(v) for v in np.quantile(stats, [alpha, 1 - alpha]))
    need = section.min_improvement
    ok = estimate >= need and (lower >= need or not section.require_ci_above_threshold)
    unit = "perplexity points" if section.improvement_mode == "absolute" else "relative to the reference"
    reason = (f"candidate perplexity {ppl_c:.3f} vs {label} {ppl_r:.3f}: reduction {estimate:+.4f} ({unit}) "
              f"{'≥' if estimate >= need else '<'} required {need:+.4f}; {section.confidence:.0%} paired-bootstrap "
              f"CI [{lower:+.4f}, {upper:+.4f}] over {len(cand_nll)} windows")
    return GateResult("quality", ok, reason, {
        "reference": label, "baseline": baseline, "metric": "perplexity", "mode": section.improvement_mode,
        "min_improvement": need, "candidate": {"perplexity": ppl_c, "nll": float(cand_nll.mean())},
        "reference_metrics": {"perplexity": ppl_r, "nll": float(ref.mean())},
        "bootstrap": {"estimate": estimate, "lower": lower, "upper": upper, "confidence": section.confidence,
                      "samples": section.bootstrap_samples, "seed": seed},
        "require_ci_above_threshold": section.require_ci_above_threshold, "slices": {}})


def lm_contract_gate(meta: Mapping[str, Any]) -> GateResult:
    """A byte-level LM: tokenizer ``bytes`` with 256 symbols, and an architecture of that vocabulary."""
    features = meta.get("features") or {}
    vocab = (meta.get("architecture") or {}).get("vocab_size")
    problems = []
    if features.get("tokenizer") != "bytes":
        problems.append(f"tokenizer {features.get('tokenizer')!r} is not 'bytes'")
    if features.get("vocab_size") != BYTE_VOCAB or vocab != BYTE_VOCAB:
        problems.append(f"vocab sizes {features.get('vocab_size')!r} (features) / {vocab!r} (architecture) "
                        f"are not {BYTE_VOCAB}")
    evidence = {"tokenizer": features.get("tokenizer"), "vocab_size": vocab}
    if problems:
        return GateResult("contract", False, "; ".join(problems), evidence)
    return GateResult("contract", True, f"byte tokenizer, vocabulary {vocab}", evidence)
