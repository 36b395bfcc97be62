"""Drift over windows larger than memory: :func:`mlops_monitoring.drift.compare`'s statistics, computed in DuckDB.

The work happens where the rows are: DuckDB scans the prediction log's parquet parts (and a reference in
parquet) and returns only small aggregates to Python:

- **bins**: the reference's quantile edges from its exact order statistics (``quantile_disc`` at the ranks
  :func:`mlops_core.quantile_positions` names, interpolated by :func:`mlops_core.lerp_quantiles`, so the edges
  equal the in-memory ones bit for bit); counts per bin as ``count(*) FILTER (WHERE x < edge)`` over one scan;
- **KS**: the two ECDFs as running sums over the values grouped and ordered in SQL; D is the largest gap,
  exactly as ``scipy.stats.ks_2samp`` computes it; the p-value is scipy's (:func:`statistics.ks_asymptotic_pvalue`
  once a sample exceeds ``KS_EXACT_MAX_N``; below that the few values come back and ``statistics.ks`` runs);
  against a profile, the sketch's step function is ASOF-joined to the current ECDF (``ks_from_sketch``);
- **chi² / categorical PSI**: counts per category from a ``GROUP BY``.

PSI, chi² and the verdicts then come from the same functions as the in-memory path. Memory is bounded by
``monitoring.duckdb_memory_limit`` (DuckDB spills its sorts and hash tables to ``duckdb_temp_dir``), plus one
column of the reference's non-missing values while its quantiles are taken.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig
from mlops_core import edge_probs, lerp_quantiles, quantile_positions
from mlops_model import statistics
from mlops_monitoring.drift import (
    SCORE,
    ColumnDrift,
    DriftReport,
    categorical_verdict,
    checked_columns,
    column_verdict,
    profile_columns,
    with_missing,
)
from mlops_monitoring.drift_engine import DriftEngine, TableSource, count_rows, window_views
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.policy import drift_level

log = logging.getLogger(__name__)

_NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL")
_CATEGORICAL_TYPES = ("VARCHAR", "BOOLEAN")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBDrift:
    """A :class:`~mlops_monitoring.drift_engine.DriftEngine` on one DuckDB connection with ``monitoring``'s
    memory limit, threads and spill folder; views ``ref`` and
    ``cur`` over the two sides. Use as a context manager."""

    def __init__(self, monitoring: MonitoringConfig) -> None:
        import duckdb

        self._tmp = None if monitoring.duckdb_temp_dir else tempfile.TemporaryDirectory(prefix="drift-duckdb-")
        config: dict[str, Any] = {
            "memory_limit": monitoring.duckdb_memory_limit,
            "temp_directory": monitoring.duckdb_temp_dir or (self._tmp.name if self._tmp else ""),
            "preserve_insertion_order": False,
            # parquet min/max statistics leave NaN out; DuckDB 2.0's statistics propagation then proves
            # `NOT isnan(x)` (and `x < 'inf'`) always true for a row group and drops the filter, letting NaN
            # through a WHERE. Without it every filter is evaluated on the rows.
            "disabled_optimizers": "statistics_propagation",
        }
        if monitoring.duckdb_threads:
            config["threads"] = monitoring.duckdb_threads
        self.con = duckdb.connect(config=config)
        self.types: dict[str, dict[str, str]] = {}

    def __enter__(self) -> DuckDBDrift:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and remove the spill folder."""
        self.con.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def sql(self, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one query and fetch its (small) result."""
        import duckdb

        try:
            return self.con.execute(query, list(params) if params is not None else None).fetchall()
        except duckdb.Error as exc:
            raise MonitoringError(f"DuckDB drift query failed: {exc}") from None

    def frame(self, query: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run one query and fetch its result as a DataFrame (for the few rows a report samples)."""
        import duckdb

        try:
            return self.con.execute(query, list(params) if params is not None else None).df()
        except duckdb.Error as exc:
            raise MonitoringError(f"DuckDB drift query failed: {exc}") from None

    def view(self, name: str, source: TableSource) -> dict[str, str]:
        """Create view ``name`` over ``source`` (window bounds and the degraded filter applied; ``<name>_window``:
        bounds only); returns its column types."""
        if not source.paths:
            raise MonitoringError(f"the {name} data has no file to read")
        if source.filesystem is not None:
            self.con.register_filesystem(source.filesystem)
            protocol = source.filesystem.protocol
            prefix = (protocol[0] if isinstance(protocol, tuple) else protocol) + "://"
            paths = [p if "://" in p else prefix + p for p in source.paths]
        else:
            paths = list(source.paths)
        files = "[" + ", ".join(_literal(p) for p in paths) + "]"
        reader = f"read_csv({files}, union_by_name=true)" if source.csv else \
            f"read_parquet({files}, union_by_name=true, hive_partitioning=false)"
        self.sql(f"CREATE OR REPLACE TEMP VIEW {name}_all AS SELECT * FROM {reader}")
        types = {str(r[0]): str(r[1]) for r in self.sql(f"DESCRIBE {name}_all")}
        return window_views(self, name, source, types, lambda t: f"{_literal(t)}::TIMESTAMPTZ")

    def count(self, name: str, where: str | None = None) -> int:
        """Rows of a view (optionally those matching ``where``)."""
        return count_rows(self, name, where)

    # The statistics' building blocks in DuckDB's SQL (its sibling ``drift_spark.SparkDrift``: in Spark SQL).
    def numeric_counts(self, view: str, names: Sequence[str],
                       edges: Mapping[str, np.ndarray] | None) -> dict[str, dict[str, Any]]:
        """Per column ``{"valid", "missing", "counts"}``: see :func:`_numeric_counts`."""
        return _numeric_counts(self, view, names, edges)

    def reference_edges(self, name: str, n_valid: int, n_bins: int) -> np.ndarray:
        """The reference's interior quantile edges: see :func:`_reference_edges`."""
        return _reference_edges(self, name, n_valid, n_bins)

    def ks_exact(self, name: str, n1: int, n2: int) -> tuple[float, float]:
        """KS of the two sides' values: see :func:`_ks_exact`."""
        return _ks_exact(self, name, n1, n2)

    def ks_sketch(self, name: str, ecdf: np.ndarray, n_ref: int, n2: int) -> tuple[float, float]:
        """KS of the current values against a profile's ECDF sketch: see :func:`_ks_sketch`."""
        return _ks_sketch(self, name, ecdf, n_ref, n2)

    def category_counts(self, view: str, name: str) -> tuple[pd.Series, int]:
        """Counts per category and the missing count: see :func:`_category_counts`."""
        return _category_counts(self, view, name)

    def sample(self, view: str, n: int, seed: int) -> pd.DataFrame:
        """A seeded sample of ``n`` rows of a view (for the reports people read)."""
        return self.frame(f"SELECT * FROM {view} USING SAMPLE reservoir({int(n)} ROWS) REPEATABLE ({int(seed)})")


def infer_columns(types: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Numeric and categorical columns from DuckDB types, as :func:`drift.compare` infers them from dtypes."""
    numeric, categorical = [], []
    for name, kind in types.items():
        if kind in _CATEGORICAL_TYPES or kind.startswith("ENUM"):
            categorical.append(name)
        elif kind in _NUMERIC_TYPES or kind.startswith("DECIMAL"):
            numeric.append(name)
        else:
            raise MonitoringError(
                f"cannot infer how to compare column {name!r} of type {kind}; pass numeric= and categorical= "
                "explicitly (datetime and id columns are not features)"
            )
    return numeric, categorical


# -- numeric columns ---------------------------------------------------------------------------------------------
def _x(name: str) -> str:
    return f"CAST({_ident(name)} AS DOUBLE)"


def missing_scan(eng: DriftEngine, view: str, names: Sequence[str], x: Callable[[str], str],
                 is_inf: Callable[[str], str]) -> tuple[int, dict[str, int]]:
    """One scan of ``view``: its row count and each numeric column's valid (not NULL, not NaN) count.

    A column of another type, or one holding an infinity, is refused naming it. ``x`` casts a column to
    DOUBLE and ``is_inf`` tests one for infinity, in the engine's SQL dialect (DuckDB and Spark share the rest).
    """
    side = "reference" if view == "ref" else "current"
    for name in names:
        kind = eng.types[view].get(name, "")
        if not (kind in _NUMERIC_TYPES or kind.startswith("DECIMAL")):
            raise MonitoringError(f"{side} data: column {name!r} has type {kind}; expected a numeric column "
                                  "(int or float)")
    select = ["count(*)"]
    for name in names:
        select += [f"count({x(name)})", f"sum(CASE WHEN isnan({x(name)}) THEN 1 ELSE 0 END)",
                   f"sum(CASE WHEN {is_inf(x(name))} THEN 1 ELSE 0 END)"]
    row = eng.sql(f"SELECT {', '.join(select)} FROM {view}")[0]
    valid: dict[str, int] = {}
    for i, name in enumerate(names):
        non_null, nan, inf = (int(v or 0) for v in row[1 + 3 * i: 4 + 3 * i])
        if inf:
            raise MonitoringError(f"{side} data: column {name!r} holds an infinite value; expected finite numbers "
                                  "or NaN for missing")
        valid[name] = non_null - nan
    return int(row[0]), valid


def _numeric_counts(eng: DuckDBDrift, view: str, names: Sequence[str],
                    edges: Mapping[str, np.ndarray] | None) -> dict[str, dict[str, Any]]:
    """Per column: non-missing and missing counts (one scan for all columns, :func:`missing_scan`) and with
    ``edges`` the counts per bin ``[edges[i-1], edges[i])`` (one ``CASE`` + ``GROUP BY`` scan per column; a
    long row of ``count(*) FILTER`` aggregates is many times slower in DuckDB)."""
    if not names:
        return {}
    total, valid_by = missing_scan(eng, view, names, _x, lambda x: f"isinf({x})")
    out = {}
    for name in names:
        valid = valid_by[name]
        counts = np.zeros(0, dtype=np.int64)
        if edges is not None:
            col_edges = edges[name]
            counts = np.zeros(col_edges.shape[0] + 1, dtype=np.int64)
            if valid:
                x = _x(name)
                case = " ".join(f"WHEN {x} < ? THEN {k}" for k in range(col_edges.shape[0]))
                bin_expr = f"CASE {case} ELSE {col_edges.shape[0]} END" if case else "0"
                for b, n in eng.sql(f"SELECT {bin_expr} AS b, count(*) FROM {view} WHERE NOT isnan({x}) GROUP BY b",
                                    [float(e) for e in col_edges]):
                    counts[int(b)] = int(n)
        out[name] = {"valid": valid, "missing": total - valid, "counts": counts}
    return out


def _reference_edges(eng: DuckDBDrift, name: str, n_valid: int, n_bins: int) -> np.ndarray:
    """The reference's interior quantile edges, equal to ``mlops_core.quantile_edges`` on the sorted values."""
    lo, hi, frac = quantile_positions(n_valid, edge_probs(n_bins))
    ranks = sorted({int(r) for r in (*lo, *hi)})
    x = _x(name)
    values = eng.sql(f"SELECT quantile_disc({x}, ?::DOUBLE[]) FROM ref WHERE NOT isnan({x})",
                     [[(r + 0.5) / n_valid for r in ranks]])[0][0]
    at = dict(zip(ranks, values, strict=True))
    low = np.asarray([at[int(r)] for r in lo], dtype=np.float64)
    high = np.asarray([at[int(r)] for r in hi], dtype=np.float64)
    return np.unique(lerp_quantiles(low, high, frac))


def _ks_exact(eng: DuckDBDrift, name: str, n1: int, n2: int) -> tuple[float, float]:
    """``ks_2samp`` of the two sides' non-missing values: D from the ECDFs in SQL, scipy's p-value."""
    x = _x(name)
    if max(n1, n2) <= statistics.KS_EXACT_MAX_N:  # scipy's exact p-value: a few thousand values come back
        ref = np.asarray([r[0] for r in eng.sql(f"SELECT {x} FROM ref WHERE NOT isnan({x})")], dtype=np.float64)
        cur = np.asarray([r[0] for r in eng.sql(f"SELECT {x} FROM cur WHERE NOT isnan({x})")], dtype=np.float64)
        return statistics.ks(ref, cur)
    lo_hi = eng.sql(f"""
        WITH v AS (SELECT {x} AS x, 1 AS a, 0 AS b FROM ref WHERE NOT isnan({x})
                   UNION ALL SELECT {x}, 0, 1 FROM cur WHERE NOT isnan({x})),
             g AS (SELECT x, sum(a) AS a, sum(b) AS b FROM v GROUP BY x),
             c AS (SELECT CAST(sum(a) OVER w AS DOUBLE) / {n1} - CAST(sum(b) OVER w AS DOUBLE) / {n2} AS diff
                   FROM g WINDOW w AS (ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
        SELECT min(diff), max(diff) FROM c""")[0]
    d = float(max(np.clip(-lo_hi[0], 0, 1), lo_hi[1]))
    return d, statistics.ks_asymptotic_pvalue(d, n1, n2)


def _ks_sketch(eng: DuckDBDrift, name: str, ecdf: np.ndarray, n_ref: int, n2: int) -> tuple[float, float]:
    """``statistics.ks_from_sketch`` with the current ECDF in SQL: the sketch's levels ASOF-joined to it."""
    k = ecdf.shape[0]
    last = np.ones(k, dtype=bool)
    last[:-1] = ecdf[1:] != ecdf[:-1]
    levels = pd.DataFrame({"e": ecdf[last], "j": np.flatnonzero(last).astype(np.int64)})
    eng.con.register("sketch_levels", levels)
    x = _x(name)
    try:
        d_cur, d_ref = eng.sql(f"""
            WITH g AS (SELECT {x} AS x, count(*) AS n FROM cur WHERE NOT isnan({x}) GROUP BY x),
                 cum AS (SELECT x, CAST(sum(n) OVER (ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                                        AS DOUBLE) AS cn FROM g),
                 a AS (SELECT max(abs(coalesce(CAST(l.j AS DOUBLE), 0.0) / {k - 1} - cum.cn / {n2})) AS d
                       FROM cum ASOF LEFT JOIN sketch_levels l ON cum.x >= l.e),
                 b AS (SELECT max(abs(CAST(l.j AS DOUBLE) / {k - 1} - coalesce(cum.cn, 0.0) / {n2})) AS d
                       FROM sketch_levels l ASOF LEFT JOIN cum ON l.e >= cum.x)
            SELECT a.d, b.d FROM a, b""")[0]
    finally:
        eng.con.unregister("sketch_levels")
    d = float(max(d_cur, d_ref))
    return d, statistics.ks_asymptotic_pvalue(d, n_ref, n2)


def _numeric_columns(eng: DriftEngine, profile: Mapping[str, Any] | None, names: Sequence[str],
                     kinds: Mapping[str, str], keys: set[str], monitoring: MonitoringConfig) -> dict[str, ColumnDrift]:
    if not names:
        return {}
    if profile is None:
        ref = eng.numeric_counts("ref", names, None)
        for name in names:
            if ref[name]["valid"] == 0:
                raise MonitoringError(
                    f"column {name!r} has no non-missing value in the reference data; nothing to compare")
        edges = {n: eng.reference_edges(n, ref[n]["valid"], monitoring.n_bins) for n in names}
        ref = eng.numeric_counts("ref", names, edges)
    else:
        cols = {n: (profile["score"] if kinds[n] == "score" and n not in profile["numeric"] else profile["numeric"][n])
                for n in names}
        edges = {n: np.asarray(c["edges"], dtype=np.float64) for n, c in cols.items()}
        ref = {n: {"valid": int(c["count"]), "missing": int(c["missing"]), "counts": np.asarray(c["counts"])}
               for n, c in cols.items()}
    cur = eng.numeric_counts("cur", names, edges)
    out: dict[str, ColumnDrift] = {}
    for name in names:
        r, c = ref[name], cur[name]
        if c["valid"] == 0:
            raise MonitoringError(f"column {name!r} has no non-missing value in the current data; nothing to compare")
        if profile is None:
            method, (d, p) = "ks", eng.ks_exact(name, r["valid"], c["valid"])
        else:
            ecdf = np.asarray(cols[name]["ecdf"], dtype=np.float64)
            method, (d, p) = "ks_sketch", eng.ks_sketch(name, ecdf, r["valid"], c["valid"])
        value = statistics.psi(with_missing(r["counts"], r["missing"], c["missing"], r["missing"]),
                               with_missing(c["counts"], r["missing"], c["missing"], c["missing"]),
                               monitoring.psi_floor)
        out[name] = column_verdict(kinds[name], method, d, p, value, d, name in keys, monitoring,
                                   (r["valid"], c["valid"]), (r["missing"], c["missing"]))
    return out


# -- categorical columns -----------------------------------------------------------------------------------------
def _category_counts(eng: DuckDBDrift, view: str, name: str) -> tuple[pd.Series, int]:
    """Counts per category (keys written out as pandas' ``astype(str)`` does) and the missing count."""
    col = _ident(name)
    kind = eng.types[view].get(name, "")
    missing = f"{col} IS NULL" + (f" OR isnan({col})" if kind in ("FLOAT", "DOUBLE", "REAL") else "")
    rows = eng.sql(f"SELECT {col}, count(*) FROM {view} WHERE NOT ({missing}) GROUP BY ALL")
    n_missing = eng.count(view, missing)
    counts: dict[str, int] = {}
    for value, n in rows:
        key = str(value)  # str(True) == "True", str(1.5) == "1.5": pandas' astype(str) of the same values
        counts[key] = counts.get(key, 0) + int(n)
    series = pd.Series(counts, dtype=np.int64).sort_index()
    return series[series > 0], n_missing


def _categorical_columns(eng: DriftEngine, profile: Mapping[str, Any] | None, names: Sequence[str], keys: set[str],
                         monitoring: MonitoringConfig) -> dict[str, ColumnDrift]:
    out = {}
    for name in names:
        if profile is None:
            counts, missing = eng.category_counts("ref", name)
            other, n_ref = 0, int(counts.sum())
        else:
            col = profile["categorical"][name]
            counts, missing = pd.Series(col["counts"], dtype=np.int64), int(col["missing"])
            other, n_ref = int(col["other_count"]), int(col["count"]) + int(col["other_count"])
        out[name] = categorical_verdict(counts, missing, other, *eng.category_counts("cur", name), name in keys,
                                        monitoring, n_ref)
    return out


# -- the comparison ----------------------------------------------------------------------------------------------
def compare_duckdb(
    reference: TableSource | Mapping[str, Any],
    current: TableSource,
    monitoring: MonitoringConfig | None = None,
    *,
    numeric: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
    score: str | None = SCORE,
    window: Mapping[str, Any] | None = None,
    engine: DriftEngine | None = None,
) -> DriftReport:
    """:func:`mlops_monitoring.drift.compare` with the rows read and aggregated by DuckDB.

    Args:
        reference: Reference rows in parquet / CSV, or a reference profile (``mlops_core.profile``).
        current: The current rows (e.g. a window of the prediction log's parts).
        monitoring: Thresholds, bins, key features and DuckDB's limits; defaults to ``MonitoringConfig()``.
        numeric, categorical, score, window: as for :func:`mlops_monitoring.drift.compare`.
        engine: An open :class:`DuckDBDrift` (or ``drift_spark.SparkDrift``) whose views ``ref`` / ``cur`` are
            already over these sources (the monitor reuses its connection); ``None``: a DuckDB one is opened and
            closed here.

    Raises:
        MonitoringError: a column is missing on either side, has the wrong type, or a side is empty.
    """
    monitoring = monitoring or MonitoringConfig()
    own = engine is None
    eng: DriftEngine = engine or DuckDBDrift(monitoring)
    try:
        if own:
            eng.view("cur", current)
        cur_types = eng.types["cur"]
        n_cur = eng.count("cur")
        if n_cur == 0:
            raise MonitoringError("the current window has no rows; nothing to compare")
        profile: dict[str, Any] | None = None
        if isinstance(reference, TableSource):
            ref_types = eng.view("ref", reference) if own else eng.types["ref"]
            if eng.count("ref") == 0:
                raise MonitoringError("the reference data has no rows; nothing to compare against")
            if numeric is None and categorical is None:
                numeric, categorical = infer_columns({k: v for k, v in ref_types.items() if k != score})
            ref_cols = list(ref_types)
            has_score = score is not None and score in ref_types and score in cur_types
            n_ref = eng.count("ref")
        else:
            profile, numeric, categorical, ref_cols, has_score, n_ref = profile_columns(
                reference, numeric, categorical, score, cur_types)
        numeric, categorical = checked_columns(numeric, categorical, has_score, ref_cols, cur_types)
        keys = set(monitoring.key_features)
        kinds = {n: "numeric" for n in numeric}
        columns = _numeric_columns(eng, profile, numeric, kinds, keys, monitoring)
        columns.update(_categorical_columns(eng, profile, categorical, keys, monitoring))
        if has_score:
            assert score is not None
            columns.update(_numeric_columns(eng, profile, [score], {score: "score"}, {score}, monitoring))
    finally:
        if own:
            eng.close()
    level, reasons = drift_level(columns, monitoring)
    log.info("drift (duckdb): %s over %d columns (%s)", level.value, len(columns), "; ".join(reasons) or "no drift")
    return DriftReport(columns=columns, level=level.value, reasons=reasons, n_reference=n_ref, n_current=n_cur,
                       window=dict(window or {}))


__all__ = ["DuckDBDrift", "TableSource", "compare_duckdb", "infer_columns"]
