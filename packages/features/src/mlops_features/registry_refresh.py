"""Feast's registry refreshed off the request path.

Feast's default (``cache_mode: sync``) refreshes an expired registry cache inside whichever call finds it expired:
once a minute a ``get_online_features`` reads the whole registry (a file, or a SQL database) before it answers,
and every other lookup waits on the registry's lock meanwhile. The online lookup opens its store with the cache
never expiring on its own (``cache_ttl_seconds: 0``, ``cache_mode: thread``, which also drops the file registry's
per-call ``stat``) and a :class:`RegistryRefresher` reloads it every ``features.registry_cache_ttl_s`` on a thread
of its own: the new registry is read with no lock held and swapped in whole, so a request sees the old one or the
new one and never waits for the read.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)


def refresh_registry(store: Any) -> None:
    """Reload ``store``'s registry cache and swap it in (what ``FeatureStore.refresh_registry`` does, without
    holding the file registry's lock during the read).

    Raises:
        Exception: whatever the registry's backend raises (a missing file, a database error); the cache is unchanged.
    """
    from feast.infra.registry.registry import Registry
    from feast.utils import _utc_now

    registry = store.registry
    if isinstance(registry, Registry):  # the file registry: Feast's refresh holds _refresh_lock while it reads
        proto = registry._registry_store.get_registry_proto()
        with registry._refresh_lock:
            registry.cached_registry_proto = proto
            registry.cached_registry_proto_created = _utc_now()
    else:  # CachingRegistry (sql): builds the proto, then assigns it
        proto = registry.proto()
        registry.cached_registry_proto = proto
        registry.cached_registry_proto_created = _utc_now()
    store._clear_feature_service_cache()


class RegistryRefresher:
    """A daemon thread that calls :func:`refresh_registry` every ``interval_s`` seconds (0: never).

    A failed refresh keeps the registry served so far and is logged (once until a refresh succeeds again).

    Args:
        store: The ``feast.FeatureStore`` (opened with ``registry_refresh="background"``).
        interval_s: Seconds between refreshes (``features.registry_cache_ttl_s``).
    """

    def __init__(self, store: Any, interval_s: float) -> None:
        self._store, self.interval_s = store, interval_s
        self.attempts = 0
        """Refreshes tried so far (each ends before the count moves)."""
        self.failures = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="feast-registry-refresh", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def refresh(self) -> None:
        """One refresh, on the calling thread."""
        try:
            refresh_registry(self._store)
        except Exception as exc:  # the registry served so far stays; the next round tries again
            if not self.failures:
                logger.warning("Feast registry refresh failed (the cached registry is served meanwhile): %s: %s",
                               type(exc).__name__, exc)
            with self._changed:
                self.failures += 1
        else:
            with self._changed:
                self.failures = 0
        with self._changed:
            self.attempts += 1
            self._changed.notify_all()

    def wait(self, attempts: int, timeout_s: float) -> bool:
        """Whether :attr:`attempts` reached ``attempts`` within ``timeout_s`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self.attempts >= attempts, timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
