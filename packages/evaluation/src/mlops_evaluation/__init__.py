"""Evaluation gates: quality vs champion, reproducibility, latency, contract, calibration."""

from mlops_evaluation.bootstrap import BootstrapResult, paired_bootstrap_f1
from mlops_evaluation.calibration_gate import calibration_gate
from mlops_evaluation.errors import EvaluationError
from mlops_evaluation.gates import (
    GATES,
    GateResult,
    latency_gate,
    latency_rounds,
    quality_gate,
    reproducibility_gate,
    tabular_contract_gate,
)
from mlops_evaluation.latency import LatencyRun, measure_interleaved, paired_regression, percentiles
from mlops_evaluation.metrics import binary_metrics, perplexity, slice_metrics
from mlops_evaluation.report import EvaluationReport, to_markdown
from mlops_evaluation.runner import evaluate
from mlops_evaluation.trajectory import check_trajectory, export_transform

__all__ = [
    "GATES",
    "BootstrapResult",
    "EvaluationError",
    "EvaluationReport",
    "GateResult",
    "LatencyRun",
    "binary_metrics",
    "calibration_gate",
    "check_trajectory",
    "evaluate",
    "export_transform",
    "latency_gate",
    "latency_rounds",
    "measure_interleaved",
    "paired_bootstrap_f1",
    "paired_regression",
    "percentiles",
    "perplexity",
    "quality_gate",
    "reproducibility_gate",
    "slice_metrics",
    "tabular_contract_gate",
    "to_markdown",
]
