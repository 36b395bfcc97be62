"""The one gate loop (:func:`mlops_evaluation.suite.run_suite`) over a hand-built suite, and every family's suite
registered in the one registry, keyed by :class:`mlops_model.ModelKind`."""

from __future__ import annotations

from typing import Any

from mlops_evaluation.gates import GATES, LM_GATES, GateResult
from mlops_evaluation.runner import GATE_SUITES, ByteLMSuite, TabularSuite
from mlops_evaluation.suite import GateSuite, run_suite
from mlops_model import ModelKind


class Recorded:
    """A suite whose gates say which ran, in order; ``reproducibility`` gives a check beside the replay."""

    gates: tuple[str, ...] = LM_GATES

    def __init__(self) -> None:
        self.holdout: dict[str, Any] = {"rows": 0}
        self.calls: list[str] = []

    def _one(self, name: str, passed: bool = True) -> GateResult:
        self.calls.append(name)
        return GateResult(name, passed, f"{name} ran")

    def quality(self) -> GateResult:
        return self._one("quality", passed=False)

    def reproducibility(self) -> list[GateResult]:
        return [self._one("reproducibility"), self._one("decode_determinism")]

    def latency(self) -> GateResult:
        return self._one("latency")

    def contract(self) -> GateResult:
        return self._one("contract")

    def calibration(self) -> GateResult:  # not in its gates: must not run
        return self._one("calibration")


def test_run_suite_runs_the_gates_asked_for_in_order_and_skips_what_the_suite_has_not() -> None:
    suite = Recorded()
    typed: GateSuite = suite
    results = run_suite(typed, ("contract", "calibration", "reproducibility", "quality"))
    assert suite.calls == ["contract", "reproducibility", "decode_determinism", "quality"]
    assert [(g.name, g.passed) for g in results] == [("contract", True), ("reproducibility", True),
                                                     ("decode_determinism", True), ("quality", False)]
    assert run_suite(typed, ()) == []


def test_one_suite_per_kind_and_the_language_models_skip_calibration() -> None:
    assert set(GATE_SUITES) == set(ModelKind)
    assert GATE_SUITES[ModelKind.TABULAR] is TabularSuite and TabularSuite.gates == GATES
    assert GATE_SUITES[ModelKind.BYTE_LM] is ByteLMSuite
    assert ByteLMSuite.gates == LM_GATES == ("quality", "reproducibility", "latency", "contract")
