"""The transformer's feature lookup: online features per entity, with the Redis-outage policy applied.

Outage policy (``serving.tabular.redis_outage``):

- ``degraded`` (default): when the online store fails, every row gets the neutral default of each feature
  (the training mean, which the encoder maps to 0) and the response says ``degraded: true`` per
  prediction. The store is not retried on every request while it is down: after a failure the lookup waits
  ``retry_s`` before trying again, so a dead Redis costs no latency; the first success clears the state.
- ``unavailable``: the request gets 503 with ``Retry-After: <retry_s>``.

Either way nothing is restarted: the next attempt after ``retry_s`` reaches Redis once it is back.

Deadline: ``get(rows, deadline=...)`` (and ``await fetch(rows, deadline=...)`` on the event loop, what the
transformer's batches use) runs the store call on a lookup thread and waits for it only until the deadline
(``time.monotonic()``); a late lookup is abandoned and its batch answered by the outage policy
(flagged ``abandoned``). One late lookup does not mark the store down (an overloaded moment is not an outage);
a store call that then fails (redis-py's socket timeout) does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mlops_config import ContractConfig
from mlops_model import UNKNOWN_ENTITY, EncoderSpec
from mlops_serving.errors import FeatureStoreUnavailableError

log = logging.getLogger(__name__)


class FeatureSource(Protocol):
    """What ``mlops_features.OnlineFeatures`` offers serving (docs/CONTRACTS.md): rows flag an unknown entity
    with :data:`mlops_model.UNKNOWN_ENTITY`."""

    @property
    def service_name(self) -> str:
        """The FeatureService the rows come from."""
        ...

    @property
    def defaults(self) -> Mapping[str, Any]:
        """What the store returns for an unknown entity, per feature (the repo's FEATURE_DEFAULTS)."""
        ...

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]: ...

    # A source may also offer ``get_columns(entity_rows) -> dict[str, list]`` (OnlineFeatures does): the same
    # answer by column, which the lookup then uses as it comes, with no dict per row (see _columns_of).

    def ping(self) -> bool: ...


@dataclass(frozen=True)
class LookupResult:
    """Features by column (name → one value per row, defaults applied), whether each row's entity was unknown,
    and whether the store was unreachable.

    Columns, not row dicts: the encoder reads them as they are (:meth:`mlops_model.EncoderSpec.encode_columns`)
    and so do the prediction log and the shadow copy; :meth:`rows` builds dicts only where one is wanted.
    """

    columns: dict[str, list[Any]]
    unknown: list[bool]
    degraded: bool
    abandoned: bool = False

    def rows(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """The features of rows ``start:stop`` as one dict per row."""
        names = list(self.columns)
        picked = [column[start:stop] for column in self.columns.values()]
        return [dict(zip(names, values, strict=True)) for values in zip(*picked, strict=True)]

    @property
    def features(self) -> list[dict[str, Any]]:
        """Every row's features as a dict (:meth:`rows`)."""
        return self.rows()


class FeatureLookup:
    """Online features for a batch of rows, applying the outage policy; thread-safe."""

    def __init__(
        self,
        source: FeatureSource,
        *,
        outage: Literal["degraded", "unavailable"] = "degraded",
        retry_s: float = 1.0,
    ) -> None:
        self._source = source
        self._defaults: dict[str, Any] = {}
        self._entity_keys: tuple[str, ...] | None = None  # the served model's contract's, set by configure()
        self._outage = outage
        self._retry_s = retry_s
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._last_error = ""
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def configure(self, *encoders: EncoderSpec, contract: ContractConfig) -> None:
        """Look up the store features the served encoders read, by the served model's ``contract``'s entity keys,
        defaulting each feature to the source's default.

        The contract's request fields travel with the request and are not looked up. The source's default (the
        feature repo's FEATURE_DEFAULTS) is what an unknown entity gets, so a degraded prediction sees exactly
        that; a feature the source has no default for gets the encoder's training mean (numeric, encoded as 0)
        or None (categorical, encoded as "other").
        """
        request = set(contract.request_fields)
        merged: dict[str, Any] = {}
        for spec in encoders:
            merged.update({c.name: c.mean for c in spec.numeric if c.name not in request})
            merged.update({c.name: None for c in spec.categorical if c.name not in request})
        self._entity_keys = contract.entity_keys
        published = self._source.defaults
        self._defaults = {name: published.get(name, value) for name, value in merged.items()}

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

    def get(self, rows: Sequence[Mapping[str, Any]], deadline: float | None = None) -> LookupResult:
        """Features for each row's entity keys (see the module docstring for an outage and a ``deadline``)."""
        if self._down_since is not None and time.monotonic() < self._retry_at:
            return self._on_outage(len(rows))
        entity_rows = self._entity_rows(rows)
        try:
            found = self._read(entity_rows) if deadline is None else self._get_by(entity_rows, deadline)
        except FutureTimeout:
            return self._on_outage(len(rows), abandoned=True)
        except Exception as exc:  # redis/feast raise many types for a dead store
            self._mark_down(exc)
            return self._on_outage(len(rows))
        return self._found(found, len(rows))

    async def fetch(self, rows: Sequence[Mapping[str, Any]], deadline: float | None = None) -> LookupResult:
        """:meth:`get` for a coroutine on the event loop: the store call runs on a lookup thread (the loop goes on
        serving while it waits on the network) and is awaited until ``deadline``; the one hand-over per batch."""
        if self._down_since is not None and time.monotonic() < self._retry_at:
            return self._on_outage(len(rows))
        future = self._pool().submit(self._read, self._entity_rows(rows))
        future.add_done_callback(self._after_late)
        waiting = asyncio.wrap_future(future)
        try:
            if deadline is None:
                found = await waiting
            else:
                found = await asyncio.wait_for(waiting, max(0.0, deadline - time.monotonic()))
        except TimeoutError:  # the store call goes on; a failure still marks the store down (_after_late)
            return self._on_outage(len(rows), abandoned=True)
        except Exception as exc:  # redis/feast raise many types for a dead store
            self._mark_down(exc)
            return self._on_outage(len(rows))
        return self._found(found, len(rows))

    def _read(self, entity_rows: list[dict[str, Any]]) -> Mapping[str, Sequence[Any]]:
        """The store call (on a lookup thread): the source's answer by column."""
        get_columns = getattr(self._source, "get_columns", None)
        if get_columns is not None:
            return get_columns(entity_rows)
        found = self._source.get(entity_rows)  # a source of row dicts: turned into columns once, here
        names = dict.fromkeys(name for row in found for name in row)
        return {name: [row.get(name) for row in found] for name in names}

    def _entity_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        keys = self._entity_keys
        if keys is None:  # no model's entity keys stand in for the served model's
            raise RuntimeError("FeatureLookup read before configure(..., contract=...): the served model's contract "
                               "names the entity keys rows are looked up by")
        # A FeatureService with request-time (on-demand) features computes them from the request's own fields.
        request = tuple(getattr(self._source, "request_fields", ()))
        return [{**{k: row[k] for k in keys}, **{k: row[k] for k in request if k in row}} for row in rows]

    def _found(self, found: Mapping[str, Sequence[Any]], n: int) -> LookupResult:
        """The served features by column: each configured feature, its default where the source has none (no
        column, None or NaN); the unknown flag per row (absent: known)."""
        if self._down_since is not None:
            self._mark_up()
        flags = found.get(UNKNOWN_ENTITY)
        unknown = [bool(f) for f in flags] if flags is not None else [False] * n
        columns: dict[str, list[Any]] = {}
        for name, default in self._defaults.items():
            got = found.get(name)
            columns[name] = [default] * n if got is None else [_or_default(v, default) for v in got]
        return LookupResult(columns=columns, unknown=unknown, degraded=False)

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

    def close(self) -> None:
        """Stop the lookup threads (an abandoned lookup still running ends on its socket timeout)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # several threads: an abandoned call blocked on a hung store must not hold up the next batch's
            self._executor = ThreadPoolExecutor(4, thread_name_prefix="lookup")
        return self._executor

    def _get_by(self, entity_rows: list[dict[str, Any]], deadline: float) -> Mapping[str, Sequence[Any]]:
        """The store call on a lookup thread, waited for until ``deadline``; raises FutureTimeout past it."""
        future = self._pool().submit(self._read, entity_rows)
        future.add_done_callback(self._after_late)
        return future.result(timeout=max(0.0, deadline - time.monotonic()))

    def _after_late(self, future: Any) -> None:
        """A store call that failed marks the store down even when nobody waited for it any more."""
        exc = future.exception() if not future.cancelled() else None
        if exc is not None:
            self._mark_down(exc)

    def _on_outage(self, n: int, *, abandoned: bool = False) -> LookupResult:
        if self._outage == "unavailable":
            why = ("did not answer before the request's deadline" if abandoned
                   else f"is unreachable ({self._last_error})")
            raise FeatureStoreUnavailableError(f"the online feature store {why}; retry later",
                                               retry_after_s=max(1, round(self._retry_s)))
        return LookupResult(columns={name: [default] * n for name, default in self._defaults.items()},
                            unknown=[False] * n, degraded=True, abandoned=abandoned)

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

