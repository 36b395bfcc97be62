"""Evidently's HTML drift report, for people; our verdicts come from :mod:`mlops_monitoring.drift`.

Evidently is slow and memory-hungry on large frames, so each side is sampled down to ``max_rows``.
Evidently bins PSI its own way, so its per-column flags can differ from ours near the threshold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)


def _sample(frame: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    return frame.sample(n=max_rows, random_state=seed) if len(frame) > max_rows else frame


def write_evidently_html(
    reference: pd.DataFrame, current: pd.DataFrame, numeric: Sequence[str], categorical: Sequence[str], path: Path, *,
    psi_threshold: float, max_rows: int = 50_000, seed: int = 0,
) -> Path:
    """Run Evidently's ``DataDriftPreset`` (PSI per column) on the two frames and save its HTML report."""
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    started = time.perf_counter()
    columns = [*numeric, *categorical]
    definition = DataDefinition(numerical_columns=list(numeric), categorical_columns=list(categorical))
    ref = Dataset.from_pandas(_sample(reference[columns], max_rows, seed), data_definition=definition)
    cur = Dataset.from_pandas(_sample(current[columns], max_rows, seed), data_definition=definition)
    preset = DataDriftPreset(columns=columns, num_method="psi", cat_method="psi", threshold=psi_threshold)
    snapshot = Report([preset]).run(cur, ref)  # Evidently takes current first
    path.parent.mkdir(parents=True, exist_ok=True)
    snapshot.save_html(str(path))
    log.info("wrote Evidently report %s in %.1f s", path, time.perf_counter() - started)
    return path
