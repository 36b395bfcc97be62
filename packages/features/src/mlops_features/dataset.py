"""Point-in-time training sets from Feast's offline store.

Each labelled transaction is joined with the feature values as known *strictly before* its event time:
Feast picks, per view, the latest row with ``feature_ts <= entity_ts`` inside the TTL, and we ask at
``event_timestamp - 1 µs``. Views that compute their rows (a ``udf``) are joined from their backfilled
tables (:mod:`mlops_features.backfill`). The user row stamped at a transaction's own time already counts that
transaction, and the online store at request time cannot know it yet; asking just before keeps training
and serving the same. A view with no row inside the TTL gives nulls (the ``duckdb`` offline store keeps
such rows; ``file`` drops them), which :func:`training_set` replaces with each feature's ``default`` tag.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_config import ContractConfig, DataConfig, FeaturesConfig
from mlops_features.aggregates import read_validated
from mlops_features.backfill import offline_views
from mlops_features.errors import FeatureStoreError
from mlops_features.repo import feature_defaults_of
from mlops_features.store import open_store

logger = logging.getLogger(__name__)

JUST_BEFORE = pd.Timedelta(microseconds=1)


def leading_columns(contract: ContractConfig) -> tuple[str, ...]:
    """The training set's columns before the features: the record id, ``event_timestamp``, the entity keys and the
    request-time fields, as ``contract`` names them."""
    return (contract.record_id, "event_timestamp", *contract.entity_keys, *contract.request_fields)


def _service(store: Any, service_name: str) -> Any:
    try:
        return store.get_feature_service(service_name)
    except Exception as exc:  # Feast raises its own FeatureServiceNotFoundException
        raise FeatureStoreError(
            f"feature service {service_name!r} is not in the registry ({exc}); run `mlops features apply`"
        ) from None


def feature_names(store: Any, service_name: str) -> list[str]:
    """Plain feature names a FeatureService returns, in its order."""
    return [f.name for proj in _service(store, service_name).feature_view_projections for f in proj.features]


def registered_view(store: Any, name: str) -> Any:
    """The registered feature view or on-demand feature view called ``name``."""
    try:
        return store.get_feature_view(name)
    except Exception:  # Feast raises FeatureViewNotFoundException; an on-demand view lives in its own list
        try:
            return store.get_on_demand_feature_view(name)
        except Exception:
            raise FeatureStoreError(f"feature view {name!r} is not in the registry; "
                                    "run `mlops features apply`") from None


def is_on_demand(view: Any) -> bool:
    """True for an :class:`OnDemandFeatureView` (computed per request, nothing stored)."""
    return hasattr(view, "source_request_sources")


def service_views(store: Any, service_name: str) -> list[Any]:
    """The registered (and on-demand) feature views a FeatureService reads, each narrowed to its projection."""
    views = []
    for proj in _service(store, service_name).feature_view_projections:
        view = copy.copy(registered_view(store, proj.name))
        view.projection = proj
        views.append(view)
    return views


def request_fields(views: list[Any]) -> list[str]:
    """Request fields the on-demand views among ``views`` read (an entity row / entity_df must carry them)."""
    names: list[str] = []
    for view in views:
        if is_on_demand(view):
            names += [n for n in view.get_request_data_schema() if n not in names]
    return names


def _retrieval_plan(store: Any, views: list[Any]) -> tuple[list[Any], list[str]]:
    """``(stored views, feature refs)`` for a point-in-time join of ``views``: an on-demand view's refs, plus the
    stored features it reads (added to their view when the service does not serve them), as Feast's own
    ``get_historical_features`` groups them."""
    stored = {v.name: v for v in views if not is_on_demand(v)}
    refs = [f"{v.projection.name_to_use()}:{f.name}" for v in views for f in v.projection.features]
    for odfv in (v for v in views if is_on_demand(v)):
        for proj in odfv.source_feature_view_projections.values():
            if proj.name not in stored:
                view = copy.copy(registered_view(store, proj.name))
                view.projection = proj
                stored[proj.name] = view
            view = stored[proj.name]
            for f in proj.features:
                ref = f"{view.projection.name_to_use()}:{f.name}"
                if ref not in refs:
                    refs.append(ref)
    return list(stored.values()), refs


def service_defaults(store: Any, service_name: str) -> dict[str, float]:
    """``{feature: default}`` of a FeatureService's features (the ``default`` tag of each ``Field``)."""
    return feature_defaults_of(service_views(store, service_name))


def service_features(features: FeaturesConfig, root: str | Path) -> list[str]:
    """Feature names of ``features.feature_service``, read from the Feast registry (their source of truth)."""
    return feature_names(open_store(features, root), features.require_feature_service())


def historical_features(features: FeaturesConfig, root: str | Path, entity_df: pd.DataFrame) -> pd.DataFrame:
    """Feast's point-in-time join for ``entity_df`` (``user_id, merchant_id, event_timestamp`` + any columns).

    Rows whose entities have no value inside the TTL come back with nulls; the rows' order is not kept. On-demand
    views of the service run their udf on the joined rows (their request fields come from ``entity_df``).
    """
    store = open_store(features, root)
    service = features.require_feature_service()
    views = service_views(store, service)
    missing = [n for n in request_fields(views) if n not in entity_df.columns]
    if missing:
        raise FeatureStoreError(f"FeatureService {service!r} computes request-time features from "
                                f"{missing!r}: expected those columns in the entity frame")
    stored, refs = _retrieval_plan(store, views)
    job = store._get_provider().get_historical_features(  # the store's own path, with views read from backfills
        store.config, offline_views(features, root, stored), refs, entity_df, store.registry, store.project,
        full_feature_names=False)
    return job.to_df()


def training_set(
    features: FeaturesConfig, data: DataConfig, root: str | Path, *, contract: ContractConfig,
    fill_defaults: bool = True,
) -> pd.DataFrame:
    """One row per labelled transaction in the validated area, with the FeatureService's features.

    Args:
        features: The ``features`` section (store, FeatureService, TTL).
        data: The ``data`` section (where validated batches are).
        root: Repo root both sections' paths are relative to.
        contract: The model's contract: its record id, entity keys, request fields and label name the columns.
        fill_defaults: Replace nulls (no value within the TTL) by each feature's ``default`` tag.

    Returns:
        Columns :func:`leading_columns` (record id, ``event_timestamp``, entity keys, request-time fields), the
        feature columns (plain names) and the label, sorted by event time (ties by record id).
    """
    labels = read_validated(Path(root) / data.validated_dir, record_id=contract.record_id)
    lead, label = leading_columns(contract), contract.label
    entity_df = labels[[*lead, label]].copy()
    entity_df["event_timestamp"] = entity_df["event_timestamp"] - JUST_BEFORE
    store = open_store(features, root)
    service = features.require_feature_service()
    names = feature_names(store, service)
    joined = historical_features(features, root, entity_df)
    if len(joined) != len(entity_df):
        raise FeatureStoreError(
            f"point-in-time join returned {len(joined)} rows for {len(entity_df)} labels: "
            f"offline store {features.offline_store!r} drops rows; use offline_store: duckdb"
        )
    joined["event_timestamp"] = pd.to_datetime(joined["event_timestamp"], utc=True) + JUST_BEFORE
    if fill_defaults:
        defaults = service_defaults(store, service)
        joined = joined.fillna({n: defaults[n] for n in names if n in defaults})
    out = joined[[*lead, *names, label]]
    out = out.sort_values(["event_timestamp", contract.record_id], kind="stable").reset_index(drop=True)
    logger.info("training set: %d rows, %d features, positives %.4f", len(out), len(names), out[label].mean())
    return out
