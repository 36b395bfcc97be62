"""Drift on a Spark cluster (``monitoring.engine: spark``): the aggregates of :mod:`mlops_monitoring.drift_duckdb`
as Spark SQL, so the cluster profile computes PSI / KS / chi² where its prediction log already lives.

:class:`SparkDrift` is a :class:`~mlops_monitoring.drift_engine.DriftEngine` beside
:class:`~mlops_monitoring.drift_duckdb.DuckDBDrift` (a sibling, not a subclass) whose views and building blocks
run on a ``SparkSession`` (``monitoring.spark_master`` with ``mlops_config.SPARK_DEFAULTS`` under
``monitoring.spark_conf``); the comparison itself (which columns, PSI, chi², p-values, verdicts) is
:func:`~mlops_monitoring.drift_duckdb.compare_duckdb` over either engine, so the engines agree to 1e-9.
What differs from DuckDB's SQL:

- a missing value is ``x IS NULL OR isnan(x)``: Spark's ``isnan(NULL)`` is false, not NULL;
- the reference's order statistics come from the running count over its distinct values (the smallest value
  whose running count exceeds the rank), as DuckDB's ``quantile_disc`` returns them;
- the profile's ECDF sketch is matched to the current ECDF by a window over the union of both (the last
  level at or below each value, the last value at or below each level) instead of an ASOF join.

Only aggregates come back to the driver; the global KS windows run over the *distinct* values of a column.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig, spark_conf
from mlops_core import edge_probs, lerp_quantiles, quantile_positions
from mlops_model import statistics
from mlops_monitoring.drift import DriftReport
from mlops_monitoring.drift_duckdb import TableSource, compare_duckdb, missing_scan
from mlops_monitoring.drift_engine import count_rows, window_views
from mlops_monitoring.errors import MonitoringError

log = logging.getLogger(__name__)

_TYPES = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INTEGER", "bigint": "BIGINT", "float": "FLOAT",
          "double": "DOUBLE", "string": "VARCHAR", "boolean": "BOOLEAN", "timestamp": "TIMESTAMP WITH TIME ZONE",
          "timestamp_ntz": "TIMESTAMP", "date": "DATE"}
"""Spark's type names as DuckDB's (what ``drift_duckdb`` checks a column against); DECIMAL keeps its form."""

_ROWS = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"  # Spark SQL quotes names in backticks ("…" is a string)


def _x(name: str) -> str:
    return f"CAST({_ident(name)} AS DOUBLE)"


def _valid(x: str) -> str:
    return f"{x} IS NOT NULL AND NOT isnan({x})"


class SparkDrift:
    """A :class:`~mlops_monitoring.drift_engine.DriftEngine` on a ``SparkSession`` with temporary views ``ref`` /
    ``cur`` (and ``<name>_window``) over the two sides."""

    def __init__(self, monitoring: MonitoringConfig, session: Any = None) -> None:
        from pyspark.sql import SparkSession

        if session is None:
            builder = SparkSession.builder.appName("mlops-drift")
            for key, value in spark_conf(monitoring.spark_conf, monitoring.spark_master).items():
                builder = builder.config(key, value)
            session = builder.getOrCreate()
        self.spark = session
        self.types: dict[str, dict[str, str]] = {}

    def __enter__(self) -> SparkDrift:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, name: str, where: str | None = None) -> int:
        """Rows of a view (optionally those matching ``where``)."""
        return count_rows(self, name, where)

    def close(self) -> None:
        """Drop this engine's views (the session stays: Spark sessions are process-wide and slow to start)."""
        for name in self.types:
            for view in (f"{name}_all", f"{name}_window", name):
                self.spark.catalog.dropTempView(view)

    def _run(self, query: str, params: Sequence[Any] | None, fetch: str) -> Any:
        try:
            result = self.spark.sql(query, args=list(params) if params is not None else None)
            return [tuple(row) for row in result.collect()] if fetch == "rows" else result.toPandas()
        except Exception as exc:  # py4j / AnalysisException / a failed job: surface the query's error
            raise MonitoringError(f"Spark drift query failed: {str(exc).splitlines()[0]}") from None

    def sql(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one query and fetch its (small) result."""
        return self._run(query, params, "rows")

    def frame(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run one query and fetch its result as a DataFrame (for the few rows a report samples)."""
        return self._run(query, params, "frame")

    def view(self, name: str, source: TableSource) -> dict[str, str]:
        """Views ``<name>_all`` / ``<name>_window`` / ``name`` over parquet ``source`` (bounds and the degraded
        filter as in DuckDB); returns the column types under DuckDB's names."""
        if not source.paths:
            raise MonitoringError(f"the {name} data has no file to read")
        if source.csv or source.filesystem is not None:
            raise MonitoringError(f"the {name} data {source.paths[0]!r}: monitoring.engine=spark reads parquet "
                                  "by path or URL (s3a://, gs://, hdfs://); convert CSV to parquet, drop fsspec")
        frame = self.spark.read.option("mergeSchema", "true").parquet(*source.paths)
        frame.createOrReplaceTempView(f"{name}_all")
        types = {f.name: _TYPES.get(f.dataType.simpleString(), f.dataType.simpleString().upper())
                 for f in frame.schema.fields}
        return window_views(self, name, source, types, lambda t: f"CAST('{t}' AS TIMESTAMP)")

    def numeric_counts(self, view: str, names: Sequence[str],
                       edges: Mapping[str, np.ndarray] | None) -> dict[str, dict[str, Any]]:
        """Non-missing and missing counts per column (one scan), infinities refused, counts per bin."""
        if not names:
            return {}
        total, valid_by = missing_scan(self, view, names, _x, lambda x: f"abs({x}) = double('inf')")
        out: dict[str, dict[str, Any]] = {}
        counts: dict[str, np.ndarray] = {}
        for name in names:
            size = edges[name].shape[0] + 1 if edges is not None else 0
            counts[name] = np.zeros(size, dtype=np.int64)
            out[name] = {"valid": valid_by[name], "missing": total - valid_by[name], "counts": counts[name]}
        if edges is not None:  # every column's bins in one scan: (column, bin) pairs stacked, then one GROUP BY
            stacked, params = [], []
            for i, name in enumerate(names):
                x, col_edges = _x(name), edges[name]
                case = " ".join(f"WHEN {x} < ? THEN {k}" for k in range(col_edges.shape[0]))
                stacked.append(f"{i}, CASE WHEN {_valid(x)} THEN "
                               f"{f'CASE {case} ELSE {col_edges.shape[0]} END' if case else '0'} END")
                params += [float(e) for e in col_edges]
            for i, b, n in self.sql(f"SELECT c, b, count(*) FROM (SELECT stack({len(names)}, {', '.join(stacked)}) "
                                    f"AS (c, b) FROM {view}) WHERE b IS NOT NULL GROUP BY c, b", params):
                counts[names[int(i)]][int(b)] = int(n)
        return out

    def reference_edges(self, name: str, n_valid: int, n_bins: int) -> np.ndarray:
        """The reference's interior quantile edges, equal to ``mlops_core.quantile_edges`` on the sorted values."""
        lo, hi, frac = quantile_positions(n_valid, edge_probs(n_bins))
        ranks = sorted({int(r) for r in (*lo, *hi)})
        x = _x(name)
        rows = self.sql(f"""
            WITH g AS (SELECT {x} AS x, count(*) AS n FROM ref WHERE {_valid(x)} GROUP BY 1),
                 c AS (SELECT x, sum(n) OVER (ORDER BY x {_ROWS}) AS cum FROM g)
            SELECT r.r, min(c.x) FROM c JOIN (VALUES {', '.join(f'({r})' for r in ranks)}) AS r(r)
              ON c.cum >= r.r + 1 GROUP BY r.r""")
        at = {int(r): float(v) for r, v in rows}
        low = np.asarray([at[int(r)] for r in lo], dtype=np.float64)
        high = np.asarray([at[int(r)] for r in hi], dtype=np.float64)
        return np.unique(lerp_quantiles(low, high, frac))

    def ks_exact(self, name: str, n1: int, n2: int) -> tuple[float, float]:
        """``ks_2samp``: D from the two ECDFs over the distinct values, scipy's p-value."""
        x = _x(name)
        if max(n1, n2) <= statistics.KS_EXACT_MAX_N:  # scipy's exact p-value: a few thousand values come back
            ref = np.asarray([r[0] for r in self.sql(f"SELECT {x} FROM ref WHERE {_valid(x)}")], dtype=np.float64)
            cur = np.asarray([r[0] for r in self.sql(f"SELECT {x} FROM cur WHERE {_valid(x)}")], dtype=np.float64)
            return statistics.ks(ref, cur)
        lo_hi = self.sql(f"""
            WITH v AS (SELECT {x} AS x, 1 AS a, 0 AS b FROM ref WHERE {_valid(x)}
                       UNION ALL SELECT {x}, 0, 1 FROM cur WHERE {_valid(x)}),
                 g AS (SELECT x, sum(a) AS a, sum(b) AS b FROM v GROUP BY x),
                 c AS (SELECT CAST(sum(a) OVER w AS DOUBLE) / {n1} - CAST(sum(b) OVER w AS DOUBLE) / {n2} AS diff
                       FROM g WINDOW w AS (ORDER BY x {_ROWS}))
            SELECT min(diff), max(diff) FROM c""")[0]
        d = float(max(np.clip(-lo_hi[0], 0, 1), lo_hi[1]))
        return d, statistics.ks_asymptotic_pvalue(d, n1, n2)

    def ks_sketch(self, name: str, ecdf: np.ndarray, n_ref: int, n2: int) -> tuple[float, float]:
        """``statistics.ks_from_sketch`` with the current ECDF in Spark SQL (an ASOF match as a window)."""
        k = ecdf.shape[0]
        last = np.ones(k, dtype=bool)
        last[:-1] = ecdf[1:] != ecdf[:-1]
        levels = pd.DataFrame({"e": ecdf[last].astype(np.float64), "j": np.flatnonzero(last).astype(np.int64)})
        self.spark.createDataFrame(levels).createOrReplaceTempView("sketch_levels")
        x = _x(name)
        try:
            d_cur, d_ref = self.sql(f"""
                WITH g AS (SELECT {x} AS x, count(*) AS n FROM cur WHERE {_valid(x)} GROUP BY 1),
                     cum AS (SELECT x, CAST(sum(n) OVER (ORDER BY x {_ROWS}) AS DOUBLE) AS cn FROM g),
                     u AS (SELECT x, cn, CAST(NULL AS BIGINT) AS j, 1 AS cur_first, 0 AS level_first FROM cum
                           UNION ALL SELECT e, CAST(NULL AS DOUBLE), j, 0, 1 FROM sketch_levels),
                     m AS (SELECT x, cn, j,
                                  last_value(j, true) OVER (ORDER BY x, level_first DESC {_ROWS}) AS lj,
                                  last_value(cn, true) OVER (ORDER BY x, cur_first DESC {_ROWS}) AS lcn FROM u)
                SELECT max(CASE WHEN cn IS NOT NULL
                                THEN abs(coalesce(CAST(lj AS DOUBLE), 0.0) / {k - 1} - cn / {n2}) END),
                       max(CASE WHEN j IS NOT NULL
                                THEN abs(CAST(j AS DOUBLE) / {k - 1} - coalesce(lcn, 0.0) / {n2}) END)
                FROM m""")[0]
        finally:
            self.spark.catalog.dropTempView("sketch_levels")
        d = float(max(d_cur, d_ref))
        return d, statistics.ks_asymptotic_pvalue(d, n_ref, n2)

    def category_counts(self, view: str, name: str) -> tuple[pd.Series, int]:
        """Counts per category (keys as pandas' ``astype(str)`` writes them) and the missing count."""
        col = _ident(name)
        kind = self.types[view].get(name, "")
        missing = f"{col} IS NULL" + (f" OR isnan({col})" if kind in ("FLOAT", "DOUBLE") else "")
        rows = self.sql(f"SELECT CASE WHEN {missing} THEN NULL ELSE {col} END, count(*) FROM {view} GROUP BY 1")
        n_missing = sum(int(n) for value, n in rows if value is None)  # the missing ones: one group, NULL
        counts: dict[str, int] = {}
        for value, n in rows:
            if value is None:
                continue
            key = str(value)
            counts[key] = counts.get(key, 0) + int(n)
        series = pd.Series(counts, dtype=np.int64).sort_index()
        return series[series > 0], n_missing

    def sample(self, view: str, n: int, seed: int) -> pd.DataFrame:
        """A seeded sample of ``n`` rows of a view."""
        return self.frame(f"SELECT * FROM {view} ORDER BY rand({int(seed)}) LIMIT {int(n)}")


def compare_spark(
    reference: TableSource | Mapping[str, Any], current: TableSource, monitoring: MonitoringConfig | None = None,
    *, session: Any = None, **kwargs: Any,
) -> DriftReport:
    """:func:`mlops_monitoring.drift_duckdb.compare_duckdb` with the rows read and aggregated by Spark SQL
    (``session``: an existing ``SparkSession``; default: one from ``monitoring``'s Spark settings)."""
    monitoring = monitoring or MonitoringConfig(engine="spark")
    eng = SparkDrift(monitoring, session)
    try:
        eng.view("cur", current)
        if isinstance(reference, TableSource):
            eng.view("ref", reference)
        return compare_duckdb(reference, current, monitoring, engine=eng, **kwargs)
    finally:
        eng.close()


__all__ = ["SparkDrift", "compare_spark"]
