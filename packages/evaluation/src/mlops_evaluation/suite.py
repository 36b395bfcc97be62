"""The :class:`GateSuite` protocol, what a model family's evaluation provides, and :func:`run_suite`, the one loop
that runs any family's gates.

Each family (:class:`mlops_model.ModelKind`) implements the protocol once and registers how to build it over
the loaded candidate and champion in :data:`mlops_evaluation.runner.GATE_SUITES`; the runner looks the suite up
by the candidate's kind and runs it here, so neither branches on the family. The report and its logging are the
runner's, one for every family.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mlops_config import DataConfig, EvaluationConfig, FeaturesConfig, TrainingConfig
from mlops_evaluation.gates import GateResult

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

Reproduce = Callable[[dict[str, Any], Path, int | None], Any]
"""``(recorded_config, root, max_steps) -> result`` with ``weights_sha256``, ``data_hash``, ``steps``,
``export_dir``; default: :func:`mlops_training.reproduce` (a real torchrun re-run, untracked)."""


@dataclass(frozen=True)
class SuiteRun:
    """What a gate suite may read besides the candidate and champion: the sections and the run's settings."""

    evaluation: EvaluationConfig
    features: FeaturesConfig
    data: DataConfig
    training: TrainingConfig | None
    root: Path
    seed: int
    reproduce_fn: Reproduce | None
    client: MlflowClient


class GateSuite(Protocol):
    """One family's gates over one candidate and its reference, built with the held-out set already loaded.

    Each gate is a method named as the gate (:data:`mlops_evaluation.gates.GATES`), so :func:`run_suite` calls
    the gates asked for by name; a suite may have gates beyond the four (the tabular ``calibration``).
    """

    gates: tuple[str, ...]
    """The gates this suite runs; others asked for are skipped (a language model's scores are no probability)."""
    holdout: dict[str, Any]
    """The held-out set, described for the report."""

    def quality(self) -> GateResult:
        """The candidate beats its reference on the held-out set."""
        ...

    def reproducibility(self) -> list[GateResult]:
        """The candidate's recorded training re-derives its weights, then any check run beside it."""
        ...

    def latency(self) -> GateResult:
        """The candidate is not slower than its reference beyond the tolerance."""
        ...

    def contract(self) -> GateResult:
        """The candidate takes and gives what serving and its clients expect."""
        ...


def run_suite(suite: GateSuite, gates: Sequence[str]) -> list[GateResult]:
    """Run the gates of ``gates`` that ``suite`` has, in that order, logging each; their results in order."""
    results: list[GateResult] = []
    for gate in gates:
        if gate not in suite.gates:
            continue
        log.info("gate %s: running", gate)
        results += suite.reproducibility() if gate == "reproducibility" else [getattr(suite, gate)()]
        log.info("gate %s: %s", gate, results[-1].label)
    return results
