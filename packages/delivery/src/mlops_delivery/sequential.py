"""The sequential canary verdict: promote / hold / rollback from always-valid tests.

Why sequential: the workflow looks at the canary again and again until it decides. A fixed-sample test
(or a threshold) applied at every look promotes a worse canary far more often than its nominal rate.
A *mixture sequential probability ratio test* (mSPRT; Johari, Koomen, Pekelis & Walsh, "Always valid
inference", 2017/2022) keeps its error rate however often and whenever one looks, because its
statistic is a non-negative (super)martingale under the null and Ville's inequality bounds the chance
that it ever crosses ``1/alpha``.

Every metric here is a difference of proportions, canary minus stable:

- **error rate**: 5xx failures per request;
- **slow share**: answered requests slower than ``slow_ms`` (read exactly from the latency histogram's
  cumulative buckets; a tail share rather than a mean, because latency is heavy-tailed and p99 is what
  the threshold analysis guards; a share has a known variance, a quantile's ratio has none that is simple);
- **score bands**: the share of scores in each band ``(e_i, e_i+1]``. Per-band shares rather than a single
  distance (PSI, KS): a distance is biased upwards and has no martingale form, whereas each share is a
  mean of indicators, so the same test applies, and the margin reads as "at most 10 points of traffic
  move between score bands".

For an estimate ``d`` of a difference with variance ``V`` (plug-in: smoothed proportions ``(x+1)/(n+2)``)
and a one-sided normal mixture of scale ``tau`` over the alternatives beyond the null value ``t``,
the likelihood ratio integrates in closed form:

    Lambda = 2 * sqrt(V / (V + tau^2)) * exp(z^2 tau^2 / (2 (V + tau^2))) * Phi(z tau / sqrt(V + tau^2)),
    z = (d - t) / sqrt(V)   (or (t - d) / sqrt(V) for alternatives below t)

(the two-sided mixture's ratio times ``2 Phi(.)``). It is exact for Gaussian increments with a known
variance; for proportions the plug-in variance makes it asymptotic, which ``benchmarks/canary_sequential.py``
checks by simulation.

The verdict, per metric with margin ``m`` and the configured ``alpha``:

- **promote** when *every* test rejects "canary worse by >= m" at level ``alpha`` (directional metrics:
  ``Lambda_below(m) >= 1/alpha``; a score band: both ``|shift| >= m`` sides rejected). This is an
  intersection-union test: a canary worse by ``m`` on any one metric is promoted with probability
  <= ``alpha`` without any multiplicity correction.
- **rollback** when *some* test shows the canary worse: error rate or slow share above stable's
  (``Lambda_above(0) >= 1/alpha_r``), or a score band moved by more than ``m`` either way. A union, so
  ``alpha`` is split Bonferroni-style: a third per metric, and the score third again over its 2K one-sided
  band tests; an equal canary is rolled back with probability <= ``alpha``.
- **hold** otherwise, and always below ``min_requests`` canary requests for a promotion. The caller's
  maximum wait turns a lasting hold into the timeout it already handles.

Each test's evidence carries its statistic (log Lambda), its boundary (log 1/alpha) and the requests seen,
plus the always-valid confidence bounds that the rules are equivalent to.

:func:`run_tests` + :func:`sequential_verdict` are the tabular canary's tests; :func:`metric_test` +
:func:`verdict_from_tests` run the same rules on any named proportions (the language model's canary:
``mlops_delivery.lm_canary``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.special import log_ndtr

from mlops_config import SequentialCanaryConfig, TabularSequentialConfig
from mlops_delivery.errors import MetricsError

Decision = Literal["promote", "hold", "rollback"]
HOLD, PROMOTE, ROLLBACK = 0, 1, 2
"""Vectorised decision codes (see ``verdict_codes``)."""

_LOG2 = math.log(2.0)


def mixture_log_lr(estimate: Any, variance: Any, null: Any, tau: float, direction: int) -> np.ndarray:
    """log of the one-sided normal-mixture likelihood ratio against ``difference == null``.

    Args:
        estimate: Observed difference(s), canary minus stable.
        variance: Variance of the estimate(s); must be > 0.
        null: The null value(s) of the difference.
        tau: Standard deviation of the (half-)normal mixture over the alternatives.
        direction: ``+1`` mixes over alternatives above ``null`` (evidence the difference is larger),
            ``-1`` over those below (evidence it is smaller).

    Returns:
        log Lambda, broadcast over the inputs. Under the null (or any value on the far side of it) the
        ratio is a non-negative supermartingale: it ever reaches ``1/alpha`` with probability <= alpha.
    """
    d = direction * (np.asarray(estimate, dtype=float) - np.asarray(null, dtype=float))
    v = np.asarray(variance, dtype=float)
    t2 = tau * tau
    total = v + t2
    return (_LOG2 + 0.5 * np.log(v / total) + d * d * t2 / (2.0 * v * total)
            + log_ndtr(d * tau / np.sqrt(v * total)))


def confidence_bound(estimate: float, variance: float, tau: float, alpha: float, direction: int) -> float:
    """The always-valid one-sided bound: the null value where the mixture ratio meets ``1/alpha``.

    ``direction=+1`` gives the upper bound (alternatives below it are mixed), ``-1`` the lower bound.
    log Lambda grows monotonically with the distance from the estimate, so bisection finds it.
    """
    target = math.log(1.0 / alpha)
    # the two-sided mixture's bound is wider than the one-sided one: a bracket to bisect in
    hi = math.sqrt(2.0 * variance * (variance + tau * tau) / (tau * tau)
                   * (target + 0.5 * math.log((variance + tau * tau) / variance)))
    lo = 0.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(mixture_log_lr(0.0, variance, -mid, tau, +1)) >= target:
            hi = mid
        else:
            lo = mid
    return estimate + direction * hi


def difference_of_proportions(x_c: Any, n_c: Any, x_s: Any, n_s: Any) -> tuple[np.ndarray, np.ndarray]:
    """Canary minus stable proportion and its plug-in variance (proportions smoothed to ``(x+1)/(n+2)``).

    The smoothing keeps the variance away from zero when a side has seen no events yet: otherwise a
    handful of clean requests would look like certainty.
    """
    x_c, n_c, x_s, n_s = (np.asarray(a, dtype=float) for a in (x_c, n_c, x_s, n_s))
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = x_c / n_c - x_s / n_s
        p_c = (x_c + 1.0) / (n_c + 2.0)
        p_s = (x_s + 1.0) / (n_s + 2.0)
        variance = p_c * (1.0 - p_c) / n_c + p_s * (1.0 - p_s) / n_s
    return estimate, variance


@dataclass(frozen=True)
class ArmCounts:
    """What one variant has seen; every field may be an array (one entry per simulation, say)."""

    requests: np.ndarray
    """Requests answered or failed with 5xx."""
    errors: np.ndarray
    """Requests failed with 5xx."""
    answered: np.ndarray
    """Requests answered (the latency histogram's count)."""
    slow: np.ndarray
    """Answered requests slower than ``slow_ms``."""
    bands: np.ndarray
    """Scores per band, last axis = band (``len(score_edges) + 1`` bands)."""


def arm_counts(*, requests: Any, errors: Any, answered: Any, slow: Any, bands: Any) -> ArmCounts:
    """``ArmCounts`` from numbers or arrays; refuses negative counts or more events than trials."""
    arm = ArmCounts(*(np.asarray(a, dtype=float) for a in (requests, errors, answered, slow, bands)))
    for name, events, trials in (("errors", arm.errors, arm.requests), ("slow", arm.slow, arm.answered)):
        if np.any(events < 0) or np.any(events > trials):
            raise MetricsError(f"{name} count {events!r} must lie in [0, {trials!r}]")
    if np.any(arm.bands < 0):
        raise MetricsError(f"score band counts must be >= 0, got {arm.bands!r}")
    return arm


def band_counts(scores: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Scores per band ``(-inf, e_0], (e_0, e_1], ..., (e_last, inf)`` (the score histogram's ``le`` rule)."""
    index = np.searchsorted(np.asarray(edges, dtype=float), np.asarray(scores, dtype=float), side="left")
    return np.bincount(index, minlength=len(edges) + 1)


def slow_count(buckets: Sequence[tuple[float, float]], slow_s: float, *, source: str = "latency histogram",
               setting: str = "delivery.tabular.sequential.slow_ms", scale: float = 1000.0,
               unit: str = "ms") -> float:
    """Observations above ``slow_s`` from cumulative ``(le, count)`` buckets; ``slow_s`` must be a bucket bound
    (else the error names ``setting``, in ``unit`` = the buckets' ``le`` × ``scale``)."""
    if not buckets:
        return 0.0
    counts = dict(buckets)
    match = [le for le in counts if math.isclose(le, slow_s, rel_tol=1e-9)]
    if not match:
        raise MetricsError(f"{setting} = {slow_s * scale:g} is not an upper bound of the "
                           f"{source}'s buckets {[le * scale for le in sorted(counts) if math.isfinite(le)]} "
                           f"({unit}); choose one of them")
    return float(max(counts.values()) - counts[match[0]])


@dataclass(frozen=True)
class TestArrays:
    """One test's outcome, vectorised: the rules and the statistics they compare."""

    promote_ok: np.ndarray
    worse: np.ndarray
    promote_statistic: np.ndarray
    rollback_statistic: np.ndarray
    estimate: np.ndarray
    variance: np.ndarray
    has_data: np.ndarray


def proportion_test(x_c: Any, n_c: Any, x_s: Any, n_s: Any, *, margin: float, tau: float, alpha: float,
                    alpha_rollback: float, shift: bool) -> TestArrays:
    """The promote and rollback rules on one difference of proportions (vectorised).

    ``shift=False`` (higher is worse): promote when "difference >= margin" is rejected at ``alpha``, roll back
    when "difference <= 0" is rejected at ``alpha_rollback``. ``shift=True`` (either way is a change): promote
    when both "difference >= margin" and "difference <= -margin" are rejected at ``alpha``, roll back when
    "|difference| <= margin" is rejected on one side at ``alpha_rollback``.
    """
    estimate, variance = difference_of_proportions(x_c, n_c, x_s, n_s)
    has_data = (np.asarray(n_c) > 0) & (np.asarray(n_s) > 0)
    variance = np.where(has_data, variance, 1.0)
    estimate = np.where(has_data, estimate, 0.0)
    below_margin = mixture_log_lr(estimate, variance, margin, tau, -1)
    if shift:
        promote_stat = np.minimum(below_margin, mixture_log_lr(estimate, variance, -margin, tau, +1))
        rollback_stat = np.maximum(mixture_log_lr(estimate, variance, margin, tau, +1),
                                   mixture_log_lr(estimate, variance, -margin, tau, -1))
    else:
        promote_stat = below_margin
        rollback_stat = mixture_log_lr(estimate, variance, 0.0, tau, +1)
    promote_ok = has_data & (promote_stat >= math.log(1.0 / alpha))
    worse = has_data & (rollback_stat >= math.log(1.0 / alpha_rollback))
    return TestArrays(promote_ok, worse, promote_stat, rollback_stat, estimate, variance, has_data)


@dataclass(frozen=True)
class MetricTest:
    """A named test and the inputs it was run with (one definition for the verdict and the benchmark)."""

    metric: str
    shift: bool
    margin: float
    alpha_rollback: float
    canary_events: np.ndarray
    canary_trials: np.ndarray
    stable_events: np.ndarray
    stable_trials: np.ndarray
    result: TestArrays


def run_tests(cfg: SequentialCanaryConfig, tabular: TabularSequentialConfig, stable: ArmCounts,
              canary: ArmCounts) -> list[MetricTest]:
    """Every test of the verdict: error rate, slow share, and each score band's share (signals and margins from
    ``tabular``, ``delivery.tabular.sequential``; ``alpha`` and the mixture from ``cfg``, ``delivery.sequential``)."""
    n_bands = len(tabular.score_edges) + 1
    if stable.bands.shape[-1] != n_bands or canary.bands.shape[-1] != n_bands:
        raise MetricsError(f"score band counts need {n_bands} bands for edges {list(tabular.score_edges)}, got "
                           f"{stable.bands.shape[-1]} (stable) and {canary.bands.shape[-1]} (canary)")
    third = cfg.alpha / 3.0
    specs: list[tuple[str, bool, float, float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = [
        ("error_rate", False, tabular.error_margin, third, canary.errors, canary.requests, stable.errors,
         stable.requests),
        (f"slow_share(>{tabular.slow_ms:g}ms)", False, tabular.slow_margin, third, canary.slow, canary.answered,
         stable.slow, stable.answered),
    ]
    bounds = (-math.inf, *tabular.score_edges, math.inf)
    n_c, n_s = canary.bands.sum(axis=-1), stable.bands.sum(axis=-1)
    for b in range(n_bands):
        specs.append((f"score_band({bounds[b]:g},{bounds[b + 1]:g}]", True, tabular.score_margin,
                      third / (2 * n_bands), canary.bands[..., b], n_c, stable.bands[..., b], n_s))
    return [metric_test(cfg, name, shift=shift, margin=margin, alpha_rollback=alpha_r, canary_events=x_c,
                        canary_trials=t_c, stable_events=x_s, stable_trials=t_s)
            for name, shift, margin, alpha_r, x_c, t_c, x_s, t_s in specs]


def metric_test(cfg: SequentialCanaryConfig, metric: str, *, shift: bool, margin: float, alpha_rollback: float,
                canary_events: Any, canary_trials: Any, stable_events: Any, stable_trials: Any) -> MetricTest:
    """One named test of a difference of proportions at ``cfg``'s ``alpha`` and mixture scale (any caller's metric:
    the tabular canary's in :func:`run_tests`, the language model's in ``mlops_delivery.lm_canary``)."""
    x_c, t_c, x_s, t_s = (np.asarray(a, dtype=float)
                          for a in (canary_events, canary_trials, stable_events, stable_trials))
    result = proportion_test(x_c, t_c, x_s, t_s, margin=margin, tau=cfg.mixture_scale * margin, alpha=cfg.alpha,
                             alpha_rollback=alpha_rollback, shift=shift)
    return MetricTest(metric, shift, margin, alpha_rollback, x_c, t_c, x_s, t_s, result)


def verdict_codes(tests: Sequence[MetricTest], canary_requests: Any, min_requests: int) -> np.ndarray:
    """``ROLLBACK`` where any test shows worse, else ``PROMOTE`` where all show non-inferior, else ``HOLD``."""
    worse = np.logical_or.reduce([t.result.worse for t in tests])
    fine = np.logical_and.reduce([t.result.promote_ok for t in tests]) & (np.asarray(canary_requests) >= min_requests)
    return np.where(worse, ROLLBACK, np.where(fine, PROMOTE, HOLD))


@dataclass(frozen=True)
class TestEvidence:
    """One test as the verdict reports it."""

    metric: str
    kind: Literal["worse_if_higher", "shift"]
    margin: float
    canary_events: int
    canary_seen: int
    """Trials on the canary side: requests (error rate), answered requests (slow share), scores (bands)."""
    stable_events: int
    stable_seen: int
    estimate: float | None
    """Canary minus stable proportion."""
    promote_interval: tuple[float, float] | None
    """Always-valid confidence interval at ``alpha``: promotion needs it below the margin (or inside +-margin)."""
    rollback_interval: tuple[float, float] | None
    """At the rollback level: rollback when it lies above 0 (or entirely outside [-margin, margin])."""
    promote_statistic: float | None
    promote_boundary: float
    rollback_statistic: float | None
    rollback_boundary: float
    outcome: Literal["non_inferior", "worse", "undecided", "no_data"]


@dataclass(frozen=True)
class SequentialVerdict:
    """Promote / hold / rollback, why, and each test's evidence."""

    decision: Decision
    reasons: tuple[str, ...]
    alpha: float
    canary_requests: int
    stable_requests: int
    tests: tuple[TestEvidence, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (infinite bounds as strings, so strict JSON parsers accept them)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, tuple):
                return [clean(x) for x in v]
            return v

        return {"decision": self.decision, "reasons": list(self.reasons), "alpha": self.alpha,
                "canary_requests": self.canary_requests, "stable_requests": self.stable_requests,
                "tests": [{k: clean(v) for k, v in t.__dict__.items()} for t in self.tests]}


def _interval(test: MetricTest, alpha: float, tau: float) -> tuple[float, float]:
    e, v = float(test.result.estimate), float(test.result.variance)
    return confidence_bound(e, v, tau, alpha, -1), confidence_bound(e, v, tau, alpha, +1)


def _evidence(test: MetricTest, cfg: SequentialCanaryConfig) -> TestEvidence:
    r = test.result
    has = bool(r.has_data)
    tau = cfg.mixture_scale * test.margin
    outcome: Literal["non_inferior", "worse", "undecided", "no_data"] = (
        "no_data" if not has else "worse" if bool(r.worse) else "non_inferior" if bool(r.promote_ok) else "undecided")
    return TestEvidence(
        metric=test.metric, kind="shift" if test.shift else "worse_if_higher", margin=test.margin,
        canary_events=int(test.canary_events), canary_seen=int(test.canary_trials),
        stable_events=int(test.stable_events), stable_seen=int(test.stable_trials),
        estimate=float(r.estimate) if has else None,
        promote_interval=_interval(test, cfg.alpha, tau) if has else None,
        rollback_interval=_interval(test, test.alpha_rollback, tau) if has else None,
        promote_statistic=float(r.promote_statistic) if has else None,
        promote_boundary=math.log(1.0 / cfg.alpha),
        rollback_statistic=float(r.rollback_statistic) if has else None,
        rollback_boundary=math.log(1.0 / test.alpha_rollback), outcome=outcome)


def _reason(t: TestEvidence) -> str:
    if t.outcome == "no_data":
        return f"insufficient: {t.metric}: no observations on one side"
    assert t.promote_interval is not None and t.rollback_interval is not None and t.estimate is not None
    lo, hi = t.promote_interval
    head = (f"{t.metric}: canary-stable {t.estimate:+.4f} ({t.canary_events}/{t.canary_seen} vs "
            f"{t.stable_events}/{t.stable_seen}), always-valid [{lo:+.4f}, {hi:+.4f}], margin {t.margin:g}")
    if t.outcome == "worse":
        return f"WORSE: {head}; rollback statistic {t.rollback_statistic:.2f} >= {t.rollback_boundary:.2f}"
    if t.outcome == "non_inferior":
        return f"ok: {head}; promote statistic {t.promote_statistic:.2f} >= {t.promote_boundary:.2f}"
    return f"undecided: {head}; promote statistic {t.promote_statistic:.2f} < {t.promote_boundary:.2f}"


def sequential_verdict(cfg: SequentialCanaryConfig, tabular: TabularSequentialConfig, stable: ArmCounts,
                       canary: ArmCounts, *, min_requests: int = 1) -> SequentialVerdict:
    """Decide from cumulative counts of both variants (scalars); valid at every look.

    Args:
        cfg: The ``delivery.sequential`` section (alpha, mixture scale).
        tabular: The ``delivery.tabular.sequential`` section (signals, margins, score bands).
        stable: Counts of the stable variant since the canary started.
        canary: Counts of the canary variant.
        min_requests: Fewest canary requests before a promotion (``delivery.min_canary_requests``);
            a rollback needs no minimum, its guarantee holds at any sample size.
    """
    return verdict_from_tests(cfg, run_tests(cfg, tabular, stable, canary), canary_requests=canary.requests,
                              stable_requests=stable.requests, min_requests=min_requests)


def verdict_from_tests(cfg: SequentialCanaryConfig, tests: Sequence[MetricTest], *, canary_requests: Any,
                       stable_requests: Any, min_requests: int = 1) -> SequentialVerdict:
    """The verdict over any set of tests (scalars): rollback if one shows worse, promote if all show non-inferior
    and the canary has ``min_requests``, else hold; one reason per test, worst first."""
    code = int(verdict_codes(tests, canary_requests, min_requests))
    evidence = tuple(_evidence(t, cfg) for t in tests)
    reasons = [_reason(t) for t in evidence]
    n_canary = int(canary_requests)
    if code == HOLD and n_canary < min_requests:
        reasons.insert(0, f"insufficient: only {n_canary} canary requests, need {min_requests} to promote")
    decision: Decision = "rollback" if code == ROLLBACK else "promote" if code == PROMOTE else "hold"
    order = {"WORSE": 0, "insufficient": 1, "undecided": 2, "ok": 3}
    reasons.sort(key=lambda r: order.get(r.split(":", 1)[0], 4))
    return SequentialVerdict(decision=decision, reasons=tuple(reasons), alpha=cfg.alpha, canary_requests=n_canary,
                             stable_requests=int(stable_requests), tests=evidence)


def skew_guard(decision: Decision, reasons: Sequence[str], mismatch_rate: float | None,
               limit: float | None) -> tuple[Decision, tuple[str, ...]]:
    """Hold a promotion while a required skew replay is missing or shows too many mismatched feature values.

    Skew is a fault of the feature pipeline, not evidence about the canary, so it never rolls back.
    """
    if limit is None:
        return decision, tuple(reasons)
    if mismatch_rate is None:
        note = f"insufficient: a skew replay is required (mismatch rate <= {limit:g}) and none was given"
    elif mismatch_rate > limit:
        note = f"guard: skew replay mismatch rate {mismatch_rate:.4f} > {limit:g}"
    else:
        return decision, (*reasons, f"ok: skew replay mismatch rate {mismatch_rate:.4f} <= {limit:g}")
    return ("hold" if decision == "promote" else decision), (note, *reasons)


def guarded_decision(verdict: SequentialVerdict, threshold: Decision, threshold_reasons: Sequence[str], *,
                     guard: bool) -> tuple[Decision, tuple[str, ...]]:
    """The sequential verdict, where the fixed thresholds (when ``guard``) can only veto a promotion into a hold.

    A threshold rollback never rolls back by itself: without the sequential evidence it carries no error
    guarantee. Its reasons are kept beside the verdict's, prefixed ``threshold:``.
    """
    extra = tuple(f"threshold: {r}" for r in threshold_reasons)
    if guard and verdict.decision == "promote" and threshold != "promote":
        return "hold", (f"guard: the thresholds answer {threshold}, so the promotion waits", *verdict.reasons, *extra)
    return verdict.decision, (*verdict.reasons, *extra)
