"""``--fast`` coarsens the gates' evidence, but never the latency gate's budget of timed requests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlops_config import EvaluationConfig
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.steps import _evaluation_section

pytestmark = pytest.mark.unit


def _section(ev: EvaluationConfig, *, fast: bool) -> EvaluationConfig:
    ctx = PipelineContext(loaded=SimpleNamespace(config=SimpleNamespace(evaluation=ev)), fast=fast)  # type: ignore[arg-type]
    return _evaluation_section(ctx)


@pytest.mark.parametrize(("requests", "rounds"), [(400, 5), (150, 5), (100, 3), (1000, 1)])
def test_fast_rounds_are_smaller_but_the_budget_is_not(requests: int, rounds: int) -> None:
    full = EvaluationConfig(latency_requests=requests, latency_max_rounds=rounds)
    fast = _section(full, fast=True)
    assert fast.latency_requests == 150  # smaller rounds: a clear case decides after 150 requests per model
    # what a loaded machine may need to decide stays available: at least the full run's requests, in all
    assert fast.latency_requests * fast.latency_max_rounds >= requests * rounds
    assert fast.latency_max_rounds >= rounds
    assert fast.bootstrap_samples == 300


def test_the_full_run_is_the_config_as_given() -> None:
    full = EvaluationConfig(latency_requests=400, latency_max_rounds=5)
    assert _section(full, fast=False) == full
