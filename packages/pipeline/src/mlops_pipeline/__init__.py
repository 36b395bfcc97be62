"""The whole loop on one machine, as `mlops pipeline run` and `make demo` run it, the staging rehearsal, and
monitoring decisions carried out."""

from mlops_pipeline.console import StepConsole, new_run_dir
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.pipeline import STEPS, PipelineResult, run_pipeline
from mlops_pipeline.provenance import VersionAudit, attach_sbom, verify_version
from mlops_pipeline.rehearsal import RehearsalResult, run_rehearsal
from mlops_pipeline.rollback import RollbackOutcome, fallback_executor, roll_back_to_fallback, run_monitoring
from mlops_pipeline.steps import stdout_to_stderr
from mlops_pipeline.triggers import (
    IngestRun,
    PerformanceRun,
    RetrainTriggerError,
    retrain_requester,
    run_data_trigger,
    run_ingest,
    run_performance,
    write_retrain_metrics,
)

__all__ = [
    "STEPS",
    "IngestRun",
    "PerformanceRun",
    "PipelineError",
    "PipelineResult",
    "RehearsalResult",
    "RetrainTriggerError",
    "RollbackOutcome",
    "StepConsole",
    "VersionAudit",
    "attach_sbom",
    "fallback_executor",
    "new_run_dir",
    "retrain_requester",
    "roll_back_to_fallback",
    "run_data_trigger",
    "run_ingest",
    "run_monitoring",
    "run_performance",
    "run_pipeline",
    "run_rehearsal",
    "stdout_to_stderr",
    "verify_version",
    "write_retrain_metrics",
]
