"""The tabular latency gate (:func:`mlops_evaluation.runner.check_latency`) on calls timed on this machine, whatever
its load (issue #27): each verdict follows from the CPU work a predictor does and from whether it waits.

A predictor burns a fixed number of iterations of arithmetic (``tests.support.cpu.burn``); "preempted" and
"waits" are ``time.sleep``, which takes wall-clock and no CPU, as a call that waits for a core does. One sample per
call (``latency_repeats: 1``): a neighbour that holds the core is not hidden by a median of back-to-back calls.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable

import numpy as np
import pandas as pd

from mlops_config import EvaluationConfig
from mlops_evaluation.gates import GateResult
from mlops_evaluation.runner import check_latency
from tests.support.cpu import burn

CALL = 8000
"""Iterations of ``burn`` per call: ~0.35 ms of CPU on this machine's cores."""
SECTION = EvaluationConfig(latency_requests=200, latency_warmup=10, latency_repeats=1, latency_max_rounds=3)
"""The shipped tolerance (10 %), noise limit and wall-clock bound (1.5×); shorter rounds."""


def _gate(champion: Callable[[object], None], candidate: Callable[[object], None]) -> GateResult:
    def scorer(predict: Callable[[object], None]) -> types.SimpleNamespace:
        return types.SimpleNamespace(serving_predictor=lambda: (["amount"], predict))

    holdout = types.SimpleNamespace(frame=pd.DataFrame({"amount": [float(i) for i in range(64)]}))
    return check_latency(scorer(candidate), scorer(champion), holdout, SECTION)  # type: ignore[arg-type]


def _preempted(iterations: int, rng: np.random.Generator) -> Callable[[object], None]:
    """Burns ``iterations``; on 10 % of calls it is off the core in the middle for 3-25× a call's CPU time."""

    def predict(_: object) -> None:
        burn(iterations // 2)
        if rng.random() < 0.10:
            time.sleep(rng.uniform(0.001, 0.009))
        burn(iterations - iterations // 2)

    return predict


def test_identical_compute_preempted_alike_passes() -> None:
    """Same work, the same random preemptions (seeded) on both: wall-clock's p95 sits among the preempted calls and
    its interval straddles the tolerance (the wall-clock gate: inconclusive after 3 rounds); CPU time passes."""
    rng = np.random.default_rng(27)
    gate = _gate(_preempted(CALL, rng), _preempted(CALL, rng))
    assert gate.verdict == "pass", gate.reason
    assert gate.evidence["clock"] == "cpu" and gate.evidence["backstop"] == "pass"
    assert "within tolerance: both CPU-time CI upper ends ≤ +10.0% and the wall-clock backstop holds" in gate.reason
    assert gate.evidence["wall_max_ratio"] == SECTION.latency_wall_max_ratio == 1.5


def test_a_candidate_burning_1_5x_the_cpu_fails() -> None:
    rng = np.random.default_rng(28)
    gate = _gate(_preempted(CALL, rng), _preempted(CALL * 3 // 2, rng))
    assert gate.verdict == "fail", gate.reason
    assert gate.reason.startswith("slower than allowed: CPU-time centre (CI lower end"), gate.reason
    assert gate.evidence["centre_regression_ci"][0] > 0.10 and gate.evidence["tail_regression_ci"][0] > 0.10


def test_a_candidate_that_waits_is_failed_by_the_wall_clock_backstop() -> None:
    """The same CPU work, and a 4 ms sleep on every call: ≥ 4 ms of wall-clock against the champion's ~0.35 ms,
    a paired ratio far above 1.5×, which CPU time cannot see."""

    def waits(_: object) -> None:
        burn(CALL)
        time.sleep(0.004)

    gate = _gate(lambda _: burn(CALL), waits)
    assert gate.verdict == "fail" and gate.evidence["backstop"] == "fail", gate.reason
    assert gate.evidence["wall"]["ratio_ci"][0] > 1.5
    assert "the wall-clock backstop (paired ratio CI lower end" in gate.reason
    assert "the candidate waits, not computes" in gate.reason
