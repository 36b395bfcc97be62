"""The four gates as pure functions over arrays, hashes, timings and model metadata.

Each returns a :class:`GateResult`: a verdict, a reason a person can read, and the evidence behind it.
Nothing here touches MLflow, files or models; :mod:`mlops_evaluation.runner` gathers the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.bootstrap import paired_bootstrap_f1
from mlops_evaluation.latency import LatencyRun
from mlops_evaluation.metrics import binary_metrics, slice_metrics
from mlops_model import EncoderSpec, EncoderSpecError

GATES = ("quality", "reproducibility", "latency", "contract")


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: ``passed``, a one-paragraph ``reason`` and the ``evidence`` (JSON-serialisable)."""

    name: str
    passed: bool
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(x: float) -> str:
    return f"{x:+.4f}"


def quality_gate(
    labels: Any, candidate_scores: Any, reference_scores: Any | None, slices: Mapping[str, Sequence[Any]],
    section: EvaluationConfig, *, reference_name: str = "champion", seed: int = 0,
) -> GateResult:
    """Candidate F1 must beat the reference by ``min_improvement`` (point and, if configured, CI lower bound);
    no slice with enough rows may lose more than ``max_slice_regression`` F1.

    With ``reference_scores=None`` (no champion yet) the reference is the trivial baseline that flags every
    transaction as fraud: the best constant predictor for F1, so a model must at least beat "flag all".
    """
    y = np.asarray(labels).astype(np.int64)
    cand = np.asarray(candidate_scores, dtype=np.float64)
    baseline = reference_scores is None
    ref = np.ones_like(cand) if baseline else np.asarray(reference_scores, dtype=np.float64)
    ref_label = "trivial baseline (flag every transaction)" if baseline else reference_name
    t = section.decision_threshold
    cand_m, ref_m = binary_metrics(y, cand, t), binary_metrics(y, ref, t)
    boot = paired_bootstrap_f1(y, cand >= t, ref >= t, mode=section.improvement_mode,
                               samples=section.bootstrap_samples, confidence=section.confidence, seed=seed)
    need = section.min_improvement
    point_ok = boot.estimate >= need
    ci_ok = boot.lower >= need or not section.require_ci_above_threshold
    cand_s = slice_metrics(y, cand, slices, t)
    ref_s = slice_metrics(y, ref, slices, t)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    regressions: list[str] = []
    for column, values in cand_s.items():
        table[column] = {}
        for value, m in values.items():
            delta = m["f1"] - ref_s[column][value]["f1"]
            gated = m["rows"] >= section.min_slice_rows
            table[column][value] = {"rows": int(m["rows"]), "positives": int(m["positives"]),
                                    "candidate_f1": m["f1"], "reference_f1": ref_s[column][value]["f1"],
                                    "delta": delta, "gated": gated,
                                    "candidate_metrics": {k: m[k] for k in ("precision", "recall", "pr_auc",
                                                                            "roc_auc")}}
            if gated and -delta > section.max_slice_regression:
                regressions.append(f"{column}={value} F1 {_fmt(delta)}")
    unit = "absolute F1" if section.improvement_mode == "absolute" else "relative to the reference's F1"
    parts = [f"candidate F1 {cand_m['f1']:.4f} vs {ref_label} {ref_m['f1']:.4f}: improvement {_fmt(boot.estimate)} "
             f"({unit}) {'≥' if point_ok else '<'} required {need:+.4f}"]
    if section.require_ci_above_threshold:
        parts.append(f"{boot.confidence:.0%} paired-bootstrap CI lower bound {_fmt(boot.lower)} "
                     f"{'≥' if boot.lower >= need else '<'} {need:+.4f}")
    else:
        parts.append(f"{boot.confidence:.0%} CI [{_fmt(boot.lower)}, {_fmt(boot.upper)}] reported, not gated")
    parts.append(f"slices regressing by more than {section.max_slice_regression:.3f}: "
                 + (", ".join(regressions) if regressions else "none"))
    return GateResult(
        "quality", point_ok and ci_ok and not regressions, "; ".join(parts),
        {"reference": ref_label, "baseline": baseline, "decision_threshold": t, "mode": section.improvement_mode,
         "min_improvement": need, "candidate": cand_m, "reference_metrics": ref_m, "bootstrap": boot.as_dict(),
         "require_ci_above_threshold": section.require_ci_above_threshold, "slices": table,
         "slice_regressions": regressions, "max_slice_regression": section.max_slice_regression,
         "min_slice_rows": section.min_slice_rows},
    )


def reproducibility_gate(
    expected: Mapping[str, Any], reruns: Sequence[Mapping[str, Any]], *, device: str = "cpu",
    max_rel_diff: float | None = None, rtol: float = 1e-3,
) -> GateResult:
    """Re-runs of the recorded config must give the expected weights: bit-identical (same SHA-256) on CPU;
    on GPU, a largest relative weight difference within ``rtol`` (``max_rel_diff`` measured by the caller).

    Args:
        expected: ``{"weights_sha256", "data_hash", "steps", "source"}`` — what the re-runs must reproduce.
        reruns: one dict per re-run with the same keys (``source`` says how it was made).
    """
    if not reruns:
        return GateResult("reproducibility", False, "no re-run was made: nothing to compare", {"expected": expected})
    hashes = [r.get("weights_sha256") for r in reruns]
    same_hash = all(h == expected.get("weights_sha256") for h in hashes)
    data_ok = all(r.get("data_hash") == expected.get("data_hash") for r in reruns) or not expected.get("data_hash")
    evidence: dict[str, Any] = {"expected": dict(expected), "reruns": [dict(r) for r in reruns], "device": device}
    if not data_ok:
        seen = sorted({str(r.get("data_hash"))[:12] for r in reruns})
        return GateResult("reproducibility", False,
                          f"the re-run read different data (hash {seen}) than recorded "
                          f"({str(expected.get('data_hash'))[:12]}): the recorded data version is gone or changed",
                          evidence)
    short = str(expected.get("weights_sha256"))[:12]
    if device == "cpu":
        if same_hash:
            return GateResult("reproducibility", True,
                              f"{len(reruns)} re-run(s) of {expected.get('steps')} steps on CPU gave bit-identical "
                              f"weights (sha256 {short}…, {expected.get('source')})", evidence)
        return GateResult("reproducibility", False,
                          f"re-run weights differ on CPU: expected sha256 {short}… ({expected.get('source')}), got "
                          f"{[str(h)[:12] for h in hashes]}: training is not deterministic for the recorded "
                          "config, seed and data", evidence)
    evidence.update(max_rel_diff=max_rel_diff, rtol=rtol)
    ok = same_hash or (max_rel_diff is not None and max_rel_diff <= rtol)
    return GateResult("reproducibility", ok,
                      f"on {device}: largest relative weight difference {max_rel_diff!r} "
                      f"{'≤' if ok else '>'} tolerance {rtol}", evidence)


def latency_gate(run: LatencyRun, tolerance: float, max_noise: float = 1.0, *, confidence: float = 0.95,
                 seed: int = 0) -> GateResult:
    """Candidate p99 may exceed the champion's by at most ``tolerance`` plus the measured A/A noise.

    The candidate fails when the lower end of the paired bootstrap CI (``confidence``) of its p99 regression
    is above that allowance: the run shows, beyond its own sampling noise, a slowdown larger than allowed.
    When the A/A noise itself exceeds ``max_noise`` the run cannot tell models apart and the gate fails.
    """
    s = run.summary(confidence=confidence, seed=seed)
    allowed = tolerance + s["aa_noise"]
    low, high = s["p99_regression_ci"]
    ok = low <= allowed
    if s["aa_noise"] > max_noise:
        return GateResult("latency", False,
                          f"too noisy to judge: the champion's p99 differed by {s['aa_noise']:.0%} between its own "
                          f"two interleaved series (limit {max_noise:.0%}); rerun on a quieter machine",
                          {**s, "tolerance": tolerance, "allowed_regression": allowed, "max_noise": max_noise})
    reason = (f"p99 {s['candidate']['p99']:.3f} ms vs champion {s['champion']['p99']:.3f} ms: "
              f"{s['p99_regression']:+.1%} ({confidence:.0%} CI {low:+.1%} … {high:+.1%}; lower end "
              f"{'≤' if ok else '>'} allowed {allowed:+.1%} = tolerance {tolerance:.0%} + A/A noise "
              f"{s['aa_noise']:.1%}); p50 {s['candidate']['p50']:.3f} vs "
              f"{s['champion']['p50']:.3f} ms over {s['requests']} interleaved requests, {s['warmup']} warm-up dropped")
    return GateResult("latency", ok, reason, {**s, "tolerance": tolerance, "allowed_regression": allowed})


def contract_gate(meta: Mapping[str, Any], *, feature_service: str, available: Sequence[str]) -> GateResult:
    """The candidate's FeatureService is the one serving reads, and its input schema is what serving sends.

    Args:
        meta: the candidate's ``model.json``.
        feature_service: the FeatureService the serving transformer reads (``features.feature_service``).
        available: columns serving provides: request-time fields plus the FeatureService's features.
    """
    problems: list[str] = []
    features = meta.get("features") or {}
    encoder = features.get("encoder") or {}
    if meta.get("kind") != "tabular_mlp":
        problems.append(f"kind {meta.get('kind')!r} is not 'tabular_mlp'")
    got_service = features.get("feature_service")
    if got_service != feature_service:
        problems.append(f"FeatureService {got_service!r} != serving's {feature_service!r}")
    try:
        needed = sorted(EncoderSpec.from_dict(encoder, source="features.encoder").input_columns)
    except EncoderSpecError as exc:
        problems.append(str(exc))
        needed = []
    missing = sorted(set(needed) - set(available))
    if missing:
        problems.append(f"inputs {missing} are not provided by serving")
    if not needed:
        problems.append("model.json has no encoder input columns")
    dims = ((meta.get("architecture") or {}).get("input_dim"), encoder.get("input_dim"))
    if dims[0] != dims[1]:
        problems.append(f"architecture input_dim {dims[0]!r} != encoder input_dim {dims[1]!r}")
    evidence = {"feature_service": got_service, "expected_feature_service": feature_service, "inputs": needed,
                "missing_inputs": missing, "input_dim": dims[0], "encoder_input_dim": dims[1]}
    if problems:
        return GateResult("contract", False, "; ".join(problems), evidence)
    return GateResult("contract", True, f"FeatureService {got_service!r} and {len(needed)} input columns match "
                      f"serving; input_dim {dims[0]}", evidence)
