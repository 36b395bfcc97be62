"""The gates on hand-built inputs: each verdict and reason checked against arithmetic done here."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from mlops_config import EvaluationConfig, TabularEvaluationConfig
from mlops_evaluation import (
    EvaluationError,
    LatencyRun,
    latency_gate,
    measure_interleaved,
    percentiles,
    quality_gate,
    reproducibility_gate,
    tabular_contract_gate,
)
from tests.support.cpu import burn


def _data(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(int)
    slices = rng.choice(["web", "app"], n)
    return y, slices, rng.random(n)


def test_quality_passes_a_clearly_better_candidate_and_blocks_a_worse_one() -> None:
    y, slices, noise = _data()
    good = np.where(noise < 0.9, y, 1 - y) * 0.8 + 0.1  # 10% of rows wrong
    weak = np.where(noise < 0.7, y, 1 - y) * 0.8 + 0.1  # 30% wrong
    cfg = EvaluationConfig(bootstrap_samples=300, tabular=TabularEvaluationConfig(min_slice_rows=100))
    passed = quality_gate(y, good, weak, {"channel": slices}, cfg)
    assert passed.passed, passed.reason
    blocked = quality_gate(y, weak, good, {"channel": slices}, cfg)
    assert not blocked.passed
    assert "< required +0.0200" in blocked.reason
    # F1 from counts, independently: better model F1 - weaker model F1
    def f1(s: np.ndarray) -> float:
        p = s >= 0.5
        tp, fp, fn = np.sum(p & (y == 1)), np.sum(p & (y == 0)), np.sum(~p & (y == 1))
        return 2 * tp / (2 * tp + fp + fn)
    assert passed.evidence["bootstrap"]["estimate"] == pytest.approx(f1(good) - f1(weak))
    assert {r.split(" ")[0] for r in blocked.evidence["slice_regressions"]} == {"channel=web", "channel=app"}


def test_quality_ci_and_slice_rules() -> None:
    y, slices, noise = _data(600, seed=1)
    ref = np.where(noise < 0.8, y, 1 - y) * 0.8 + 0.1
    # Candidate: identical to the reference except slightly better on a few rows → tiny gain, wide CI.
    cand = ref.copy()
    fix = np.flatnonzero((ref >= 0.5) != (y == 1))[:6]
    cand[fix] = y[fix] * 0.8 + 0.1
    strict = EvaluationConfig(bootstrap_samples=300, min_improvement=0.0, require_ci_above_threshold=True,
                              tabular=TabularEvaluationConfig(min_slice_rows=10))
    gate = quality_gate(y, cand, ref, {"channel": slices}, strict)
    assert gate.evidence["bootstrap"]["estimate"] > 0
    assert gate.evidence["bootstrap"]["lower"] >= 0 and gate.passed  # never worse on any row: CI ≥ 0
    # Ruin one slice entirely: that slice regresses and blocks even though overall the gain rule is loose.
    cand2 = cand.copy()
    cand2[slices == "app"] = 0.0
    loose = EvaluationConfig(bootstrap_samples=100, min_improvement=0.0, improvement_mode="absolute",
                             require_ci_above_threshold=False,
                             tabular=TabularEvaluationConfig(min_slice_rows=10, min_slice_positives=1))
    gate2 = quality_gate(y, cand2, ref, {"channel": slices}, loose)
    assert not gate2.passed and "channel=app" in gate2.reason


def test_a_slice_with_too_few_frauds_is_reported_not_gated() -> None:
    y, slices, noise = _data(4000, seed=5)
    ref = np.where(noise < 0.9, y, 1 - y) * 0.8 + 0.1
    cand = y * 0.8 + 0.1  # right on every row ...
    few = np.flatnonzero(slices == "app")[:300]  # ... but a third slice of 300 rows, ~30 frauds
    tag = slices.astype(object)
    tag[few] = "tap"
    cand[few] = 0.0  # ruined there: F1 0
    frauds = int(y[few].sum())
    on = EvaluationConfig(bootstrap_samples=100, min_improvement=0.0,
                          tabular=TabularEvaluationConfig(min_slice_rows=100, min_slice_positives=frauds))
    off = on.model_copy(update={"tabular": TabularEvaluationConfig(min_slice_rows=100, min_slice_positives=frauds + 1)})
    gated = quality_gate(y, cand, ref, {"channel": tag}, on)
    assert not gated.passed and "channel=tap" in gated.reason
    assert gated.evidence["slices"]["channel"]["tap"]["positives"] == frauds
    spared = quality_gate(y, cand, ref, {"channel": tag}, off)
    assert spared.evidence["slices"]["channel"]["tap"]["gated"] is False
    assert spared.evidence["slices"]["channel"]["tap"]["delta"] == gated.evidence["slices"]["channel"]["tap"]["delta"]
    assert "channel=tap" not in spared.evidence["slice_regressions"] and spared.passed, spared.reason


def test_quality_without_champion_compares_to_flag_everything() -> None:
    y, slices, noise = _data(2000, seed=2)
    good = np.where(noise < 0.95, y, 1 - y).astype(float)
    gate = quality_gate(y, good, None, {"channel": slices}, EvaluationConfig(bootstrap_samples=200))
    p = y.mean()
    assert gate.evidence["baseline"] is True
    assert gate.evidence["reference_metrics"]["f1"] == pytest.approx(2 * p / (1 + p))  # F1 of "all fraud"
    assert "trivial baseline" in gate.reason and gate.passed


def test_quality_judges_each_model_at_its_recorded_threshold_and_names_an_override() -> None:
    from sklearn.metrics import f1_score

    from mlops_model import resolve_threshold

    y, slices, noise = _data(4000, seed=4)
    rng = np.random.default_rng(4)
    # two calibrated-looking models of a rare class: scores a few percent, frauds a little higher
    cand = np.clip(0.02 + 0.25 * y * (noise < 0.8) + 0.05 * rng.random(len(y)), 0, 1)
    champ = np.clip(0.03 + 0.15 * y * (noise < 0.6) + 0.05 * rng.random(len(y)), 0, 1)
    meta_c, meta_r = {"decision_threshold": {"value": 0.2}}, {"decision_threshold": {"value": 0.12}}
    cfg = EvaluationConfig(bootstrap_samples=200, tabular=TabularEvaluationConfig(min_slice_rows=100))
    key = "evaluation.tabular.decision_threshold"
    gate = quality_gate(y, cand, champ, {"channel": slices}, cfg, reference_name="champion v1",
                        candidate_threshold=resolve_threshold(meta_c, None, override_key=key, model="candidate v2"),
                        reference_threshold=resolve_threshold(meta_r, None, override_key=key, model="champion v1"))
    # scikit-learn's F1 at each model's own threshold, not at 0.5 (where neither flags anything)
    assert gate.evidence["candidate"]["f1"] == pytest.approx(f1_score(y, cand >= 0.2))
    assert gate.evidence["reference_metrics"]["f1"] == pytest.approx(f1_score(y, champ >= 0.12))
    expected = f1_score(y, cand >= 0.2) - f1_score(y, champ >= 0.12)
    assert gate.evidence["bootstrap"]["estimate"] == pytest.approx(expected)
    assert f1_score(y, cand >= 0.5) == 0.0 and gate.passed, gate.reason
    assert "candidate at 0.2, champion v1 at 0.12" in gate.reason and "override" not in gate.reason
    assert gate.evidence["thresholds"]["candidate"]["source"] == "model"
    # an override that disagrees with the recorded thresholds is used, and named in the reason
    over = quality_gate(y, cand, champ, {"channel": slices}, cfg, reference_name="champion v1",
                        candidate_threshold=resolve_threshold(meta_c, 0.5, override_key=key, model="candidate v2"),
                        reference_threshold=resolve_threshold(meta_r, 0.5, override_key=key, model="champion v1"))
    assert over.evidence["candidate"]["f1"] == 0.0 and not over.passed
    assert "evaluation.tabular.decision_threshold=0.5 overrides candidate v2's recorded threshold 0.2" in over.reason
    assert "champion v1's recorded threshold 0.12" in over.reason
    # an export that records none is judged at the legacy 0.5, and the reason says so
    legacy = quality_gate(y, cand, champ, {"channel": slices}, cfg, reference_name="champion v1",
                          candidate_threshold=resolve_threshold(meta_c, None, override_key=key, model="candidate v2"),
                          reference_threshold=resolve_threshold({}, None, override_key=key, model="champion v1"))
    assert legacy.evidence["reference_metrics"]["f1"] == pytest.approx(f1_score(y, champ >= 0.5))
    assert "champion v1 records no decision_threshold" in legacy.reason


def test_reproducibility_gate() -> None:
    exp = {"weights_sha256": "a" * 64, "data_hash": "d", "steps": 20, "source": "v3"}
    ok = reproducibility_gate(exp, [{"weights_sha256": "a" * 64, "data_hash": "d", "steps": 20}])
    assert ok.passed and "bit-identical" in ok.reason
    bad = reproducibility_gate(exp, [{"weights_sha256": "b" * 64, "data_hash": "d", "steps": 20}])
    assert not bad.passed and "not deterministic" in bad.reason
    moved = reproducibility_gate(exp, [{"weights_sha256": "a" * 64, "data_hash": "e", "steps": 20}])
    assert not moved.passed and "different data" in moved.reason
    gpu = reproducibility_gate(exp, [{"weights_sha256": "b" * 64, "data_hash": "d"}], device="cuda",
                               max_rel_diff=5e-4, rtol=1e-3)
    assert gpu.passed
    assert not reproducibility_gate(exp, []).passed


def test_percentiles_match_numpy_definition() -> None:
    x = list(range(1, 101))  # 1..100 ms
    p = percentiles(x)
    assert p["p50"] == pytest.approx(50.5)
    assert p["p99"] == pytest.approx(99.01)  # linear: 1 + 0.99 * 99
    assert p["mean"] == pytest.approx(50.5)


def test_latency_gate_arithmetic() -> None:
    a = [1.0] * 99 + [2.0]
    run = LatencyRun(a_ms=a, b_ms=[x * 1.3 for x in a], a2_ms=[x * 1.05 for x in a], warmup=5)
    gate = latency_gate(run, tolerance=0.10)
    assert gate.evidence["p99_regression"] == pytest.approx(0.30)
    assert gate.evidence["aa_noise"] == pytest.approx(0.05)
    # the allowance is the tolerance alone: the CI holds the noise, adding the A/A difference counted it twice
    assert gate.evidence["allowed_regression"] == pytest.approx(0.10)
    assert gate.evidence["centre_regression"] == pytest.approx(0.30)
    assert gate.evidence["tail_regression"] == pytest.approx(0.30)
    assert not gate.passed and not gate.inconclusive and "CI lower end +30.0% > +10.0%" in gate.reason
    assert latency_gate(run, tolerance=0.30).passed
    assert latency_gate(run, tolerance=0.25).verdict == "fail"  # 0.30 > 0.25: the old +5 % A/A allowance is gone


def test_three_stray_samples_in_the_tail_do_not_fail_the_gate() -> None:
    """CI once failed a candidate identical in speed: three scheduler hiccups in its 200 samples gave p99 +45 %."""
    rng = np.random.default_rng(7)
    a = list(0.039 + rng.gamma(2.0, 0.0015, 200))
    a2 = list(0.039 + rng.gamma(2.0, 0.0015, 200))
    b = list(0.039 + rng.gamma(2.0, 0.0015, 200))
    b[17], b[90], b[143] = 0.072, 0.0725, 0.075  # the hiccups: p99 of 200 sits on the third-largest
    run = LatencyRun(a_ms=a, b_ms=b, a2_ms=a2, warmup=20)
    gate = latency_gate(run, tolerance=0.10)
    assert gate.evidence["p99_regression"] > 0.3  # the point estimate alone would have failed it
    ref = stats.bootstrap((np.asarray(a), np.asarray(b)),
                          lambda x, y, axis=-1: np.quantile(y, 0.99, axis=axis) / np.quantile(x, 0.99, axis=axis) - 1,
                          paired=True, vectorized=True, confidence_level=0.95, method="percentile", n_resamples=4000,
                          random_state=1).confidence_interval
    low, high = gate.evidence["p99_regression_ci"]
    assert low == pytest.approx(ref.low, abs=0.03) and high == pytest.approx(ref.high, abs=0.06)
    assert low < gate.evidence["allowed_regression"] and gate.passed, gate.reason
    assert "95% CI" in gate.reason


def test_a_consistently_slower_candidate_fails_despite_the_interval() -> None:
    rng = np.random.default_rng(8)
    a = 0.039 + rng.gamma(2.0, 0.0015, 200)
    run = LatencyRun(a_ms=list(a), b_ms=list(a * 1.5 + rng.normal(0, 0.0005, 200)),
                     a2_ms=list(0.039 + rng.gamma(2.0, 0.0015, 200)), warmup=20)
    gate = latency_gate(run, tolerance=0.10)
    assert gate.evidence["p99_regression_ci"][0] > gate.evidence["allowed_regression"]
    assert not gate.passed


def test_interleaved_measurement_times_cpu_and_wall_clock() -> None:
    """The judged series are CPU time: 4× the work shows as 4× (the call overhead aside); a 3 ms sleep does not,
    but every wall-clock sample holds it."""
    calls: list[str] = []

    def fast(_: object) -> None:
        calls.append("f")
        burn(2000)

    def slow(_: object) -> None:
        calls.append("s")
        burn(8000)
        time.sleep(0.003)

    run = measure_interleaved(fast, slow, [1, 2, 3], timed=30, warmup=4)
    assert len(run.a_ms) == len(run.b_ms) == len(run.a2_ms) == len(run.b_wall_ms) == len(run.a2_wall_ms) == 30
    assert len(calls) == 3 * 34 and calls.count("s") == 34  # every round calls each series once
    assert calls[:3] != calls[3:6]  # the order rotates
    summary = run.summary()  # medians are robust to the odd scheduler hiccup on a shared machine
    assert summary["clock"] == "cpu"
    assert 3 * summary["champion"]["p50"] < summary["candidate"]["p50"] < 3.0  # 4× the work, none of the sleep
    assert min(run.b_wall_ms) >= 3.0 and summary["wall"]["candidate"]["p50"] >= 3.0


def test_the_wall_clock_backstop_on_hand_built_series() -> None:
    """Equal CPU time; the candidate's wall-clock is 2× the champion's on every request (it waits): the backstop
    (bound 1.5×) fails it. 1.2× holds; without a bound the ratio is reported and nothing more is claimed."""
    a = [1.0 + 0.001 * (i % 7) for i in range(200)]

    def run(wall_factor: float) -> LatencyRun:
        return LatencyRun(a, a, a, warmup=0, a_wall_ms=[2 * x for x in a], b_wall_ms=[2 * wall_factor * x for x in a],
                          a2_wall_ms=[2 * x for x in a])

    waits = latency_gate(run(2.0), tolerance=0.10, wall_max_ratio=1.5)
    assert waits.verdict == "fail" and waits.evidence["backstop"] == "fail"
    assert waits.evidence["wall"]["ratio"] == pytest.approx(2.0) and waits.evidence["wall"]["ratio_ci"][0] > 1.5
    assert "wall-clock backstop (paired ratio CI lower end 2.00× > bound 1.50×" in waits.reason
    assert "CPU-time" not in waits.reason.split(";")[0]  # the CPU time was not what failed it
    ok = latency_gate(run(1.2), tolerance=0.10, wall_max_ratio=1.5)
    assert ok.passed and ok.evidence["clock"] == "cpu", ok.reason
    assert ok.reason.startswith("within tolerance: both CPU-time CI upper ends ≤ +10.0% and the wall-clock backstop "
                                "holds")
    unbound = latency_gate(run(2.0), tolerance=0.10)
    assert unbound.passed and "the wall-clock backstop holds" not in unbound.reason
    assert "wall-clock paired ratio 2.00× CI [2.00, 2.00] (reported, no backstop bound)" in unbound.reason
    bare = latency_gate(LatencyRun(a, a, a, warmup=0), tolerance=0.10)
    assert bare.passed and "wall-clock not measured (no backstop)" in bare.reason
    with pytest.raises(EvaluationError, match=r"wall_max_ratio=1\.5 bounds the wall-clock backstop, but the run"):
        latency_gate(LatencyRun(a, a, a, warmup=0), tolerance=0.10, wall_max_ratio=1.5)


def test_contract_gate() -> None:
    meta = {"kind": "tabular_mlp", "architecture": {"input_dim": 5},
            "features": {"feature_service": "fraud_v1",
                         "encoder": {"version": 1, "input_dim": 5,
                                     "numeric": [{"name": n, "log": False, "mean": 0.0, "std": 1.0}
                                                 for n in ("amount", "u7")],
                                     "derived": [{"name": "ratio", "op": "log_ratio", "args": ["amount", "u7"],
                                                  "mean": 0.0, "std": 1.0}],
                                     "categorical": [{"name": "channel", "vocab": ["web"]}]}}}
    ok = tabular_contract_gate(meta, feature_service="fraud_v1", available=["amount", "u7", "channel", "extra"])
    assert ok.passed and ok.evidence["inputs"] == ["amount", "channel", "u7"]
    bad = tabular_contract_gate(meta, feature_service="fraud_v2", available=["amount", "channel"])
    assert not bad.passed
    assert "FeatureService 'fraud_v1' != serving's 'fraud_v2'" in bad.reason and "['u7']" in bad.reason
    meta["architecture"] = {"input_dim": 7}
    assert "input_dim 7 != encoder input_dim 5" in tabular_contract_gate(meta, feature_service="fraud_v1",
                                                                         available=["amount", "u7", "channel"]).reason
    meta["features"]["encoder"]["input_dim"] = 6  # a spec that does not add up is refused, naming why
    assert "input_dim 6 != 5" in tabular_contract_gate(meta, feature_service="fraud_v1",
                                                       available=["amount"]).reason


def test_latency_gate_refuses_to_judge_a_noisy_run() -> None:
    a = [1.0] * 100
    run = LatencyRun(a_ms=a, b_ms=a, a2_ms=[3.0] * 100, warmup=0)
    gate = latency_gate(run, tolerance=0.10, max_noise=1.0)
    assert not gate.passed and "too noisy to judge" in gate.reason and "200%" in gate.reason


def test_repeats_take_the_median_of_back_to_back_calls() -> None:
    """Every third call burns ~100× a plain call's CPU and sleeps 20 ms: one slow call in three is never the
    median, on either clock."""
    n = {"calls": 0}

    def hiccup_every_third(_: object) -> None:
        n["calls"] += 1
        if n["calls"] % 3 == 0:
            burn(200_000)
            time.sleep(0.02)

    run = measure_interleaved(hiccup_every_third, hiccup_every_third, [0], timed=10, warmup=0, repeats=3)
    assert n["calls"] == 3 * 3 * 10
    assert max(run.a_wall_ms + run.b_wall_ms + run.a2_wall_ms) < 20.0
    assert max(run.a_ms + run.b_ms + run.a2_ms) < 1.0  # a plain call's CPU time; the hiccup's is several ms
