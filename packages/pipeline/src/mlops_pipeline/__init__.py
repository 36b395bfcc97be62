"""The whole loop on one machine, as `mlops pipeline run` and `make demo` run it, and the staging rehearsal."""

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.pipeline import STEPS, PipelineResult, run_pipeline
from mlops_pipeline.rehearsal import RehearsalResult, run_rehearsal, stdout_to_stderr

__all__ = ["STEPS", "PipelineError", "PipelineResult", "RehearsalResult", "run_pipeline", "run_rehearsal",
           "stdout_to_stderr"]
