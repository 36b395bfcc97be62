"""Sequential canary verdict vs today's threshold analysis, on the same simulated canaries.

``--sims`` canaries (default 2,000) where the canary equals stable (A/A) and as many where it is worse by
``--effect`` margins on one metric (a third each: 5xx error rate, slow share, score distribution shifted
so one band's share moves by the score margin). Traffic goes 90 % stable / 10 % canary; the analysis
looks after every 100 canary requests until it decides or ``--max-looks`` runs out (a lasting hold =
the workflow's timeout, reported apart). Requests are drawn per look as counts (binomial errors,
multinomial latency buckets and score bands), with the first look's scores drawn raw so the threshold
analysis gets its PSI; it is ``mlops_delivery.canary.decide`` itself, fed the same evidence, and it
decides at its first look (``min_canary_requests`` = 100).

Reported: the rate of promoting a worse canary, of rolling back an equal one, and the median canary
requests to a decision (all sims, A/A, worse), each for the sequential verdict and for the thresholds; and
``fixed_sample.requests``: canary requests a fixed-horizon test of the same alpha needs for power 1 - alpha
(one-sided z-tests: non-inferiority on error rate and slow share, equivalence (two one-sided) per score
band; promote iff all pass; power = product over tests, an approximation for the correlated bands).

``targets_met`` (:func:`targets_met`): both error rates within alpha by the upper end of their Wilson 95 % CI,
and the A/A median requests below the fixed-sample n.

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np
from scipy import stats

from mlops_config import DeliveryConfig, SequentialCanaryConfig, TabularSequentialConfig
from mlops_delivery.canary import VariantEvidence, decide
from mlops_delivery.metrics import histogram_quantile, population_stability_index
from mlops_delivery.sequential import HOLD, PROMOTE, ROLLBACK, arm_counts, run_tests, verdict_codes

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0, math.inf)
"""The serving exporter's latency buckets (mlops_serving.metrics) plus +Inf."""
LOOK = 100
CANARY_SHARE = 0.1
ERROR_RATE = 0.005
LAT_MEDIAN_S, LAT_SIGMA = 0.02, 0.8
LOGIT_MEAN, LOGIT_SD = -3.0, 1.2
TAB = TabularSequentialConfig()
"""The tabular tests' signals and margins (``delivery.tabular.sequential``), at their defaults."""


def latency_probs(median_s: float) -> np.ndarray:
    cdf = stats.norm.cdf((np.log(np.array(LATENCY_BUCKETS[:-1])) - math.log(median_s)) / LAT_SIGMA)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def band_probs(edges: tuple[float, ...], shift: float) -> np.ndarray:
    logits = np.log(np.array(edges) / (1 - np.array(edges)))
    cdf = stats.norm.cdf((logits - LOGIT_MEAN - shift) / LOGIT_SD)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def slow_index(slow_s: float) -> int:
    return next(i for i, le in enumerate(LATENCY_BUCKETS) if math.isclose(le, slow_s)) + 1


def solve(fn, target: float, lo: float, hi: float) -> float:
    """Bisection for an increasing ``fn``."""
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fn(mid) < target else (lo, mid)
    return (lo + hi) / 2


def scenarios(effect: float) -> dict[str, dict[str, float]]:
    """Canary parameters per scenario; each worse one moves one metric by ``effect`` margins."""
    k = slow_index(TAB.slow_ms / 1000)
    slow0 = latency_probs(LAT_MEDIAN_S)[k:].sum()
    slow_median = solve(lambda m: latency_probs(m)[k:].sum(), slow0 + effect * TAB.slow_margin, LAT_MEDIAN_S, 1.0)
    base = band_probs(TAB.score_edges, 0.0)
    shift = solve(lambda s: np.abs(band_probs(TAB.score_edges, s) - base).max(), effect * TAB.score_margin, 0, 5)
    same = {"error": ERROR_RATE, "median": LAT_MEDIAN_S, "shift": 0.0}
    return {"aa": same, "worse_error": {**same, "error": ERROR_RATE + effect * TAB.error_margin},
            "worse_latency": {**same, "median": slow_median}, "worse_scores": {**same, "shift": shift}}


def draw_look(rng: np.random.Generator, n: int, error: np.ndarray, lat_p: np.ndarray, band_p: np.ndarray,
              k_slow: int, *, buckets: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Errors, latency buckets (or, after the first look, only the slow count: all the tests need) and bands."""
    errors = rng.binomial(n, error)
    answered = n - errors
    if buckets:
        lat = rng.multinomial(answered, lat_p)
    else:
        slow = rng.binomial(answered, lat_p[..., k_slow:].sum(axis=-1))
        lat = np.zeros((errors.size, lat_p.shape[-1]), dtype=np.int64)
        lat[:, -1] = slow
    return errors, lat, rng.multinomial(answered, band_p)


def simulate(args: argparse.Namespace, effect: float, *, with_aa: bool = True) -> dict:
    cfg = SequentialCanaryConfig(alpha=args.alpha, mixture_scale=args.mixture_scale)
    delivery = DeliveryConfig(sequential=cfg)
    rng = np.random.default_rng(args.seed + int(effect * 1000))
    plan = scenarios(effect)
    worse_kinds = ("worse_error", "worse_latency", "worse_scores")
    kinds = ["aa"] * (args.sims if with_aa else 0) + [k for i, k in enumerate(worse_kinds)
                                                      for _ in range(args.sims // 3 + (i < args.sims % 3))]
    kind = np.array(kinds)
    n_sims = kind.size
    error_c = np.array([plan[k]["error"] for k in kinds])
    lat_c = np.stack([latency_probs(plan[k]["median"]) for k in kinds])
    band_c = np.stack([band_probs(TAB.score_edges, plan[k]["shift"]) for k in kinds])
    lat_s, band_s = latency_probs(LAT_MEDIAN_S), band_probs(TAB.score_edges, 0.0)
    n_stable = round(LOOK * (1 - CANARY_SHARE) / CANARY_SHARE)
    k_slow = slow_index(TAB.slow_ms / 1000)
    edges = np.array(TAB.score_edges)

    # cumulative counts per arm: errors, requests, latency buckets, score bands
    cum = {side: {"errors": np.zeros(n_sims), "requests": np.zeros(n_sims),
                  "lat": np.zeros((n_sims, len(LATENCY_BUCKETS))), "bands": np.zeros((n_sims, edges.size + 1))}
           for side in ("stable", "canary")}
    seq_code = np.full(n_sims, HOLD)
    seq_n = np.full(n_sims, args.max_looks * LOOK)
    thr_code = np.full(n_sims, HOLD)
    thr_n = np.full(n_sims, args.max_looks * LOOK)
    active = np.ones(n_sims, dtype=bool)
    logit_mean_c = LOGIT_MEAN + np.array([plan[k]["shift"] for k in kinds])
    for look in range(1, args.max_looks + 1):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        for side, n, err, lat_p, band_p in (("canary", LOOK, error_c[idx], lat_c[idx], band_c[idx]),
                                            ("stable", n_stable, np.full(idx.size, ERROR_RATE), lat_s, band_s)):
            errors, lat, bands = draw_look(rng, n, err, lat_p, band_p, k_slow, buckets=look == 1)
            if look == 1:  # raw scores this look (the threshold analysis' PSI needs them); bands follow from them
                mean = logit_mean_c[idx, None] if side == "canary" else LOGIT_MEAN
                raw = 1 / (1 + np.exp(-(mean + LOGIT_SD * rng.standard_normal((idx.size, n)))))
                answered = n - errors
                keep = np.arange(n)[None, :] < answered[:, None]
                raw = np.where(keep, raw, np.nan)
                bands = np.stack([np.bincount(np.searchsorted(edges, r[~np.isnan(r)], side="left"),
                                              minlength=edges.size + 1) for r in raw])
                cum[side]["raw"] = raw
            c = cum[side]
            c["errors"][idx] += errors
            c["requests"][idx] += n
            c["lat"][idx] += lat
            c["bands"][idx] += bands
        arms = {side: arm_counts(requests=c["requests"][idx], errors=c["errors"][idx],
                                 answered=c["requests"][idx] - c["errors"][idx],
                                 slow=c["lat"][idx][:, k_slow:].sum(axis=1), bands=c["bands"][idx])
                for side, c in cum.items()}
        codes = verdict_codes(run_tests(cfg, TAB, arms["stable"], arms["canary"]), arms["canary"].requests,
                              delivery.min_canary_requests)
        decided = codes != HOLD
        seq_code[idx[decided]] = codes[decided]
        seq_n[idx[decided]] = look * LOOK
        active[idx[decided]] = False
        if look == 1:
            thr_code[:], thr_n[:] = threshold_first_look(delivery, cum)
    return summarize(cfg, effect, kind, seq_code, seq_n, thr_code, thr_n)


def threshold_first_look(delivery: DeliveryConfig, cum: dict) -> tuple[np.ndarray, np.ndarray]:
    """``decide`` on each simulation's first look: requests, 5xx errors, p99 from the buckets, PSI of raw scores."""
    n_sims = cum["canary"]["requests"].size
    codes = np.empty(n_sims, dtype=int)
    code_of = {"hold": HOLD, "promote": PROMOTE, "rollback": ROLLBACK}
    for i in range(n_sims):
        ev = {}
        for side, c in cum.items():
            buckets = list(zip(LATENCY_BUCKETS, np.cumsum(c["lat"][i]), strict=True))
            ev[side] = VariantEvidence(version=1 if side == "stable" else 2, requests=c["requests"][i],
                                       errors=c["errors"][i], error_rate=c["errors"][i] / c["requests"][i],
                                       p99_s=histogram_quantile(0.99, buckets),
                                       logged_predictions=int((~np.isnan(c["raw"][i])).sum()))
        s, k = cum["stable"]["raw"][i], cum["canary"]["raw"][i]
        psi = population_stability_index(s[~np.isnan(s)], k[~np.isnan(k)], bins=delivery.psi_bins,
                                         floor=delivery.psi_floor)
        decision, _ = decide(delivery, ev["stable"], ev["canary"], psi)
        codes[i] = code_of[decision]
    if (codes == HOLD).any():
        raise SystemExit("the threshold analysis held at its first look; the benchmark assumes it decides there")
    return codes, np.full(n_sims, LOOK)


def fixed_sample_requests(cfg: SequentialCanaryConfig) -> int:
    """Canary requests at which the fixed-horizon test promotes an equal canary with probability 1 - alpha."""
    z = stats.norm.ppf(1 - cfg.alpha)
    ratio = CANARY_SHARE / (1 - CANARY_SHARE)
    slow = latency_probs(LAT_MEDIAN_S)[slow_index(TAB.slow_ms / 1000):].sum()
    bands = band_probs(TAB.score_edges, 0.0)

    def power(n: float) -> float:
        def sd(p: float) -> float:
            return math.sqrt(p * (1 - p) * (1 / n + ratio / n))
        one_sided = [stats.norm.cdf(TAB.error_margin / sd(ERROR_RATE) - z),
                     stats.norm.cdf(TAB.slow_margin / sd(slow) - z)]
        tost = [max(0.0, 2 * stats.norm.cdf(TAB.score_margin / sd(p) - z) - 1) for p in bands]
        return float(np.prod(one_sided) * np.prod(tost))

    return math.ceil(solve(power, 1 - cfg.alpha, 10, 1e7))


def rate(mask: np.ndarray, hit: np.ndarray) -> dict[str, Any]:
    k, n = int((hit & mask).sum()), int(mask.sum())
    if n == 0:
        return {"rate": None, "ci95": [None, None], "n": 0}
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return {"rate": k / n, "ci95": [round(ci.low, 4), round(ci.high, 4)], "n": n}


def summarize(cfg: SequentialCanaryConfig, effect: float, kind: np.ndarray, seq_code: np.ndarray, seq_n: np.ndarray,
              thr_code: np.ndarray, thr_n: np.ndarray) -> dict[str, Any]:
    aa, worse = kind == "aa", kind != "aa"
    out: dict[str, Any] = {"alpha": cfg.alpha, "sims": {"aa": int(aa.sum()), "worse": int(worse.sum())},
                           "effect_in_margins": effect, "look_every": LOOK, "canary_share": CANARY_SHARE}
    for name, code, n in (("sequential", seq_code, seq_n), ("threshold", thr_code, thr_n)):
        fp, fr = rate(worse, code == PROMOTE), rate(aa, code == ROLLBACK)
        out[name] = {
            "false_promotion_rate": fp["rate"], "false_rollback_rate": fr["rate"],
            "median_requests": float(np.median(n)),
            "false_promotion_ci95": fp["ci95"], "false_rollback_ci95": fr["ci95"],
            "median_requests_aa": float(np.median(n[aa])) if aa.any() else None,
            "median_requests_worse": float(np.median(n[worse])),
            "timeout_rate_aa": rate(aa, code == HOLD)["rate"], "timeout_rate_worse": rate(worse, code == HOLD)["rate"],
            "false_promotion_by_kind": {k: rate(kind == k, code == PROMOTE)["rate"]
                                        for k in ("worse_error", "worse_latency", "worse_scores")},
        }
    out["fixed_sample"] = {"requests": fixed_sample_requests(cfg), "power": 1 - cfg.alpha}
    return out


def targets_met(out: dict[str, Any], alpha: float) -> dict[str, bool]:
    """The claims, judged against the code: an error rate is within ``alpha`` only when the upper end of its Wilson
    95 % CI is (a lower end at or below ``alpha`` says only that the rate could be that small); and the sequential
    test needs fewer requests than the fixed-sample test when its median over A/A canaries does — the fixed n is
    what an *equal* canary needs for power 1 - alpha, so a median mixed with clearly worse canaries (rolled back
    in a look or two) would flatter the sequential test."""
    seq = out["sequential"]
    upper = max(seq["false_promotion_ci95"][1], out["at_margin"]["false_promotion_ci95"][1])
    aa_median = seq["median_requests_aa"]
    return {"false_promotion_within_alpha": bool(upper <= alpha),
            "false_rollback_within_alpha": bool(seq["false_rollback_ci95"][1] <= alpha),
            "fewer_requests_than_fixed": bool(aa_median is not None
                                              and aa_median < out["fixed_sample"]["requests"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=2000, help="simulations per scenario (A/A, and worse)")
    parser.add_argument("--alpha", type=float, default=SequentialCanaryConfig().alpha)
    parser.add_argument("--effect", type=float, default=2.0, help="how much worse, in margins (a clearly worse canary)")
    parser.add_argument("--mixture-scale", type=float, default=SequentialCanaryConfig().mixture_scale)
    parser.add_argument("--max-looks", type=int, default=400)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    start = time.perf_counter()
    out = simulate(args, args.effect)
    # the guarantee's worst case: worse by exactly one margin (score shifts then never roll back: they hold)
    edge = simulate(args, 1.0, with_aa=False)
    out["at_margin"] = {k: edge["sequential"][k] for k in ("false_promotion_rate", "false_promotion_ci95",
                                                            "false_promotion_by_kind", "median_requests_worse",
                                                            "timeout_rate_worse")}
    out["at_margin"]["threshold_false_promotion_rate"] = edge["threshold"]["false_promotion_rate"]
    out["targets_met"] = targets_met(out, args.alpha)
    out["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
