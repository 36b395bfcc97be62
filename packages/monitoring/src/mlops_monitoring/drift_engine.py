"""What a drift engine is: the statistics' building blocks in one SQL dialect, over views ``ref`` and ``cur``.

:func:`mlops_monitoring.drift_duckdb.compare_duckdb` composes the comparison (which columns, PSI, chi², the
p-values, the verdicts) from these blocks only, so every engine gives the same report. Two engines implement
it side by side, neither derived from the other: :class:`~mlops_monitoring.drift_duckdb.DuckDBDrift` (one
process, larger than memory) and :class:`~mlops_monitoring.drift_spark.SparkDrift` (a cluster). The SQL both
dialects share (the window views, the missing-value scan) is written once, in functions that take an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from mlops_monitoring.errors import MonitoringError


@dataclass(frozen=True)
class TableSource:
    """Rows DuckDB reads in place: parquet files (or one CSV file), optionally through an fsspec filesystem.

    ``since`` / ``until`` bound ``ts`` (inclusive, UTC) and ``drop_degraded`` leaves out rows answered with
    default features, as the in-memory monitor does.
    """

    paths: tuple[str, ...]
    filesystem: Any = None
    since: datetime | None = None
    until: datetime | None = None
    drop_degraded: bool = False
    csv: bool = False

    @classmethod
    def from_path(cls, path: Path, what: str) -> TableSource:
        """A parquet file, a folder of parquet files, or a CSV file (as :func:`mlops_monitoring.source.read_table`).

        Raises:
            MonitoringError: the path does not exist, holds no parquet file, or has another suffix.
        """
        if not path.exists():
            raise MonitoringError(f"{what} {str(path)!r} does not exist")
        if path.is_dir():
            parts = sorted(str(p) for p in path.rglob("*.parquet"))
            if not parts:
                raise MonitoringError(f"{what} folder {str(path)!r} holds no .parquet file")
            return cls(tuple(parts))
        if path.suffix in (".parquet", ".csv"):
            return cls((str(path),), csv=path.suffix == ".csv")
        raise MonitoringError(f"{what} {str(path)!r} has suffix {path.suffix!r}; expected .parquet, .csv or a folder")


class DriftEngine(Protocol):
    """The building blocks an engine computes where the rows are; only small aggregates come back."""

    types: dict[str, dict[str, str]]
    """Column types of each view (DuckDB's type names), filled by :meth:`view`."""

    def __enter__(self) -> DriftEngine: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None:
        """Release what the engine opened (connection, spill folder, views)."""

    def sql(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one query and fetch its (small) result."""

    def frame(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run one query and fetch its result as a DataFrame."""

    def view(self, name: str, source: TableSource) -> dict[str, str]:
        """Views ``<name>_all`` / ``<name>_window`` / ``name`` over ``source``; returns the column types."""

    def count(self, name: str, where: str | None = None) -> int:
        """Rows of a view (optionally those matching ``where``)."""

    def numeric_counts(self, view: str, names: Sequence[str],
                       edges: Mapping[str, np.ndarray] | None) -> dict[str, dict[str, Any]]:
        """Per column ``{"valid", "missing", "counts"}`` (counts per bin ``[edges[i-1], edges[i])``)."""

    def reference_edges(self, name: str, n_valid: int, n_bins: int) -> np.ndarray:
        """The reference's interior quantile edges, equal to ``mlops_core.quantile_edges``."""

    def ks_exact(self, name: str, n1: int, n2: int) -> tuple[float, float]:
        """``scipy.stats.ks_2samp``'s statistic and p-value of the two sides' non-missing values."""

    def ks_sketch(self, name: str, ecdf: np.ndarray, n_ref: int, n2: int) -> tuple[float, float]:
        """``statistics.ks_from_sketch`` of the current values against a profile's ECDF sketch."""

    def category_counts(self, view: str, name: str) -> tuple[pd.Series, int]:
        """Counts per category (keys as pandas' ``astype(str)`` writes them) and the missing count."""

    def sample(self, view: str, n: int, seed: int) -> pd.DataFrame:
        """A seeded sample of ``n`` rows of a view (for the reports people read)."""


def window_views(eng: DriftEngine, name: str, source: TableSource, types: dict[str, str],
                 timestamp: Callable[[str], str]) -> dict[str, str]:
    """Over ``<name>_all``: ``<name>_window`` (the source's time bounds on ``ts``) and ``name`` (without the
    degraded rows when the source drops them); ``timestamp`` writes an ISO time as the dialect's literal."""
    where = [f"ts {op} {timestamp(bound.isoformat())}"
             for bound, op in ((source.since, ">="), (source.until, "<=")) if bound is not None and "ts" in types]
    eng.sql(f"CREATE OR REPLACE TEMP VIEW {name}_window AS SELECT * FROM {name}_all"
            + (" WHERE " + " AND ".join(where) if where else ""))
    degraded = " WHERE NOT coalesce(degraded, false)" if source.drop_degraded and "degraded" in types else ""
    eng.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {name}_window{degraded}")
    eng.types[name] = types
    return types


def count_rows(eng: DriftEngine, name: str, where: str | None = None) -> int:
    """Rows of a view (optionally those matching ``where``), in SQL both dialects share."""
    return int(eng.sql(f"SELECT count(*) FROM {name}" + (f" WHERE {where}" if where else ""))[0][0])


__all__ = ["DriftEngine", "TableSource", "count_rows", "window_views"]
