"""The whole loop on one machine, as `mlops pipeline run` and `make demo` run it; monitoring decisions carried out."""

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.pipeline import STEPS, PipelineResult, run_pipeline
from mlops_pipeline.rollback import RollbackOutcome, execute_rollback, rollback_executor, run_monitoring

__all__ = [
    "STEPS",
    "PipelineError",
    "PipelineResult",
    "RollbackOutcome",
    "execute_rollback",
    "rollback_executor",
    "run_monitoring",
    "run_pipeline",
]
