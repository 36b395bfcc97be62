"""What the pipeline's steps share: the loaded config, the repo root, and the facts earlier steps found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_config import LoadedConfig, PlatformConfig


@dataclass
class PipelineContext:
    loaded: LoadedConfig
    fast: bool = False
    actor: str = "mlops-pipeline"
    facts: dict[str, Any] = field(default_factory=dict)
    """Outputs of earlier steps that later steps (and the report) read, e.g. ``candidate_version``."""

    _validated: pd.DataFrame | None = field(default=None, repr=False)

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

    def validated(self) -> pd.DataFrame:
        """The validated area, read once (after the ``validate`` stage ran) and shared by the later steps."""
        if self._validated is None:
            self._validated = pd.read_parquet(self.root / self.cfg.data.validated_dir)
        return self._validated
