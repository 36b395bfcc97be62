"""The gates as pure functions over arrays, hashes, timings and model metadata.

Each returns a :class:`GateResult`: a verdict, a reason a person can read, and the evidence behind it.
Nothing here touches MLflow, files or models; :mod:`mlops_evaluation.runner` gathers the inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.bootstrap import paired_bootstrap_f1
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.latency import LatencyRun
from mlops_evaluation.metrics import binary_metrics, slice_metrics
from mlops_model import EncoderSpec, EncoderSpecError, ModelKind, ThresholdChoice, kind_problem, resolve_threshold

GATES = ("quality", "reproducibility", "latency", "contract", "calibration")
TABULAR_ONLY = ("calibration",)
"""Gates of the tabular suite only (a language model's scores are no probability of a class)."""
LM_GATES = tuple(g for g in GATES if g not in TABULAR_ONLY)
"""The gates of the language-model suites: all but :data:`TABULAR_ONLY`."""
Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: ``passed``, a one-paragraph ``reason`` and the ``evidence`` (JSON-serialisable).

    ``inconclusive`` marks a gate that could not tell (the latency gate, when its budget of rounds ran out
    undecided): it does not pass (``passed`` is false, so it blocks like a failure), and every report shows it
    as INCONCLUSIVE rather than as a plain FAIL.
    """

    name: str
    passed: bool
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    inconclusive: bool = False

    def __post_init__(self) -> None:
        if self.passed and self.inconclusive:
            raise ValueError(f"gate {self.name!r}: a result cannot both pass and be inconclusive")

    @property
    def verdict(self) -> Verdict:
        """``pass``, ``fail`` or ``inconclusive``."""
        return "pass" if self.passed else "inconclusive" if self.inconclusive else "fail"

    @property
    def label(self) -> str:
        """The verdict as reports print it: ``pass``, ``FAIL`` or ``INCONCLUSIVE``."""
        return {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[self.verdict]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def _fmt(x: float) -> str:
    return f"{x:+.4f}"


def quality_gate(
    labels: Any, candidate_scores: Any, reference_scores: Any | None, slices: Mapping[str, Sequence[Any]],
    section: EvaluationConfig, *, reference_name: str = "champion", seed: int = 0,
    candidate_threshold: ThresholdChoice | None = None, reference_threshold: ThresholdChoice | None = None,
) -> GateResult:
    """Candidate F1 must beat the reference by ``min_improvement`` (point and, if configured, CI lower bound);
    no slice with enough rows and frauds (``tabular.min_slice_rows``, ``tabular.min_slice_positives``) may lose
    more than ``tabular.max_slice_regression`` F1.

    Each model decides at its own threshold (``candidate_threshold`` / ``reference_threshold``, resolved from
    its ``model.json`` by :func:`mlops_model.resolve_threshold`; ``None``: ``evaluation.tabular.decision_threshold`` or
    the legacy 0.5). The reason names both, and an override that disagrees with a recorded threshold.

    With ``reference_scores=None`` (no champion yet) the reference is the trivial baseline that flags every
    transaction as fraud: the best constant predictor for F1, so a model must at least beat "flag all".
    """
    y = np.asarray(labels).astype(np.int64)
    cand = np.asarray(candidate_scores, dtype=np.float64)
    baseline = reference_scores is None
    ref = np.ones_like(cand) if baseline else np.asarray(reference_scores, dtype=np.float64)
    ref_label = "trivial baseline (flag every transaction)" if baseline else reference_name
    key = "evaluation.tabular.decision_threshold"
    ct = candidate_threshold or resolve_threshold(None, section.tabular.decision_threshold, override_key=key,
                                                  model="the candidate")
    rt = ct if baseline else (reference_threshold or resolve_threshold(None, section.tabular.decision_threshold,
                                                                       override_key=key, model=reference_name))
    cand_m, ref_m = binary_metrics(y, cand, ct.value), binary_metrics(y, ref, rt.value)
    boot = paired_bootstrap_f1(y, cand >= ct.value, ref >= rt.value, mode=section.improvement_mode,
                               samples=section.bootstrap_samples, confidence=section.confidence, seed=seed)
    need = section.min_improvement
    point_ok = boot.estimate >= need
    ci_ok = boot.lower >= need or not section.require_ci_above_threshold
    cand_s = slice_metrics(y, cand, slices, ct.value)
    ref_s = slice_metrics(y, ref, slices, rt.value)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    regressions: list[str] = []
    for column, values in cand_s.items():
        table[column] = {}
        for value, m in values.items():
            delta = m["f1"] - ref_s[column][value]["f1"]
            gated = (m["rows"] >= section.tabular.min_slice_rows
                     and m["positives"] >= section.tabular.min_slice_positives)
            table[column][value] = {"rows": int(m["rows"]), "positives": int(m["positives"]),
                                    "candidate_f1": m["f1"], "reference_f1": ref_s[column][value]["f1"],
                                    "delta": delta, "gated": gated,
                                    "candidate_metrics": {k: m[k] for k in ("precision", "recall", "pr_auc",
                                                                            "roc_auc")}}
            if gated and -delta > section.tabular.max_slice_regression:
                regressions.append(f"{column}={value} F1 {_fmt(delta)}")
    unit = "absolute F1" if section.improvement_mode == "absolute" else "relative to the reference's F1"
    at = f"candidate at {ct.value:.4g}" + ("" if baseline else f", {ref_label} at {rt.value:.4g}")
    parts = [f"candidate F1 {cand_m['f1']:.4f} vs {ref_label} {ref_m['f1']:.4f} ({at}): improvement "
             f"{_fmt(boot.estimate)} ({unit}) {'≥' if point_ok else '<'} required {need:+.4f}"]
    notes = [c.note for c in ((ct,) if baseline else (ct, rt)) if c.source != "model" and (c.disagrees or
                                                                                           c.source == "legacy")]
    if notes:
        parts.append("thresholds: " + "; ".join(notes))
    if section.require_ci_above_threshold:
        parts.append(f"{boot.confidence:.0%} paired-bootstrap CI lower bound {_fmt(boot.lower)} "
                     f"{'≥' if boot.lower >= need else '<'} {need:+.4f}")
    else:
        parts.append(f"{boot.confidence:.0%} CI [{_fmt(boot.lower)}, {_fmt(boot.upper)}] reported, not gated")
    parts.append(f"slices regressing by more than {section.tabular.max_slice_regression:.3f}: "
                 + (", ".join(regressions) if regressions else "none"))
    return GateResult(
        "quality", point_ok and ci_ok and not regressions, "; ".join(parts),
        {"reference": ref_label, "baseline": baseline, "decision_threshold": ct.value,
         "thresholds": {"candidate": ct.as_dict(), "reference": None if baseline else rt.as_dict()},
         "mode": section.improvement_mode,
         "min_improvement": need, "candidate": cand_m, "reference_metrics": ref_m, "bootstrap": boot.as_dict(),
         "require_ci_above_threshold": section.require_ci_above_threshold, "slices": table,
         "slice_regressions": regressions, "max_slice_regression": section.tabular.max_slice_regression,
         "min_slice_rows": section.tabular.min_slice_rows, "min_slice_positives": section.tabular.min_slice_positives},
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


_EPS = 1e-9  # ratios of equal floats come out 1e-16 off; that must not flip a verdict


def _ci(x: Sequence[float]) -> str:
    return f"[{x[0]:+.1%}, {x[1]:+.1%}]"


def latency_gate(run: LatencyRun, tolerance: float, max_noise: float = 0.25, *, confidence: float = 0.95,
                 seed: int = 0, wall_max_ratio: float | None = None) -> GateResult:
    """Three outcomes from one interleaved run: pass, fail, or inconclusive (measure more).

    Judged on the CPU time of the calling thread (``run.a_ms`` …; :mod:`mlops_evaluation.latency` says why not
    wall-clock), on two paired statistics (:func:`mlops_evaluation.latency.paired_regression`): the **centre**,
    the median over requests of the per-request ratio candidate / champion, and the **tail**, p95 against p95.
    The per-request ratio cancels what the machine did while both ran (a slow spell hits A and B of one request
    alike) and its median does not see hiccups; the p95 rests on ~5 % of the samples, so the ~1 % of samples a
    loaded neighbour inflates cannot carry it, as they carry a p99 of a few hundred samples (p99 is reported,
    not judged). Each statistic has a paired bootstrap ``confidence`` interval, which already holds the run's
    noise; the allowance is ``tolerance`` alone.

    The **wall-clock backstop**: the median over requests of the paired wall-clock ratio B / A, with its CI. CPU
    time does not see a candidate that waits (a lock, I/O, a sleep, work on another thread); with
    ``wall_max_ratio`` set, a ratio whose CI lower end is above it fails the candidate, and a pass needs its upper
    end at or below it. The bound is wide: the neighbours' load is in wall-clock. ``None``: the ratio is reported,
    not judged (a run without wall-clock samples then says so).

    * **pass**: the upper ends of both intervals are ≤ ``tolerance`` (the run shows the candidate is at most
      that much slower), the A/A spread (champion against its own control series) is ≤ ``max_noise``, and the
      backstop holds;
    * **fail**: the lower end of either interval is > ``tolerance`` (the run shows it is slower than allowed)
      and, when the A/A spread is beyond ``max_noise``, above ``tolerance`` plus that spread too; or the
      backstop's lower end is > ``wall_max_ratio``;
    * **inconclusive** otherwise (``passed`` false, ``inconclusive`` true): :func:`latency_rounds` measures more.
    """
    if wall_max_ratio is not None and not run.has_wall:
        raise EvaluationError(f"wall_max_ratio={wall_max_ratio!r} bounds the wall-clock backstop, but the run has no "
                              "wall-clock samples: measure it with measure_interleaved, or pass wall_max_ratio=None")
    s = run.summary(confidence=confidence, seed=seed)
    c_low, c_high = s["centre_regression_ci"]
    t_low, t_high = s["tail_regression_ci"]
    noise = s["aa_noise"]
    noisy = noise > max_noise + _EPS
    bar = tolerance + (noise if noisy else 0.0)
    slower = [f"CPU-time {name} (CI lower end {low:+.1%} > {bar:+.1%})"
              for name, low in (("centre", c_low), ("tail", t_low)) if low > bar + _EPS]
    within = c_high <= tolerance + _EPS and t_high <= tolerance + _EPS
    backstop = _backstop(s["wall"], wall_max_ratio)
    if backstop == "fail":
        slower.append(f"the wall-clock backstop (paired ratio CI lower end {s['wall']['ratio_ci'][0]:.2f}× > bound "
                      f"{wall_max_ratio:.2f}×: the candidate waits, not computes)")
    verdict: Verdict = ("fail" if slower else
                        "pass" if within and not noisy and backstop in ("pass", None) else "inconclusive")
    evidence = {**s, "tolerance": tolerance, "allowed_regression": tolerance, "max_noise": max_noise,
                "wall_max_ratio": wall_max_ratio, "backstop": backstop, "verdict": verdict}
    reason = f"{_latency_head(verdict, slower, evidence)}; {_latency_figures(evidence)}"
    return GateResult("latency", verdict == "pass", reason, evidence, inconclusive=verdict == "inconclusive")


def _backstop(wall: Mapping[str, Any], bound: float | None) -> str | None:
    """``pass`` / ``fail`` / ``undecided`` of the paired wall-clock ratio's CI against ``bound``; ``None`` unjudged."""
    if bound is None or not wall:
        return None
    low, high = wall["ratio_ci"]
    return "fail" if low > bound + _EPS else "pass" if high <= bound + _EPS else "undecided"


def _latency_head(verdict: Verdict, slower: Sequence[str], e: Mapping[str, Any]) -> str:
    tolerance, noise, max_noise = e["tolerance"], e["aa_noise"], e["max_noise"]
    if verdict == "fail":
        return "slower than allowed: " + " and ".join(slower)
    if verdict == "pass":
        return (f"within tolerance: both CPU-time CI upper ends ≤ {tolerance:+.1%}"
                + (" and the wall-clock backstop holds" if e["backstop"] == "pass" else ""))
    if noise > max_noise + _EPS:
        return (f"too noisy to judge: the champion's CPU time differed by {noise:.0%} from its own interleaved control "
                f"series (limit {max_noise:.0%})")
    undecided = []
    if max(e["centre_regression_ci"][1], e["tail_regression_ci"][1]) > tolerance + _EPS:
        undecided.append(f"a CPU-time CI straddles the tolerance {tolerance:+.1%}")
    if e["backstop"] == "undecided":
        undecided.append(f"the wall-clock backstop's CI straddles its bound {e['wall_max_ratio']:.2f}×")
    return "undecided: " + " and ".join(undecided)


def _latency_figures(e: Mapping[str, Any]) -> str:
    """What was compared: CPU-time figures, then the wall-clock backstop's (or that it was not measured/bound)."""
    wall, bound = e["wall"], e["wall_max_ratio"]
    if not wall:
        wall_text = "wall-clock not measured (no backstop)"
    else:
        wall_text = (f"wall-clock paired ratio {wall['ratio']:.2f}× CI [{wall['ratio_ci'][0]:.2f}, "
                     f"{wall['ratio_ci'][1]:.2f}]" + (f" (backstop bound {bound:.2f}×)" if bound is not None else
                                                     " (reported, no backstop bound)"))
    return (f"judged on CPU time of the calling thread: centre (median per-request ratio) "
            f"{e['centre_regression']:+.1%}, {e['confidence']:.0%} CI {_ci(e['centre_regression_ci'])}; tail p95 "
            f"{e['candidate']['p95']:.3f} vs {e['champion']['p95']:.3f} ms {e['tail_regression']:+.1%}, CI "
            f"{_ci(e['tail_regression_ci'])}; A/A spread {e['aa_noise']:.1%} (limit {e['max_noise']:.0%}); tolerance "
            f"{e['tolerance']:.0%}; p99 {e['p99_regression']:+.1%} reported, not judged; {wall_text}; "
            f"{e['requests']} interleaved requests per model, {e['warmup']} warm-up dropped")


def latency_rounds(measure: Callable[[], LatencyRun], tolerance: float, max_noise: float = 0.25, *,
                   max_rounds: int = 5, confidence: float = 0.95, seed: int = 0,
                   wall_max_ratio: float | None = None) -> GateResult:
    """Measure rounds (``measure()``: one interleaved run) and judge all requests so far after each, until
    :func:`latency_gate` passes or fails, at most ``max_rounds`` rounds.

    Still undecided after the last round, the gate does not pass: it fails with ``inconclusive`` set and a
    reason beginning "inconclusive: could not tell within N rounds". ``evidence["rounds"]`` lists each round's
    verdict. Judging again after every round is a sequential test; what keeps its error rates low is that
    pass and fail need the whole interval on one side of the tolerance (a 1.3× slower candidate would need its
    upper end 20 points below its true regression) — ``benchmarks/gate_power.py`` measures the rates.
    """
    if max_rounds < 1:
        raise EvaluationError(f"max_rounds={max_rounds!r}: expected at least 1 round of latency measurement")
    run: LatencyRun | None = None
    history: list[dict[str, Any]] = []
    for i in range(1, max_rounds + 1):
        one = measure()
        run = one if run is None else run + one
        gate = latency_gate(run, tolerance, max_noise, confidence=confidence, seed=seed, wall_max_ratio=wall_max_ratio)
        history.append({"round": i, "requests": gate.evidence["requests"], "verdict": gate.verdict,
                        "centre_regression_ci": gate.evidence["centre_regression_ci"],
                        "tail_regression_ci": gate.evidence["tail_regression_ci"],
                        "aa_noise": gate.evidence["aa_noise"],
                        "wall_ratio_ci": gate.evidence["wall"].get("ratio_ci")})
        if not gate.inconclusive:
            return GateResult("latency", gate.passed, gate.reason,
                              {**gate.evidence, "rounds": history, "max_rounds": max_rounds})
    return GateResult("latency", False, f"inconclusive: could not tell within {max_rounds} rounds; {gate.reason}",
                      {**gate.evidence, "rounds": history, "max_rounds": max_rounds}, inconclusive=True)


def tabular_contract_gate(meta: Mapping[str, Any], *, feature_service: str,
                          available: Sequence[str]) -> GateResult:
    """The candidate's FeatureService is the one serving reads, and its input schema is what serving sends.

    Args:
        meta: the candidate's ``model.json``.
        feature_service: the FeatureService the serving transformer reads (``features.feature_service``).
        available: columns serving provides: request-time fields plus the FeatureService's features.
    """
    problems: list[str] = []
    features = meta.get("features") or {}
    encoder = features.get("encoder") or {}
    wrong_kind = kind_problem(meta, ModelKind.TABULAR)
    if wrong_kind is not None:
        problems.append(wrong_kind)
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
