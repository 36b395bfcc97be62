"""Online feature lookup for serving: one FeatureStore per process, defaults for unknown or expired entities.

On the serving hot path: the store, the FeatureService and the feature names are resolved once in the
constructor; ``get`` is one ``get_online_features`` call. When Redis is down ``get`` raises
:class:`FeatureStoreUnavailableError` quickly (the caller may serve degraded); redis-py drops broken
connections from its pool, so the first call after Redis is back succeeds again with no restart.

A view's ``ttl`` is applied here, at request time: Feast's online read (Redis, SQLite) returns an entity's last
value however old it is, while the point-in-time join that builds the training set gives a view's features
nulls (then their defaults) when its latest row is older than ``as_of - ttl``. So a value stamped before
``as_of - ttl`` is treated as absent, exactly as an unknown entity's: its default, and the entity's flag. An
on-demand view reading an expired view is recomputed from the absent values, as the offline join computes it.
``as_of`` is ``features.online_ttl_as_of`` when pinned, else now; a ttl of 0 never expires (Feast's rule).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
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
        self._on_demand_views = [v for v in views if is_on_demand(v)]
        self._by_entity = self._group_names_by_entity()
        self._ttl_ns = {v.name: _ns(v.ttl) for v in self._stored_views if v.ttl and _ns(v.ttl) > 0}
        """Per stored view with a ttl (0/None: never expires), its length in ns."""
        self.as_of = features.online_ttl_as_of
        """Pinned instant the ttl counts back from (``features.online_ttl_as_of``); None: each request's now."""
        self._errors = _unavailable_errors()

    def get(self, entity_rows: Sequence[Mapping[str, Any]], *, as_of: datetime | None = None
            ) -> list[dict[str, Any]]:
        """Feature dicts for rows of ``{"user_id": ..., "merchant_id": ...}`` plus :attr:`request_fields` (the
        request's values that on-demand views compute from, e.g. ``amount``); other keys are ignored.

        Args:
            entity_rows: The rows to look up.
            as_of: The instant each view's ttl counts back from; default :attr:`as_of`, else now (UTC).

        Returns:
            One dict per row: every feature (defaults where the store has nothing, or only a value older than
            ``as_of - ttl``) plus ``unknown_user`` / ``unknown_merchant`` flags and ``_unknown_entity`` (any of them).

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
            response = self._store.get_online_features(features=self._service, entity_rows=rows)
        except self._errors as exc:
            raise FeatureStoreUnavailableError(f"online store unreachable: {type(exc).__name__}: {exc}") from exc
        result = response.to_dict()
        if self._ttl_ns:
            self._expire(response, result, rows, as_of or self.as_of or datetime.now(UTC))
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

    def _expire(self, response: Any, result: dict[str, list[Any]], rows: list[dict[str, Any]],
                as_of: datetime) -> None:
        """Blank, in ``result``, each view's values stamped before ``as_of - ttl`` (the offline join's
        ``feature_ts >= entity_ts - ttl``), then recompute the on-demand views that read a blanked one."""
        as_of_ns = _ns(as_of - datetime(1970, 1, 1, tzinfo=UTC))
        stamps = {name: vector.event_timestamps
                  for name, vector in zip(response.proto.metadata.feature_names.val, response.proto.results,
                                          strict=True)}
        expired: set[str] = set()
        for view in self._stored_views:
            ttl = self._ttl_ns.get(view.name)
            names = [f.name for f in view.projection.features]
            if ttl is None or not names:
                continue
            ts = stamps[names[0]]  # one event timestamp per view and entity (Feast's ``_ts:<view>``)
            for i in range(len(rows)):
                if ts[i].seconds * 1_000_000_000 + ts[i].nanos < as_of_ns - ttl:
                    expired.add(view.name)
                    for n in names:
                        result[n][i] = None
        for odfv in self._on_demand_views:
            if expired & {p.name for p in odfv.source_feature_view_projections.values()}:
                self._recompute(odfv, result, rows)

    @staticmethod
    def _recompute(odfv: Any, result: dict[str, list[Any]], rows: list[dict[str, Any]]) -> None:
        """``odfv``'s features from the request fields and its (blanked) stored inputs, as Feast computes them."""
        import pyarrow as pa
        from feast.type_map import feast_value_type_to_pa

        fields = [f for src in odfv.source_request_sources.values() for f in src.schema]
        columns = {f.name: pa.array([r[f.name] for r in rows], feast_value_type_to_pa(f.dtype.to_value_type()))
                   for f in fields}
        for proj in odfv.source_feature_view_projections.values():
            columns.update({f.name: pa.array(result[f.name], feast_value_type_to_pa(f.dtype.to_value_type()))
                            for f in proj.features})
        table = odfv.transform_arrow(pa.table(columns), False)
        for f in odfv.projection.features:
            result[f.name] = table[f.name].to_pylist()

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


def _ns(delta: Any) -> int:
    """A :class:`datetime.timedelta` in whole nanoseconds (exact: microseconds are its finest unit)."""
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
