"""Backfill: every feature view that computes its rows (a ``udf``) run over the full history, to an offline table.

Feast's compute engine runs a view's ``udf`` when it materializes the online store, but Feast 0.67's point-in-time
join reads a view's *batch source* as stored (here: raw transactions), not the ``udf``'s output. So the platform
runs the same registered ``udf`` over the whole source once per ingestion and writes the result to
``<features.source_dir>/<view>.parquet``; training sets join those tables (:func:`offline_views`). Online and
offline values come from one function; ``tests/unit/features`` checks they agree.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_config import FeaturesConfig
from mlops_features.errors import FeatureStoreError
from mlops_features.repo import transformed_views

logger = logging.getLogger(__name__)

_PANDAS_DTYPES = {"Int64": "int64", "Int32": "int32", "Float64": "float64", "Float32": "float32",
                  "String": "object", "Bool": "bool"}


def offline_table(features: FeaturesConfig, root: str | Path, view: str) -> Path:
    """Where the backfilled rows of ``view`` live."""
    return Path(root) / features.source_dir / f"{view}.parquet"


def source_path(store: Any, view: Any) -> Path:
    """The file a view's FileSource reads, resolved as Feast resolves it (relative to the repository)."""
    path = Path(view.batch_source.path)
    return path if path.is_absolute() else (Path(store.config.repo_path) / path).resolve()


def compute_view(store: Any, view: Any, raw: pd.DataFrame) -> pd.DataFrame:
    """``view``'s udf applied to ``raw``, checked and cut to ``join keys, timestamp, created, features``.

    Raises:
        FeatureStoreError: the udf fails or does not return a declared column (names the view and the column).
    """
    ts = view.batch_source.timestamp_field
    keys = [c.name for c in view.entity_columns]
    try:
        out = view.feature_transformation.udf(raw.copy())
    except Exception as exc:
        raise FeatureStoreError(f"feature view {view.name!r}: its udf failed on {len(raw)} rows: "
                                f"{type(exc).__name__}: {exc}") from exc
    if "created" not in out.columns:
        out = out.assign(created=out[ts]) if ts in out.columns else out
    wanted = [*keys, ts, "created", *(f.name for f in view.features)]
    missing = [c for c in wanted if c not in out.columns]
    if missing:
        raise FeatureStoreError(f"feature view {view.name!r}: its udf returned no column(s) {missing!r}; it "
                                f"returned {sorted(out.columns)!r}")
    out = out[wanted].copy()
    out[ts] = pd.to_datetime(out[ts], utc=True)
    for f in view.features:
        dtype = _PANDAS_DTYPES.get(str(f.dtype))
        if dtype is not None:
            out[f.name] = out[f.name].astype(dtype)
    return out


def backfill(features: FeaturesConfig, root: str | Path, store: Any | None = None) -> dict[str, int]:
    """Recompute every transformed view's offline table from its full source; returns rows per view."""
    from mlops_features.store import open_store

    store = store or open_store(features, root)
    views = transformed_views(store)
    if not views:
        raise FeatureStoreError(f"no feature view with a udf in project {features.feast_project!r}: "
                                "run `mlops features apply`")
    rows: dict[str, int] = {}
    raw_cache: dict[Path, pd.DataFrame] = {}
    for view in views:
        src = source_path(store, view)
        if src not in raw_cache:
            if not src.is_file():
                raise FeatureStoreError(f"feature view {view.name!r} reads {str(src)!r}, which does not exist: run "
                                        "`mlops features materialize` (it ingests the validated transactions first)")
            raw_cache[src] = pd.read_parquet(src)
        table = compute_view(store, view, raw_cache[src])
        target = offline_table(features, root, view.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        table.to_parquet(tmp, index=False)
        tmp.replace(target)
        rows[view.name] = len(table)
    logger.info("backfilled %s", rows)
    return rows


def offline_views(features: FeaturesConfig, root: str | Path, views: list[Any]) -> list[Any]:
    """Copies of ``views`` whose batch source is their backfilled table (views without a udf: unchanged)."""
    from feast import FileSource

    out = []
    for view in views:
        if getattr(view, "feature_transformation", None) is None:
            out.append(view)
            continue
        table = offline_table(features, root, view.name)
        if not table.is_file():
            raise FeatureStoreError(f"no offline table for feature view {view.name!r} at {str(table)!r}: run "
                                    "`mlops features materialize` (it backfills)")
        clone = copy.copy(view)
        clone.batch_source = FileSource(name=f"{view.name}_backfill", path=str(table),
                                        timestamp_field=view.batch_source.timestamp_field,
                                        created_timestamp_column="created")
        out.append(clone)
    return out
