"""Runs named steps in order, each timed, shown and logged by a :class:`~mlops_pipeline.console.StepConsole`.

A step is a plain function ``(ctx) -> dict`` returning the figures it wants in the summary. The first
failing step stops the run; what ran before is kept in the result so the report can still be written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlops_pipeline.console import StepConsole

log = logging.getLogger(__name__)


@dataclass
class StepResult:
    name: str
    title: str
    status: str  # "ok" | "failed" | "skipped"
    seconds: float
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[Any], dict[str, Any]]


def _status_line(result: StepResult) -> str:
    return result.error or result.status


def run_steps(steps: list[Step], ctx: Any, *, reporter: StepConsole | None = None,
              summarize: Callable[[StepResult], str] = _status_line) -> list[StepResult]:
    """Run ``steps`` against ``ctx``; stop at the first failure (later steps are marked skipped).

    ``reporter`` shows each step and keeps its output in the step's log (default: shows and keeps nothing);
    ``summarize`` turns an ended step into its one line of what happened.
    """
    reporter = reporter or StepConsole.quiet()
    results: list[StepResult] = []
    failed = False
    total = len(steps)
    reporter.begin(total)
    for i, step in enumerate(steps, 1):
        if failed:
            results.append(StepResult(step.name, step.title, "skipped", 0.0))
            reporter.skipped(i, total, results[-1])
            continue
        reporter.started(i, total, step.name, step.title)
        started = time.perf_counter()
        with reporter.captured(step.name):
            try:
                outputs = step.run(ctx) or {}
            except Exception as exc:  # a step's failure is reported, not re-raised: the report still gets written
                result = StepResult(step.name, step.title, "failed", time.perf_counter() - started,
                                    error=f"{type(exc).__name__}: {exc}")
                log.info("step %s failed: %s", step.name, result.error, exc_info=True)  # the traceback, in its log
                failed = True
            else:
                result = StepResult(step.name, step.title, "ok", time.perf_counter() - started, outputs)
        results.append(result)
        try:
            line = summarize(result)
        except Exception as exc:  # a summary missing a figure must not lose the step's outcome
            line = f"(no summary: {type(exc).__name__}: {exc})"
        reporter.finished(i, total, result, line)
    return results
