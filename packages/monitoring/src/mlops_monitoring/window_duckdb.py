"""The monitor's verdict on a window with ``monitoring.engine: duckdb`` (or ``spark``): the window stays in parquet.

Only what is small comes back to Python: the drift aggregates (:mod:`mlops_monitoring.drift_duckdb`), the
record id (the contract's ``record_id``) and ``score`` columns when delayed labels are joined, the ``score`` column
(the CBPE estimate of ``mlops_monitoring.estimated_drop``), and seeded samples for Evidently's HTML and
the skew replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import ContractConfig, MonitoringConfig
from mlops_monitoring.drift import SCORE, DriftReport
from mlops_monitoring.drift_duckdb import DuckDBDrift, TableSource, compare_duckdb, infer_columns
from mlops_monitoring.drift_engine import DriftEngine
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.estimated_drop import reference_scores
from mlops_monitoring.quality import RealizedQuality, realized_quality, served_threshold

log = logging.getLogger(__name__)


@dataclass
class WindowAssessment:
    """A window's drift report and realized quality, with the samples a report shows."""

    report: DriftReport
    quality: RealizedQuality | None
    reference_metrics: dict[str, float]
    current_sample: pd.DataFrame
    reference_sample: pd.DataFrame | None
    skew_sample: pd.DataFrame | None
    scores: np.ndarray | None = None
    """The window's served scores (CBPE), when the log carries them."""
    reference_scores: np.ndarray | None = None
    """The reference's scores: its profile's score ECDF or its rows' ``score`` column (``None``: none)."""


Reference = dict[str, Any] | TableSource


def assess_window(
    monitoring: MonitoringConfig, reference: Reference | Callable[[], Reference], current: TableSource,
    info: dict[str, Any],
    *, labels: pd.DataFrame | None = None, sample_rows: int = 0, skew_rows: int = 0, seed: int = 0,
    contract: ContractConfig,
) -> WindowAssessment:
    """Compare the window with the reference in DuckDB, as ``monitor.assess`` does in memory.

    With reference rows the compared columns are those both sides share, minus ``monitoring.ignore_columns``.
    ``info`` (what the window covers) gets ``degraded_rows_excluded`` when the window holds degraded rows.
    ``reference`` may be a loader, called once the window has enough rows. ``contract`` names the label and
    the record id predictions join their labels on.

    Raises:
        MonitoringError: fewer than ``monitoring.min_rows`` rows, no shared column, or unusable inputs.
    """
    if monitoring.engine == "spark":
        from mlops_monitoring.drift_spark import SparkDrift

        engine: DriftEngine = SparkDrift(monitoring)
    else:
        engine = DuckDBDrift(monitoring)
    with engine as eng:
        n = 0
        if current.paths:
            eng.view("cur", current)
            n = eng.count("cur")
            degraded = eng.count("cur_window") - n
            if degraded:
                info["degraded_rows_excluded"] = degraded
                log.warning("%d degraded predictions (default features) are left out of the comparison", degraded)
        if n < monitoring.min_rows:
            raise MonitoringError(
                f"{info.get('source')!r} holds {n} rows in the window {info.get('window', 'given')!r}; "
                f"at least monitoring.min_rows={monitoring.min_rows} are needed for a verdict (widen --window)"
            )
        cur_types = eng.types["cur"]
        window = dict(info)
        if callable(reference):
            reference = reference()
        reference_sample = None
        if isinstance(reference, TableSource):
            ref_types = eng.view("ref", reference)
            ignore = set(monitoring.ignore_columns)
            columns = [c for c in ref_types if c in cur_types and c not in ignore and c != SCORE]
            unmatched = sorted(c for c in ref_types if c not in cur_types and c not in ignore)
            if unmatched:
                log.warning("reference columns %s are not in the current data; they are not compared", unmatched)
                window["reference_only_columns"] = unmatched
            if not columns:
                raise MonitoringError(
                    f"the reference and the current data share no feature column (reference has {list(ref_types)!r})")
            numeric, categorical = infer_columns({c: ref_types[c] for c in columns})
            report = compare_duckdb(reference, current, monitoring, numeric=numeric, categorical=categorical,
                                    window=window, engine=eng)
            label = contract.label
            ref_metrics = {"positive_rate": float(eng.sql(f"SELECT avg(CAST({label} AS DOUBLE)) FROM ref")[0][0])} \
                if label in ref_types else {}
            if sample_rows:
                reference_sample = eng.sample("ref", sample_rows, seed)
        else:
            report = compare_duckdb(reference, current, monitoring, window=window, engine=eng)
            ref_metrics = dict(reference.get("metrics") or {})
        if isinstance(reference, TableSource):
            ref_scores = (eng.frame(f"SELECT {SCORE} FROM ref")[SCORE].to_numpy(dtype=np.float64)
                          if SCORE in ref_types else None)
        else:
            ref_scores = reference_scores(reference)
        scores = eng.frame(f"SELECT {SCORE} FROM cur")[SCORE].to_numpy(dtype=np.float64) \
            if SCORE in cur_types else None
        quality = None
        if labels is not None:
            keep = [c for c in (contract.record_id, SCORE) if c in cur_types]
            predictions = eng.frame(f"SELECT {', '.join(keep)} FROM cur") if keep else pd.DataFrame(index=range(n))
            quality = realized_quality(predictions, labels, served_threshold(reference, monitoring).value,
                                       key=contract.record_id, label=contract.label)
        return WindowAssessment(
            report=report, quality=quality, reference_metrics=ref_metrics,
            current_sample=eng.sample("cur", sample_rows, seed) if sample_rows else pd.DataFrame(),
            reference_sample=reference_sample,
            skew_sample=eng.sample("cur_window", skew_rows, seed) if skew_rows else None,
            scores=scores, reference_scores=ref_scores,
        )


__all__ = ["WindowAssessment", "assess_window"]
