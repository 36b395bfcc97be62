"""The generation latency gate of a Hugging Face causal LM: CPU time judged on centre and tail, a wall-clock backstop.

What is timed (:func:`mlops_evaluation.lm_evaluate.timed_generation`): per generation, the CPU seconds of the
generating process to the first new token (TTFT) and to the end, on one torch thread, and wall-clock beside them.
CPU time is what a bigger model costs, and on a shared 2-core machine it does not count the time a generation
waited for a core (a 12 ms first token waited up to 300 ms there). It is blind to waiting *inside* ``generate``
(a lock, I/O, a sleep): the wall-clock backstop catches that.

Judged, per metric (TTFT, and decode seconds per token after the first), on paired statistics over the
interleaved rounds (reference A, candidate B, reference A′):

* **centre**: the median over rounds of ``B_i / A_i`` (a round's three calls saw the same machine, so load that
  drifts over the run cancels);
* **tail**: p90 of B against p90 of A (a run of tens of generations has no p99 but its slowest one; p90 rests on
  a tenth of them).

Each has a paired bootstrap CI (rounds resampled, A, B and A′ together), which already holds the run's noise, so
the allowance is ``tolerance`` alone. **Pass** when every upper end is ≤ ``tolerance``, the A/A spread ≤
``max_noise`` and the backstop holds; **fail** when a lower end is > ``tolerance`` (plus the A/A spread when that is
beyond ``max_noise``) or the backstop's lower end is > ``wall_max_ratio``; otherwise **inconclusive**, and
:func:`lm_latency_rounds` measures another round, failing as inconclusive when its budget runs out.

The **wall-clock backstop**: the median over rounds of the paired wall-clock ratio ``B_i / A_i`` of whole
generations. Its bound is wide (the neighbours' load is in it): it is there to stop a candidate that waits, not to
measure compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import GateResult
from mlops_evaluation.latency import percentiles

TAIL = 90
"""The tail percentile judged."""

_EPS = 1e-9  # ratios of equal floats come out 1e-16 off; that must not flip a verdict


@dataclass(frozen=True)
class GenerationTiming:
    """One timed generation: seconds to the first new token, and the whole call, on the clock the gate judges
    (CPU time of the generating process in the gates), and wall-clock when measured."""

    ttft_s: float
    total_s: float
    new_tokens: int
    wall_ttft_s: float | None = None
    wall_total_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        """Decode rate after the first token (the serving metric's definition)."""
        rest = self.total_s - self.ttft_s
        return (self.new_tokens - 1) / rest if self.new_tokens > 1 and rest > 0 else 0.0

    @property
    def decode_s_per_token(self) -> float:
        """Seconds per token after the first (what a slower decode raises; the inverse of ``tokens_per_s``)."""
        return (self.total_s - self.ttft_s) / (self.new_tokens - 1) if self.new_tokens > 1 else 0.0


def _series(timings: Sequence[GenerationTiming]) -> dict[str, Any]:
    out = {"ttft_ms": percentiles([t.ttft_s * 1000 for t in timings]),
           "tokens_per_s": percentiles([t.tokens_per_s for t in timings])}
    if all(t.wall_total_s is not None for t in timings):
        out["wall_total_ms"] = percentiles([(t.wall_total_s or 0.0) * 1000 for t in timings])
    return out


def _stats(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Centre (median paired ratio) and tail (p90 over p90) regressions of ``b`` against ``a``."""
    keep = a > 0
    centre = float(np.median(b[keep] / a[keep])) - 1.0 if keep.any() else 0.0
    tail_a = float(np.percentile(a, TAIL))
    return centre, (float(np.percentile(b, TAIL)) / tail_a - 1.0) if tail_a > 0 else 0.0


def _bootstrap(a: np.ndarray, b: np.ndarray, confidence: float, samples: int, seed: int
               ) -> tuple[tuple[float, float], tuple[float, float]]:
    """Paired percentile-bootstrap CIs of the centre and tail regressions (rounds resampled together)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(samples, len(a)))
    stats = np.array([_stats(a[i], b[i]) for i in idx])
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha], axis=0)
    return (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))


def lm_latency_gate(champion: Sequence[GenerationTiming], candidate: Sequence[GenerationTiming],
                    control: Sequence[GenerationTiming], *, tolerance: float, max_noise: float, reference: str,
                    warmup: int, wall_max_ratio: float | None, confidence: float = 0.95, samples: int = 1000,
                    seed: int = 0) -> GateResult:
    """Pass, fail or inconclusive from one set of interleaved rounds (see the module doc)."""
    if not len(champion) == len(candidate) == len(control) or len(candidate) < 2:
        raise EvaluationError(f"the latency series must be paired, at least 2 generations each, got "
                              f"{len(champion)}, {len(candidate)} and {len(control)}")
    series = {"ttft": lambda t: t.ttft_s, "decode": lambda t: t.decode_s_per_token}
    judged: dict[str, Any] = {}
    noise = 0.0
    for name, get in series.items():
        a, b, a2 = (np.array([get(t) for t in s], dtype=float) for s in (champion, candidate, control))
        centre, tail = _stats(a, b)
        centre_ci, tail_ci = _bootstrap(a, b, confidence, samples, seed)
        aa = _stats(a, a2)
        noise = max(noise, abs(aa[0]), abs(aa[1]))
        judged[name] = {"centre": centre, "centre_ci": centre_ci, "tail": tail, "tail_ci": tail_ci,
                        "aa_centre": aa[0], "aa_tail": aa[1]}
    noisy = noise > max_noise + _EPS
    bar = tolerance + (noise if noisy else 0.0)
    slower = [f"{name} {part} (CI lower end {judged[name][f'{part}_ci'][0]:+.1%} > {bar:+.1%})"
              for name in judged for part in ("centre", "tail") if judged[name][f"{part}_ci"][0] > bar + _EPS]
    within = all(judged[name][f"{part}_ci"][1] <= tolerance + _EPS for name in judged for part in ("centre", "tail"))
    wall = _backstop(champion, candidate, wall_max_ratio, confidence, samples, seed)
    if wall.get("verdict") == "fail":
        slower.append(f"wall-clock backstop (paired ratio {wall['ratio']:.2f}×, CI lower end "
                      f"{wall['ratio_ci'][0]:.2f}× > bound {wall_max_ratio:.2f}×: the candidate waits, not computes)")
    verdict = ("fail" if slower else
               # a configured bound that was not measured is not a backstop that held
               "pass" if within and not noisy and (wall.get("verdict") == "pass" or wall_max_ratio is None)
               else "inconclusive")
    figures = "; ".join(
        f"{name} centre {j['centre']:+.1%} CI [{j['centre_ci'][0]:+.1%}, {j['centre_ci'][1]:+.1%}], "
        f"p{TAIL} {j['tail']:+.1%} CI [{j['tail_ci'][0]:+.1%}, {j['tail_ci'][1]:+.1%}]" for name, j in judged.items())
    wall_text = ("wall-clock backstop not measured" if not wall else
                 f"wall-clock paired ratio {wall['ratio']:.2f}× CI [{wall['ratio_ci'][0]:.2f}, "
                 f"{wall['ratio_ci'][1]:.2f}] (bound {wall_max_ratio:.2f}×)" if wall_max_ratio is not None else
                 f"wall-clock paired ratio {wall['ratio']:.2f}× (reported, no bound configured)")
    if verdict == "fail":
        head = "slower than allowed: " + " and ".join(slower)
    elif verdict == "pass":
        head = (f"within tolerance: every CPU-time CI upper end ≤ {tolerance:+.1%}"
                + (" and the wall-clock backstop holds" if wall_max_ratio is not None else ""))
    elif noisy:
        head = f"too noisy to judge: the {reference}'s own two series differed by {noise:.0%} (limit {max_noise:.0%})"
    else:
        head = f"undecided: a CI straddles the tolerance {tolerance:+.1%} or the wall-clock bound"
    reason = (f"{head}; CPU time against {reference}: {figures}; A/A spread {noise:.1%}; {wall_text}; "
              f"{len(candidate)} interleaved generations each, {warmup} warm-up dropped")
    evidence = {"reference": reference, "champion": _series(champion), "candidate": _series(candidate),
                "champion_control": _series(control), "judged": judged, "aa_noise": noise, "wall": wall,
                "clock": "cpu", "tail_percentile": TAIL, "tolerance": tolerance, "max_noise": max_noise,
                "wall_max_ratio": wall_max_ratio, "confidence": confidence, "requests": len(candidate),
                "warmup": warmup, "verdict": verdict,
                "paired": "median over rounds of B/A (centre), p90 of B over p90 of A (tail)"}
    return GateResult("latency", verdict == "pass", reason, evidence, inconclusive=verdict == "inconclusive")


def _backstop(champion: Sequence[GenerationTiming], candidate: Sequence[GenerationTiming], bound: float | None,
              confidence: float, samples: int, seed: int) -> dict[str, Any]:
    """The paired wall-clock ratio of whole generations, its CI, and its verdict against ``bound`` ({} unmeasured)."""
    if any(t.wall_total_s is None for t in (*champion, *candidate)):
        return {}
    a = np.array([t.wall_total_s for t in champion], dtype=float)
    b = np.array([t.wall_total_s for t in candidate], dtype=float)
    (low, high), _ = _bootstrap(a, b, confidence, samples, seed)
    ratio = _stats(a, b)[0] + 1.0
    out: dict[str, Any] = {"ratio": ratio, "ratio_ci": (low + 1.0, high + 1.0), "verdict": None}
    if bound is not None:
        out["verdict"] = "fail" if low + 1.0 > bound + _EPS else "pass" if high + 1.0 <= bound + _EPS else "undecided"
    return out


def lm_latency_rounds(measure: Callable[[], tuple[list[GenerationTiming], ...]], *, max_rounds: int,
                      **gate: Any) -> GateResult:
    """Measure rounds (``measure()``: A, B, A′ series) and judge everything so far after each, until the gate
    passes or fails; still undecided after ``max_rounds``, it fails as "inconclusive: could not tell"."""
    if max_rounds < 1:
        raise EvaluationError(f"max_rounds={max_rounds!r}: expected at least 1 round of generation timing")
    a: list[GenerationTiming] = []
    b: list[GenerationTiming] = []
    a2: list[GenerationTiming] = []
    history: list[dict[str, Any]] = []
    for i in range(1, max_rounds + 1):
        ra, rb, ra2 = measure()
        a, b, a2 = a + ra, b + rb, a2 + ra2
        result = lm_latency_gate(a, b, a2, **gate)
        history.append({"round": i, "requests": len(b), "verdict": result.verdict})
        if not result.inconclusive:
            return GateResult("latency", result.passed, result.reason,
                              {**result.evidence, "rounds": history, "max_rounds": max_rounds})
    return GateResult("latency", False, f"inconclusive: could not tell within {max_rounds} rounds; {result.reason}",
                      {**result.evidence, "rounds": history, "max_rounds": max_rounds}, inconclusive=True)
