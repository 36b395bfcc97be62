"""The transformer's feature lookup: online features per entity, with the Redis-outage policy applied.

Outage policy (``serving.redis_outage``):

- ``degraded`` (default): when the online store fails, every row gets the neutral default of each feature
  (the training mean, which the encoder maps to 0) and the response says ``degraded: true`` per
  prediction. The store is not retried on every request while it is down: after a failure the lookup waits
  ``retry_s`` before trying again, so a dead Redis costs no latency; the first success clears the state.
- ``unavailable``: the request gets 503 with ``Retry-After: <retry_s>``.

Either way nothing is restarted: the next attempt after ``retry_s`` reaches Redis once it is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mlops_serving.errors import FeatureStoreUnavailableError
from mlops_serving.schema import CATEGORICAL_FIELDS, NUMERIC_FIELDS

log = logging.getLogger(__name__)

REQUEST_FIELDS = frozenset(NUMERIC_FIELDS + CATEGORICAL_FIELDS)
UNKNOWN_FLAG_KEYS = ("_unknown_entity", "_missing", "missing", "_defaulted")
"""Keys an online-store row may use to flag an entity it does not know (defaults returned)."""


class FeatureSource(Protocol):
    """What ``mlops_features.OnlineFeatures`` offers serving (docs/CONTRACTS.md)."""

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]: ...

    def ping(self) -> bool: ...


@dataclass(frozen=True)
class LookupResult:
    """Features per row, whether each row's entity was unknown, and whether the store was unreachable."""

    features: list[dict[str, Any]]
    unknown: list[bool]
    degraded: bool


class FeatureLookup:
    """Online features for a batch of rows, applying the outage policy; thread-safe."""

    def __init__(
        self,
        source: FeatureSource,
        *,
        entity_keys: Sequence[str],
        outage: Literal["degraded", "unavailable"] = "degraded",
        retry_s: float = 1.0,
    ) -> None:
        self._source = source
        self._defaults: dict[str, Any] = {}
        self._entity_keys = tuple(entity_keys)
        self._outage = outage
        self._retry_s = retry_s
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._last_error = ""
        self._lock = threading.Lock()

    def configure(self, defaults: Mapping[str, Any]) -> None:
        """Set the features to look up and their neutral defaults.

        ``defaults`` come from the loaded model's encoder; where the source publishes its own ``defaults``
        (``OnlineFeatures`` does: the feature repo's FEATURE_DEFAULTS) those win, so a degraded prediction
        sees exactly what an unknown entity would.
        """
        merged = dict(defaults)
        published = getattr(self._source, "defaults", None)
        if isinstance(published, Mapping):
            merged.update({k: v for k, v in published.items() if k in merged or not merged})
        self._defaults = merged

    @property
    def source(self) -> FeatureSource:
        return self._source

    @property
    def feature_names(self) -> list[str]:
        return list(self._defaults)

    @property
    def down(self) -> bool:
        """Whether the last contact with the store failed."""
        return self._down_since is not None

    @property
    def last_error(self) -> str:
        return self._last_error

    def get(self, rows: Sequence[Mapping[str, Any]]) -> LookupResult:
        """Features for each row's entity keys (see the module docstring for what happens in an outage)."""
        if self._down_since is not None and time.monotonic() < self._retry_at:
            return self._on_outage(len(rows))
        entity_rows = [{k: row[k] for k in self._entity_keys} for row in rows]
        try:
            found = self._source.get(entity_rows)
        except Exception as exc:  # redis/feast raise many types for a dead store
            self._mark_down(exc)
            return self._on_outage(len(rows))
        if self._down_since is not None:
            self._mark_up()
        features, unknown = [], []
        for got in found:
            unknown.append(any(bool(got.get(k)) for k in UNKNOWN_FLAG_KEYS))
            features.append({name: _or_default(got.get(name), default) for name, default in self._defaults.items()})
        return LookupResult(features=features, unknown=unknown, degraded=False)

    def ping(self) -> bool:
        """Whether the store answers now (also clears or sets the outage state)."""
        try:
            ok = bool(self._source.ping())
        except Exception as exc:  # same as get(): any failure means unreachable
            self._mark_down(exc)
            return False
        if ok and self._down_since is not None:
            self._mark_up()
        return ok

    def _on_outage(self, n: int) -> LookupResult:
        if self._outage == "unavailable":
            raise FeatureStoreUnavailableError(
                f"the online feature store is unreachable ({self._last_error}); retry later",
                retry_after_s=max(1, round(self._retry_s)),
            )
        return LookupResult(features=[dict(self._defaults) for _ in range(n)], unknown=[False] * n, degraded=True)

    def _mark_down(self, exc: BaseException) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                log.warning("online feature store unreachable (%s: %s); policy %s", type(exc).__name__, exc,
                            self._outage)
            self._retry_at = time.monotonic() + self._retry_s
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]

    def _mark_up(self) -> None:
        with self._lock:
            if self._down_since is not None:
                log.warning("online feature store reachable again after %.1f s", time.monotonic() - self._down_since)
            self._down_since = None
            self._last_error = ""


def _or_default(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, float) and value != value:  # NaN from the store means "no value"
        return default
    return value


def feature_defaults(encoder: Mapping[str, Any]) -> dict[str, Any]:
    """Neutral value per store feature of an encoder spec: numeric → training mean, categorical → None.

    Request-time fields are excluded: they come with the request, not from the store.
    """
    numeric = encoder.get("numeric") or {}
    means = {n["name"]: n.get("mean", 0.0) for n in numeric} if isinstance(numeric, list) else {
        name: (spec.get("mean", 0.0) if isinstance(spec, Mapping) else 0.0) for name, spec in numeric.items()}
    out: dict[str, Any] = {name: float(mean) for name, mean in means.items() if name not in REQUEST_FIELDS}
    categorical = encoder.get("categorical") or {}
    names = [c["name"] for c in categorical] if isinstance(categorical, list) else list(categorical)
    out.update({name: None for name in names if name not in REQUEST_FIELDS})
    return out
