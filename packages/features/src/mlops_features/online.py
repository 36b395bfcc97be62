"""Online feature lookup for serving: one FeatureStore per process, defaults for unknown or expired entities.

On the serving hot path: the store, the FeatureService and the feature names are resolved once in the
constructor; ``get`` is one read of the store, by one of two readers (``features.online_reader``): on Redis the
direct reader (:mod:`mlops_features.online_direct`, one round trip, built from the registry at load, no registry
read in a request), else Feast's ``get_online_features`` call. Both give the same values of the same types
(tests/integration/features/test_online_direct.py); :attr:`OnlineFeatures.parity` re-reads a sample of the
direct lookups through Feast off the request path and counts any difference. When Redis is down ``get`` raises
:class:`FeatureStoreUnavailableError` quickly (the caller may serve degraded); redis-py drops broken
connections from its pool, so the first call after Redis is back succeeds again with no restart. The registry
that Feast's reader resolves a lookup against is refreshed on a thread of its own (:attr:`OnlineFeatures.registry`),
never inside a lookup (Feast's ``cache_mode: sync`` re-reads it in whichever call finds it expired).

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

from mlops_config import ContractConfig, FeaturesConfig
from mlops_features.dataset import feature_names, is_on_demand, request_fields, service_defaults, service_views
from mlops_features.errors import FeatureStoreError, FeatureStoreUnavailableError
from mlops_features.online_parity import ParitySampler
from mlops_features.online_plan import compute_on_demand
from mlops_features.registry_refresh import RegistryRefresher
from mlops_features.store import open_store
from mlops_model import UNKNOWN_ENTITY

logger = logging.getLogger(__name__)

_UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    try:
        import redis
        from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError

        # a cluster client wraps a node it cannot reach at start in RedisClusterException
        return (*_UNAVAILABLE_ERRORS, redis.ConnectionError, redis.TimeoutError, ClusterDownError,
                RedisClusterException, SlotNotCoveredError)
    except ImportError:  # pragma: no cover - redis is a dependency
        return _UNAVAILABLE_ERRORS


class OnlineFeatures:
    """Feature vectors for request rows from the online store (SQLite or Redis).

    Two readers answer the same (``features.online_reader``): ``direct`` (Redis only:
    :class:`mlops_features.online_direct.DirectRedisReader`, one pipelined round trip per batch, no Feast request
    resolution or per-value conversion on the request path) and ``feast``
    (``FeatureStore.get_online_features(...).to_dict()``; SQLite always). The ttl, the defaults, the flags and
    the on-demand views are then applied here by the same code for both.

    Args:
        features: The ``features`` section.
        root: Repo root the section's paths are relative to.
        contract: The model's contract: the entity keys rows are looked up by and their unknown flags (required:
            no model's contract stands in for another's).
    """

    def __init__(self, features: FeaturesConfig, root: str | Path, *, contract: ContractConfig) -> None:
        self.entity_keys: tuple[str, ...] = contract.entity_keys
        """The contract's entity keys: every row must carry them (serving checks its model's are the same)."""
        self._unknown_flags = dict(contract.unknown_flags)
        self._store = open_store(features, root, registry_refresh="background")
        self.registry = RegistryRefresher(self._store, features.registry_cache_ttl_s)
        """Refreshes the registry Feast's reader (and the sampled comparison) resolves each lookup against, every
        ``registry_cache_ttl_s`` on a thread of its own: no lookup re-reads the registry."""
        self.service_name = features.require_feature_service()
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
        self.as_of = features.online_ttl_as_of
        """Pinned instant the ttl counts back from (``features.online_ttl_as_of``); None: each request's now."""
        self._errors = _unavailable_errors()
        self._plan = _service_plan(self._store, self._service) if self._on_demand_views else None
        self._direct = self._direct_reader(features)
        self.reader: str = "direct" if self._direct is not None else "feast"
        """The reader answering :meth:`get`: ``direct`` or ``feast`` (see ``features.online_reader``)."""
        if self._direct is not None:
            assert self._plan is not None
            self._expiry = [(t.view.name, _ttl_ns(t.view), t.features) for t in self._plan.tables]
        else:
            self._expiry = [(v.name, _ttl_ns(v), tuple(f.name for f in v.projection.features))
                            for v in self._stored_views]
        self._expiry = [(name, ttl, names) for name, ttl, names in self._expiry if ttl and names]
        """Per view with a ttl (0/None: never expires): its name, the ttl in ns and the features it blanks."""
        rate = features.online_parity_sample if self._direct is not None else 0.0
        self.parity = ParitySampler(rate, self._read_feast, self._read_direct, service=self.service_name)
        """The sampled comparison of the direct reader against Feast's (counts, ``collector()`` for Prometheus)."""

    def _direct_reader(self, features: FeaturesConfig) -> Any:
        """The direct reader when the config asks for it and it answers exactly as Feast would, else None."""
        if features.online_reader != "direct" or features.online_store != "redis":
            return None
        from feast.infra.online_stores.redis import RedisOnlineStoreConfig

        if not isinstance(self._store.config.online_store, RedisOnlineStoreConfig):
            return None
        from mlops_features.online_direct import DirectRedisReader
        from mlops_features.online_plan import unsupported_by_direct

        if self._plan is None:
            self._plan = _service_plan(self._store, self._service)
        reason = unsupported_by_direct(self._plan, self._service, self.entity_keys)
        if reason is not None:
            logger.warning("features.online_reader=direct: FeatureService %r is read through Feast instead: %s",
                           self.service_name, reason)
            return None
        return DirectRedisReader(self._store, self._plan)

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
        return _rows_of(self.get_columns(entity_rows, as_of=as_of))

    def get_columns(self, entity_rows: Sequence[Mapping[str, Any]], *, as_of: datetime | None = None
                    ) -> dict[str, list[Any]]:
        """:meth:`get`'s answer by column (name → one value per row, flags first): what serving encodes from,
        with no dict built per row. Same arguments, values and errors as :meth:`get`."""
        if not entity_rows:
            return {}
        rows = []
        for i, row in enumerate(entity_rows):
            missing = [k for k in self.entity_keys if row.get(k) in (None, "")]
            if missing:
                raise FeatureStoreError(f"entity row {i} lacks {missing!r}: expected keys {list(self.entity_keys)}")
            absent = [k for k in self.request_fields if row.get(k) is None]
            if absent:
                raise FeatureStoreError(f"entity row {i} lacks request field(s) {absent!r}: FeatureService "
                                        f"{self.service_name!r} computes request-time features from them")
            rows.append({**{k: str(row[k]) for k in self.entity_keys}, **{k: row[k] for k in self.request_fields}})
        when = as_of or self.as_of or (datetime.now(UTC) if self._expiry else None)
        if self._direct is None:
            return self._feast_columns(rows, when)
        out = self._direct_columns(rows, when)
        if self.parity.rate:  # the rows are built only for a sampled lookup
            self.parity.offer(rows, when, lambda: _rows_of(out))
        return out

    def _read_direct(self, rows: list[dict[str, Any]], as_of: datetime | None) -> list[dict[str, Any]]:
        return _rows_of(self._direct_columns(rows, as_of))

    def _read_feast(self, rows: list[dict[str, Any]], as_of: datetime | None) -> list[dict[str, Any]]:
        return _rows_of(self._feast_columns(rows, as_of))

    def _direct_columns(self, rows: list[dict[str, Any]], as_of: datetime | None) -> dict[str, list[Any]]:
        assert self._plan is not None
        try:
            result, stamps = self._direct.read(rows)
        except self._errors as exc:
            raise FeatureStoreUnavailableError(f"online store unreachable: {type(exc).__name__}: {exc}") from exc
        if self._expiry and as_of is not None:
            self._expire(result, stamps, len(rows), as_of)
        for od in self._plan.on_demand:  # computed from the stored values as they are served (expired: absent)
            result.update(compute_on_demand(self._plan, od, result, rows))
        return self._assemble(result, len(rows))

    def _feast_columns(self, rows: list[dict[str, Any]], as_of: datetime | None) -> dict[str, list[Any]]:
        try:
            response = self._store.get_online_features(features=self._service, entity_rows=rows)
        except self._errors as exc:
            raise FeatureStoreUnavailableError(f"online store unreachable: {type(exc).__name__}: {exc}") from exc
        result = response.to_dict()
        if self._expiry and as_of is not None:
            expired = self._expire(result, _feast_stamps(response, self._expiry), len(rows), as_of)
            if expired and self._plan is not None:  # Feast computed them from the values now blanked: again
                for od in self._plan.on_demand:
                    if expired & {p.name for p in od.view.source_feature_view_projections.values()}:
                        result.update(compute_on_demand(self._plan, od, result, rows))
        return self._assemble(result, len(rows))

    def _expire(self, result: dict[str, list[Any]], stamps: Mapping[str, Sequence[int]], n: int,
                as_of: datetime) -> set[str]:
        """Blank, in ``result``, each view's values stamped before ``as_of - ttl`` (the offline join's
        ``feature_ts >= entity_ts - ttl``); the names of the views with a value blanked."""
        as_of_ns = _ns(as_of - datetime(1970, 1, 1, tzinfo=UTC))
        expired: set[str] = set()
        for view, ttl, names in self._expiry:
            ts = stamps.get(view)  # one event time per view and entity (Feast's ``_ts:<view>``)
            if ts is None:  # none of its features in Feast's answer: nothing to blank
                continue
            cutoff = as_of_ns - ttl
            columns = [result[name] for name in names if name in result]  # Feast's answer: served features only
            for i in range(n):
                if ts[i] < cutoff:
                    expired.add(view)
                    for column in columns:
                        column[i] = None
        return expired

    def _assemble(self, result: Mapping[str, list[Any]], n: int) -> dict[str, list[Any]]:
        """The answer's columns: the entities' unknown flags (all of an entity's features missing; a column for
        each the contract names), ``_unknown_entity`` (any entity unknown), then each feature, its default where
        missing (None or NaN)."""
        missing = {name: [v is None or (isinstance(v, float) and v != v) for v in result[name]]  # _is_missing
                   for name in self.names}
        keys: list[str] = []
        columns: list[list[Any]] = []
        per_entity = [[all(flags) for flags in zip(*(missing[name] for name in names), strict=True)]
                      for names in self._by_entity.values()]
        for key, flags in zip(self._by_entity, per_entity, strict=True):
            if key in self._unknown_flags:
                keys.append(self._unknown_flags[key])
                columns.append(flags)
        keys.append(UNKNOWN_ENTITY)
        columns.append([any(flags) for flags in zip(*per_entity, strict=True)] if per_entity else [False] * n)
        for name in self.names:
            default = self.defaults[name]
            keys.append(name)
            columns.append([default if m else v for v, m in zip(result[name], missing[name], strict=True)])
        return dict(zip(keys, columns, strict=True))

    def ping(self) -> bool:
        """True when the online store answers a lookup (a miss counts); False when it is unreachable."""
        try:
            self.get([{**dict.fromkeys(self.entity_keys, "__ping__"), **dict.fromkeys(self.request_fields, 0.0)}])
        except FeatureStoreUnavailableError as exc:
            logger.warning("online store ping failed: %s", exc)
            return False
        return True

    def _group_names_by_entity(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {k: [] for k in self.entity_keys}
        for view in self._stored_views:  # an on-demand value is computed, never missing: it flags nothing
            for key in (c.name for c in view.entity_columns):
                if key in groups:
                    groups[key] += [f.name for f in view.projection.features]
        return {k: v for k, v in groups.items() if v}


def _service_plan(store: Any, service: Any) -> Any:
    from mlops_features.online_plan import ServicePlan

    return ServicePlan.of(store, service)


def _ttl_ns(view: Any) -> int:
    return _ns(view.ttl) if view.ttl else 0


def _feast_stamps(response: Any, expiry: Sequence[tuple[str, int, Sequence[str]]]) -> dict[str, list[int]]:
    """Per view in ``expiry``, each row's event time (ns) from Feast's response (that of the view's first feature:
    Feast stamps all features of a view and entity with its ``_ts:<view>``)."""
    vectors = dict(zip(response.proto.metadata.feature_names.val, response.proto.results, strict=True))
    stamps = {}
    for view, _, names in expiry:
        served = next((name for name in names if name in vectors), None)
        if served is not None:
            stamps[view] = [t.seconds * 1_000_000_000 + t.nanos for t in vectors[served].event_timestamps]
    return stamps


def _rows_of(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Columns (name → one value per row) as one dict per row, keys in column order."""
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _ns(delta: Any) -> int:
    """A :class:`datetime.timedelta` in whole nanoseconds (exact: microseconds are its finest unit)."""
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
