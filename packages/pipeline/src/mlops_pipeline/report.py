"""The pipeline's HTML report: one self-contained file (inline SVG, inline CSS, no script, no network)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from mlops_pipeline.runner import StepResult


@dataclass
class Section:
    """A titled block of the report: text, an optional table and any number of inline SVG plots."""

    id: str
    title: str
    text: str = ""
    table: dict[str, Any] | None = None
    plots: list[str] = field(default_factory=list)


def render_report(out_dir: Path, *, steps: Sequence[StepResult], sections: Sequence[Section], profile: str,
                  model: str, summaries: Mapping[str, str] | None = None) -> Path:
    """Write ``out_dir/index.html`` and return its path."""
    env = Environment(loader=PackageLoader("mlops_pipeline", "templates"), autoescape=select_autoescape(["html"]))
    summaries = summaries or {}
    html = env.get_template("report.html").render(
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        profile=profile,
        model=model,
        total_seconds=sum(s.seconds for s in steps),
        steps=[{"title": s.title, "status": s.status, "seconds": s.seconds, "error": s.error,
                "summary": summaries.get(s.name, "")} for s in steps],
        sections=sections,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    path.write_text(html, encoding="utf-8")
    return path
