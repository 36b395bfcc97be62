"""The whole loop on one machine, as `mlops pipeline run` and `make demo` run it."""

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.pipeline import STEPS, PipelineResult, run_pipeline

__all__ = ["STEPS", "PipelineError", "PipelineResult", "run_pipeline"]
