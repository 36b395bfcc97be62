"""Runs named steps in order, each timed and shown with a Rich progress display.

A step is a plain function ``(ctx) -> dict`` returning the figures it wants in the summary. The first
failing step stops the run; what ran before is kept in the result so the report can still be written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

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


def run_steps(steps: list[Step], ctx: Any, *, console: Console | None = None, show: bool = True) -> list[StepResult]:
    """Run ``steps`` against ``ctx``; stop at the first failure (later steps are marked skipped)."""
    results: list[StepResult] = []
    console = console or Console(stderr=True)
    progress = Progress(
        SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=console, disable=not show, transient=False,
    )
    failed = False
    with progress:
        overall = progress.add_task("pipeline", total=len(steps))
        for i, step in enumerate(steps, 1):
            if failed:
                results.append(StepResult(step.name, step.title, "skipped", 0.0))
                continue
            task = progress.add_task(f"{i}. {step.title}", total=1)
            started = time.perf_counter()
            try:
                outputs = step.run(ctx) or {}
            except Exception as exc:  # a step's failure is reported, not re-raised: the report still gets written
                log.debug("step %s failed", step.name, exc_info=True)
                results.append(StepResult(step.name, step.title, "failed", time.perf_counter() - started,
                                          error=f"{type(exc).__name__}: {exc}"))
                progress.update(task, description=f"{i}. {step.title} [red]failed")
                failed = True
            else:
                results.append(StepResult(step.name, step.title, "ok", time.perf_counter() - started, outputs))
                progress.update(task, completed=1, description=f"{i}. {step.title} [green]ok "
                                f"({results[-1].seconds:.1f}s)")
            progress.advance(overall)
    return results
