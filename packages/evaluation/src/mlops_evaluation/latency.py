"""Latency of two predictors measured in interleaved rounds, with an A/A control for noise.

What is timed (:func:`measure_interleaved`): each call's **CPU time on the calling thread's clock**
(``time.thread_time_ns``), which is what the verdict judges, and its wall-clock beside it. The forwards run on one
torch intra-op thread (:func:`one_torch_thread`), so the calling thread's CPU time is the whole call's compute. On a
shared 2-core machine at load 7-9 wall-clock counts the time a call waited for a core: two identical models' p95s
came out +5.3 % apart with a CI of [-3.7 %, +15.7 %] after 14 rounds, so the verdict hung on the neighbours. CPU
time does not see that wait; it is blind to a call that waits by itself (a lock, I/O, a sleep) and to work handed to
other threads, which the gate's wall-clock backstop (:func:`mlops_evaluation.gates.latency_gate`) is for.

Each timed request calls the champion (A), the candidate (B) and the champion again (A′) on the same payload,
in an order that rotates every request, so slow drifts of the machine (another process, thermal, GC) hit all
three alike. Warm-up requests are discarded. A *round* is one such interleaved series of
``evaluation.latency_requests`` requests; the gate (:func:`mlops_evaluation.gates.latency_rounds`) measures
more rounds while it cannot tell.

What is compared (:func:`paired_regression`), and why not p99:

* **centre**: the median over requests of the paired ratio ``B[i] / A[i]``. A and B of one request ran within
  a millisecond of each other, so a slow spell of the machine scales both and cancels in the ratio; the median
  ignores any share of hiccups below one half.
* **tail**: ``p95(B) / p95(A)``. A p99 over a few hundred samples rests on its top three or four values, and
  on a shared 2-core machine ~1 % of samples are hiccups (a neighbour takes the core for 1.5-2× the call):
  the p99 *is* the hiccups (a CI run saw +45 % between two wall-clock tails of one model; CPU time has
  fewer). The p95 sits on ~20 values above it, so a handful of hiccups move it by a few percent, while a
  candidate slower in its tail still moves it. p99 is computed and reported, not gated.
* **A/A**: the same two statistics for A′ against A. Two series of one model differ only by noise; when
  they differ by more than ``latency_max_noise`` the run cannot be trusted to tell models apart.

Each regression comes with a paired bootstrap interval: requests are resampled together, keeping A, B and A′
of one request side by side. The interval already holds the sampling noise, so the gate compares it with the
tolerance alone (adding the A/A difference on top would count the noise twice).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError

Predict = Callable[[Any], Any]
QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
TAIL = 0.95
"""The gated tail quantile (p95; see the module docstring for why not p99)."""
CLOCK = "cpu"
"""The clock the gate judges: CPU time of the calling thread (the module docstring says why)."""
ORDERS = ((0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (1, 0, 2), (2, 1, 0))


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / p99 (linear interpolation, numpy's default) and the mean of latencies in ms."""
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.size == 0:
        raise EvaluationError("no latency samples: expected at least one timed request")
    out = {k: float(np.quantile(x, q)) for k, q in QUANTILES.items()}
    out["mean"] = float(x.mean())
    return out


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """The calling thread runs on one torch intra-op thread meanwhile, as serving's transformer does
    (``mlops_serving.transformer.single_threaded_torch``), so a latency gate times what serving runs; every
    family's latency gate times under it.

    With torch's default (one thread per core) the helper threads spin on cores other processes want: on a
    loaded 2-core machine a 3×1536 MLP took 57 ms of CPU (499 ms wall) per 32-row batch on 2 threads against
    5.7 ms (74 ms wall) on one; the 64-32 MLP the same 0.03 ms either way.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class LatencyRun:
    """Timed samples (ms) of champion (A), candidate (B) and the champion's control series (A′).

    ``a_ms``, ``b_ms`` and ``a2_ms`` are the judged series: CPU time of the calling thread (``CLOCK``).
    ``*_wall_ms`` are the same calls on wall-clock, for the backstop; empty when not measured (a hand-built run).
    """

    a_ms: list[float]
    b_ms: list[float]
    a2_ms: list[float]
    warmup: int
    extra: dict[str, Any] = field(default_factory=dict)
    a_wall_ms: list[float] = field(default_factory=list)
    b_wall_ms: list[float] = field(default_factory=list)
    a2_wall_ms: list[float] = field(default_factory=list)

    def __add__(self, other: LatencyRun) -> LatencyRun:
        """The requests of both runs, in order (a later round appended to the earlier ones)."""
        return LatencyRun(self.a_ms + other.a_ms, self.b_ms + other.b_ms, self.a2_ms + other.a2_ms,
                          self.warmup + other.warmup, {**self.extra, **other.extra},
                          self.a_wall_ms + other.a_wall_ms, self.b_wall_ms + other.b_wall_ms,
                          self.a2_wall_ms + other.a2_wall_ms)

    @property
    def has_wall(self) -> bool:
        """Whether every request was also timed on wall-clock."""
        return len(self.a_wall_ms) == len(self.b_wall_ms) == len(self.a2_wall_ms) == len(self.b_ms) > 0

    def summary(self, *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
        """Percentiles per series, the gated regressions (:func:`paired_regression`), the p99 figures, and the
        wall-clock figures (``wall``: {} when not measured).

        Regressions and noise are ratios (0.1 = 10 % slower). ``p99_regression_ci`` is the two-sided
        ``confidence`` percentile interval of ``p99(B) / p99(A) - 1`` over ``resamples`` paired resamples of
        the requests (seeded, so a report is reproducible); it is reported, not gated.
        """
        a, b, a2 = percentiles(self.a_ms), percentiles(self.b_ms), percentiles(self.a2_ms)
        paired = paired_regression(self.a_ms, self.b_ms, self.a2_ms, confidence=confidence, resamples=resamples,
                                   seed=seed)
        return {
            "clock": CLOCK, "champion": a, "candidate": b, "champion_control": a2, **paired,
            "p99_regression": b["p99"] / a["p99"] - 1.0,
            "p99_aa": a2["p99"] / a["p99"] - 1.0,
            "wall": self._wall(confidence, resamples, seed),
            "confidence": confidence, "requests": len(self.b_ms), "warmup": self.warmup, **self.extra,
        }

    def _wall(self, confidence: float, resamples: int, seed: int) -> dict[str, Any]:
        """The wall-clock series' percentiles and their paired ``ratio`` (1 + the centre regression, the median of
        per-request ``B / A``) with its CI: what the backstop judges. The wall p95 ratio is reported beside it."""
        if not self.has_wall:
            return {}
        paired = paired_regression(self.a_wall_ms, self.b_wall_ms, self.a2_wall_ms, confidence=confidence,
                                   resamples=resamples, seed=seed)
        low, high = paired["centre_regression_ci"]
        return {"champion": percentiles(self.a_wall_ms), "candidate": percentiles(self.b_wall_ms),
                "champion_control": percentiles(self.a2_wall_ms), "ratio": 1.0 + paired["centre_regression"],
                "ratio_ci": [1.0 + low, 1.0 + high], "tail_regression": paired["tail_regression"],
                "aa_noise": paired["aa_noise"]}


def _centre(a: np.ndarray, b: np.ndarray) -> Any:
    return np.median(b / a, axis=-1) - 1.0


def _tail(a: np.ndarray, b: np.ndarray) -> Any:
    return np.quantile(b, TAIL, axis=-1) / np.quantile(a, TAIL, axis=-1) - 1.0


def paired_regression(a_ms: Sequence[float], b_ms: Sequence[float], a2_ms: Sequence[float], *, confidence: float,
                      resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The candidate's centre and tail regression over the champion, with paired bootstrap CIs, and the A/A spread.

    ``centre_regression`` = ``median_i(B[i] / A[i]) - 1``; ``tail_regression`` = ``p95(B) / p95(A) - 1``;
    each ``*_ci`` the two-sided ``confidence`` percentile interval over ``resamples`` resamples of whole
    requests ``(A[i], B[i], A′[i])``. ``aa_centre`` and ``aa_tail`` are the same statistics for A′ against A;
    ``aa_noise`` is the larger of their magnitudes. ``p99_regression_ci`` comes from the same resamples (the
    same draws as :func:`p99_ratio_ci` with this seed), reported, not gated.
    """
    a, b, a2 = (np.asarray(x, dtype=np.float64) for x in (a_ms, b_ms, a2_ms))
    if not (a.shape == b.shape == a2.shape) or a.ndim != 1 or a.size == 0:
        raise EvaluationError(f"paired latency series must be non-empty and of equal length, got {a.size}, {b.size} "
                              f"and {a2.size} samples")
    if not 0.0 < confidence < 1.0:
        raise EvaluationError(f"confidence={confidence!r}: expected a fraction strictly between 0 and 1")
    if (a <= 0).any() or (b <= 0).any() or (a2 <= 0).any():
        raise EvaluationError("latency samples must be positive durations; got a sample ≤ 0 ms")
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    ra, rb = a[idx], b[idx]
    qa, qb = np.quantile(ra, [TAIL, 0.99], axis=1), np.quantile(rb, [TAIL, 0.99], axis=1)  # one sort per series
    boots = {"centre": np.median(rb / ra, axis=1) - 1.0, "tail": qb[0] / qa[0] - 1.0, "p99": qb[1] / qa[1] - 1.0}
    tail = (1.0 - confidence) / 2.0
    out: dict[str, Any] = {}
    for name, stat in (("centre", _centre), ("tail", _tail)):
        out[f"{name}_regression"] = float(stat(a, b))
        out[f"aa_{name}"] = float(stat(a, a2))
    for name, boot in boots.items():
        out[f"{name}_regression_ci"] = [float(np.quantile(boot, tail)), float(np.quantile(boot, 1.0 - tail))]
    out["aa_noise"] = max(abs(out["aa_centre"]), abs(out["aa_tail"]))
    out["tail_quantile"] = TAIL
    return out


def p99_ratio_ci(a_ms: Sequence[float], b_ms: Sequence[float], *, confidence: float, resamples: int,
                 seed: int) -> list[float]:
    """Percentile bootstrap CI of ``p99(b) / p99(a) - 1`` resampling the paired requests ``(a[i], b[i])``."""
    a, b = np.asarray(a_ms, dtype=np.float64), np.asarray(b_ms, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise EvaluationError(f"paired latency series must be non-empty and of equal length, got {a.size} and "
                              f"{b.size} samples")
    if not 0.0 < confidence < 1.0:
        raise EvaluationError(f"confidence={confidence!r}: expected a fraction strictly between 0 and 1")
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    ratio = np.quantile(b[idx], 0.99, axis=1) / np.quantile(a[idx], 0.99, axis=1) - 1.0
    tail = (1.0 - confidence) / 2.0
    return [float(np.quantile(ratio, tail)), float(np.quantile(ratio, 1.0 - tail))]


def _timed(fn: Predict, payload: Any, repeats: int) -> tuple[float, float]:
    """The median over ``repeats`` back-to-back calls of the calling thread's CPU time and of wall-clock (ms)."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        fn(payload)
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        cpu.append((c1 - c0) / 1e6)
        wall.append((t1 - t0) / 1e6)
    return float(np.median(cpu)), float(np.median(wall))


def measure_interleaved(champion: Predict, candidate: Predict, requests: Sequence[Any], *, timed: int,
                        warmup: int, repeats: int = 1) -> LatencyRun:
    """Call A, B, A′ (rotating order) on each of ``requests`` cycled; drop the first ``warmup`` requests.

    Each call is timed on the calling thread's CPU clock (the judged series) and on wall-clock (the backstop's).
    The predictors must compute on the calling thread (:func:`one_torch_thread` for torch): CPU time spent on other
    threads is not counted, and shows only on wall-clock, as waiting.

    Args:
        champion: the reference predictor (A and A′). candidate: the predictor under test (B).
        requests: request payloads, used in turn. timed: requests kept. warmup: requests discarded first.
        repeats: back-to-back calls per sample; the sample is their median, per clock.
    """
    if not requests:
        raise EvaluationError("latency run needs at least one request payload")
    if timed < 1 or warmup < 0 or repeats < 1:
        raise EvaluationError(f"timed={timed!r} and repeats={repeats!r} must be ≥ 1, warmup={warmup!r} ≥ 0")
    fns = (champion, candidate, champion)
    cpu: tuple[list[float], list[float], list[float]] = ([], [], [])
    wall: tuple[list[float], list[float], list[float]] = ([], [], [])
    for i in range(warmup + timed):
        payload = requests[i % len(requests)]
        for k in ORDERS[i % len(ORDERS)]:
            c, w = _timed(fns[k], payload, repeats)
            if i >= warmup:
                cpu[k].append(c)
                wall[k].append(w)
    return LatencyRun(*cpu, warmup, {"repeats": repeats}, *wall)
