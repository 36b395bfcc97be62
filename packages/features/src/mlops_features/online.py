"""Online feature lookup for serving: one FeatureStore per process, defaults for unknown entities.

On the serving hot path: the store, the FeatureService and the feature names are resolved once in the
constructor; ``get`` is one ``get_online_features`` call. When Redis is down ``get`` raises
:class:`FeatureStoreUnavailableError` quickly (the caller may serve degraded); redis-py drops broken
connections from its pool, so the first call after Redis is back succeeds again with no restart.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlops_config import FeaturesConfig
from mlops_features.dataset import feature_names, is_on_demand, request_fields, service_defaults, service_views
from mlops_features.errors import FeatureStoreError, FeatureStoreUnavailableError
from mlops_features.store import open_store
from mlops_model import ENTITY_KEYS, UNKNOWN_ENTITY, UNKNOWN_FLAGS

logger = logging.getLogger(__name__)

_UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    try:
        import redis

        return (*_UNAVAILABLE_ERRORS, redis.ConnectionError, redis.TimeoutError)
    except ImportError:  # pragma: no cover - redis is a dependency
        return _UNAVAILABLE_ERRORS


class OnlineFeatures:
    """Feature vectors for request rows from the online store (SQLite or Redis).

    Args:
        features: The ``features`` section.
        root: Repo root the section's paths are relative to.
    """

    def __init__(self, features: FeaturesConfig, root: str | Path) -> None:
        self._store = open_store(features, root)
        self.service_name = features.feature_service
        self.names = feature_names(self._store, self.service_name)
        self._service = self._store.get_feature_service(self.service_name)
        defaults = service_defaults(self._store, self.service_name)  # every feature has one, or this raised
        self.defaults = {n: defaults[n] for n in self.names}
        views = service_views(self._store, self.service_name)
        self.request_fields = tuple(request_fields(views))
        """Request fields the service's on-demand views read: each entity row must carry them."""
        self._stored_views = [v for v in views if not is_on_demand(v)]
        self._by_entity = self._group_names_by_entity()
        self._errors = _unavailable_errors()

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Feature dicts for rows of ``{"user_id": ..., "merchant_id": ...}`` plus :attr:`request_fields` (the
        request's values that on-demand views compute from, e.g. ``amount``); other keys are ignored.

        Returns:
            One dict per row: every feature (defaults where the store has nothing) plus
            ``unknown_user`` / ``unknown_merchant`` flags and ``_unknown_entity`` (any of them).

        Raises:
            FeatureStoreError: a row lacks an entity key or a request field.
            FeatureStoreUnavailableError: the online store cannot be reached.
        """
        if not entity_rows:
            return []
        rows = []
        for i, row in enumerate(entity_rows):
            missing = [k for k in ENTITY_KEYS if row.get(k) in (None, "")]
            if missing:
                raise FeatureStoreError(f"entity row {i} lacks {missing!r}: expected keys {list(ENTITY_KEYS)}")
            absent = [k for k in self.request_fields if row.get(k) is None]
            if absent:
                raise FeatureStoreError(f"entity row {i} lacks request field(s) {absent!r}: FeatureService "
                                        f"{self.service_name!r} computes request-time features from them")
            rows.append({**{k: str(row[k]) for k in ENTITY_KEYS}, **{k: row[k] for k in self.request_fields}})
        try:
            result = self._store.get_online_features(features=self._service, entity_rows=rows).to_dict()
        except self._errors as exc:
            raise FeatureStoreUnavailableError(f"online store unreachable: {type(exc).__name__}: {exc}") from exc
        out = []
        for i in range(len(rows)):
            values = {n: result[n][i] for n in self.names}
            item: dict[str, Any] = {}
            for key, names in self._by_entity.items():
                unknown = all(_is_missing(values[n]) for n in names)
                item[UNKNOWN_FLAGS[key]] = unknown
            item[UNKNOWN_ENTITY] = any(item[f] for f in UNKNOWN_FLAGS.values() if f in item)
            for n in self.names:
                item[n] = self.defaults[n] if _is_missing(values[n]) else values[n]
            out.append(item)
        return out

    def ping(self) -> bool:
        """True when the online store answers a lookup (a miss counts); False when it is unreachable."""
        try:
            self.get([{**dict.fromkeys(ENTITY_KEYS, "__ping__"), **dict.fromkeys(self.request_fields, 0.0)}])
        except FeatureStoreUnavailableError as exc:
            logger.warning("online store ping failed: %s", exc)
            return False
        return True

    def _group_names_by_entity(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {k: [] for k in ENTITY_KEYS}
        for view in self._stored_views:  # an on-demand value is computed, never missing: it flags nothing
            for key in (c.name for c in view.entity_columns):
                if key in groups:
                    groups[key] += [f.name for f in view.projection.features]
        return {k: v for k, v in groups.items() if v}


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
