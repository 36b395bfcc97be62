"""Point-in-time training sets from Feast's offline store.

Each labelled transaction is joined with the feature values as known *strictly before* its event time:
Feast picks, per view, the latest row with ``feature_ts <= entity_ts`` inside the TTL, and we ask at
``event_timestamp - 1 µs``. The user row stamped at a transaction's own time already counts that
transaction, and the online store at request time cannot know it yet; asking just before keeps training
and serving the same. A view with no row inside the TTL gives nulls (the ``duckdb`` offline store keeps
such rows; ``file`` drops them), which :func:`training_set` replaces with the repository's defaults.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from mlops_config import DataConfig, FeaturesConfig
from mlops_features.aggregates import read_validated
from mlops_features.errors import FeatureStoreError
from mlops_features.store import feature_defaults, open_store
from mlops_model import ENTITY_KEYS, LABEL, REQUEST_FIELDS

logger = logging.getLogger(__name__)

JUST_BEFORE = pd.Timedelta(microseconds=1)
LEADING_COLUMNS = ("transaction_id", "event_timestamp", *ENTITY_KEYS, *REQUEST_FIELDS)


def feature_names(store: object, service_name: str) -> list[str]:
    """Plain feature names a FeatureService returns, in its order."""
    try:
        service = store.get_feature_service(service_name)  # type: ignore[attr-defined]
    except Exception as exc:  # Feast raises its own FeatureServiceNotFoundException
        raise FeatureStoreError(
            f"feature service {service_name!r} is not in the registry ({exc}); run `mlops features apply`"
        ) from None
    return [f.name for proj in service.feature_view_projections for f in proj.features]


def service_features(features: FeaturesConfig, root: str | Path) -> list[str]:
    """Feature names of ``features.feature_service``, read from the Feast registry (their source of truth)."""
    return feature_names(open_store(features, root), features.feature_service)


def historical_features(features: FeaturesConfig, root: str | Path, entity_df: pd.DataFrame) -> pd.DataFrame:
    """Feast's point-in-time join for ``entity_df`` (``user_id, merchant_id, event_timestamp`` + any columns).

    Rows whose entities have no value inside the TTL come back with nulls; the rows' order is not kept.
    """
    store = open_store(features, root)
    service = store.get_feature_service(features.feature_service)
    job = store.get_historical_features(entity_df=entity_df, features=service, full_feature_names=False)
    return job.to_df()


def training_set(
    features: FeaturesConfig, data: DataConfig, root: str | Path, *, fill_defaults: bool = True
) -> pd.DataFrame:
    """One row per labelled transaction in the validated area, with the FeatureService's features.

    Args:
        features: The ``features`` section (store, FeatureService, TTL).
        data: The ``data`` section (where validated batches are).
        root: Repo root both sections' paths are relative to.
        fill_defaults: Replace nulls (no value within the TTL) by the repository's ``FEATURE_DEFAULTS``.

    Returns:
        Columns ``transaction_id, event_timestamp, user_id, merchant_id``, the request-time fields,
        the feature columns (plain names) and ``is_fraud``, sorted by event time.
    """
    labels = read_validated(Path(root) / data.validated_dir)
    entity_df = labels[[*LEADING_COLUMNS, LABEL]].copy()
    entity_df["event_timestamp"] = entity_df["event_timestamp"] - JUST_BEFORE
    store = open_store(features, root)
    names = feature_names(store, features.feature_service)
    service = store.get_feature_service(features.feature_service)
    joined = store.get_historical_features(entity_df=entity_df, features=service, full_feature_names=False).to_df()
    if len(joined) != len(entity_df):
        raise FeatureStoreError(
            f"point-in-time join returned {len(joined)} rows for {len(entity_df)} labels: "
            f"offline store {features.offline_store!r} drops rows; use offline_store: duckdb"
        )
    joined["event_timestamp"] = pd.to_datetime(joined["event_timestamp"], utc=True) + JUST_BEFORE
    if fill_defaults:
        defaults = feature_defaults(features, root)
        joined = joined.fillna({n: defaults[n] for n in names if n in defaults})
    out = joined[[*LEADING_COLUMNS, *names, LABEL]]
    out = out.sort_values(["event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)
    logger.info("training set: %d rows, %d features, positives %.4f", len(out), len(names), out[LABEL].mean())
    return out
