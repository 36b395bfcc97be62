"""What the pipeline's steps share: the loaded config, the repo root, and the facts earlier steps found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlops_config import LoadedConfig, PlatformConfig


@dataclass
class PipelineContext:
    loaded: LoadedConfig
    fast: bool = False
    actor: str = "mlops-pipeline"
    facts: dict[str, Any] = field(default_factory=dict)
    """Outputs of earlier steps that later steps (and the report) read, e.g. ``candidate_version``."""

    @property
    def cfg(self) -> PlatformConfig:
        return self.loaded.config

    @property
    def root(self) -> Path:
        return self.loaded.root

    @property
    def model(self) -> str:
        return self.cfg.project.model

    @property
    def work_dir(self) -> Path:
        """Scratch area of the demo's own (corrupted and drifted batches, server logs)."""
        path = self.root / "data" / "pipeline"
        path.mkdir(parents=True, exist_ok=True)
        return path
