"""The direct reader checked against Feast's at run time, off the request path.

A sampled lookup (``features.online_parity_sample``, a fraction of batches) is handed, with the instant its ttl
was measured from and the answer it got, to a background thread, which reads the same rows through Feast
(``get_online_features(...).to_dict()`` plus the same ttl, defaults and flags) and then through the direct
reader again. When the second direct read differs from the first, the store changed in between (a
materialization, the stream updater): the sample is counted as ``changed`` and not compared. Otherwise the
served answer is compared with Feast's value by value and type by type (:func:`differences`); each kind of
difference (``value:<feature>``, ``type:<feature>``, ``flag:<flag>``, ``missing:<name>``) is counted and logged
once. At most one comparison runs at a time; a sample offered meanwhile is counted as ``skipped``.

The counts are plain attributes (:attr:`ParitySampler.counts`, :meth:`ParitySampler.snapshot`);
:meth:`ParitySampler.collector` wraps them as a Prometheus collector for a server's own registry.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

logger = logging.getLogger(__name__)

Reader = Callable[[list[dict[str, Any]], datetime | None], list[dict[str, Any]]]


def same(a: Any, b: Any) -> bool:
    """Equal values of the same type (NaN equals NaN; lists, tuples, sets and dicts element by element)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def differences(direct: Sequence[Mapping[str, Any]], feast: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, Any,
                                                                                                       Any]]:
    """``(kind, row, direct value, feast value)`` for every place the two answers differ. ``kind`` is
    ``rows`` (not as many rows), ``missing:<name>`` (a key only one has), ``flag:<name>`` (an unknown-entity flag,
    a key starting with ``unknown`` or ``_unknown``), ``type:<name>`` (same value, other type: ``1`` vs ``1.0``) or
    ``value:<name>``."""
    found: list[tuple[str, int, Any, Any]] = []
    if len(direct) != len(feast):
        return [("rows", -1, len(direct), len(feast))]
    for i, (a, b) in enumerate(zip(direct, feast, strict=True)):
        for name in [*a, *(k for k in b if k not in a)]:
            if name not in a or name not in b:
                found.append((f"missing:{name}", i, a.get(name), b.get(name)))
                continue
            x, y = a[name], b[name]
            if same(x, y):
                continue
            if name.startswith(("unknown", "_unknown")):
                kind = "flag"
            elif type(x) is not type(y) and _loosely_equal(x, y):
                kind = "type"
            else:
                kind = "value"
            found.append((f"{kind}:{name}", i, x, y))
    return found


def _loosely_equal(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:  # values of unrelated types may refuse to compare
        return False


class ParitySampler:
    """Samples lookups and compares them with Feast's answer on a background thread (see the module docstring).

    Args:
        rate: Fraction of offered lookups compared (0: off).
        feast: Reads rows through Feast, with the platform's ttl, defaults and flags.
        direct: Reads rows through the direct reader, the same way.
        service: The FeatureService's name (for the log lines and the metrics).
        seed: Seeds the sampling (tests); None: random.
    """

    def __init__(self, rate: float, feast: Reader, direct: Reader, *, service: str = "",
                 seed: int | None = None) -> None:
        self.rate = float(rate)
        self.service = service
        self._feast = feast
        self._direct = direct
        self._random = random.Random(seed)
        self._busy = threading.Lock()
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._thread: threading.Thread | None = None
        self.counts: Counter[str] = Counter()
        """Samples by outcome: ``compared``, ``differing`` (compared, with a difference), ``changed`` (the store
        changed meanwhile, not compared), ``skipped`` (a comparison was running), ``failed`` (a read raised)."""
        self.differences: Counter[str] = Counter()
        """Differences found, per kind (``value:<feature>``, ``type:<feature>``, ``flag:<flag>``, …)."""

    def offer(self, rows: list[dict[str, Any]], as_of: datetime | None,
              served: Sequence[Mapping[str, Any]] | Callable[[], Sequence[Mapping[str, Any]]]) -> bool:
        """Sample this lookup (with probability :attr:`rate`) for a comparison; True when one was started.

        ``served`` may be a function giving the rows, called (now, on this thread) only for a sampled lookup.
        """
        if not self.rate or self._random.random() >= self.rate:
            return False
        if not self._busy.acquire(blocking=False):
            self._count("skipped")
            return False
        if callable(served):
            served = served()
        snapshot = [dict(item) for item in served]  # the caller may change its dicts
        thread = threading.Thread(target=self._run, args=(rows, as_of, snapshot), daemon=True,
                                  name="online-parity")
        self._thread = thread
        thread.start()
        return True

    def compare(self, rows: list[dict[str, Any]], as_of: datetime | None,
                served: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, Any, Any]]:
        """Compare ``served`` (the direct reader's answer for ``rows`` at ``as_of``) with Feast's, now, on this
        thread; counts as a sample does and returns the differences found."""
        try:
            feast = self._feast(rows, as_of)
            again = self._direct(rows, as_of)
        except Exception as exc:  # a failed comparison never reaches a request
            self._count("failed")
            self._log_once(f"failed:{type(exc).__name__}", "parity check of %r failed: %s: %s", self.service,
                           type(exc).__name__, exc)
            return []
        if differences(served, again):
            self._count("changed")
            return []
        found = differences(served, feast)
        with self._lock:
            self.counts["compared"] += 1
            if found:
                self.counts["differing"] += 1
            for kind, *_ in found:
                self.differences[kind] += 1
        for kind, row, mine, theirs in found:
            self._log_once(kind, "direct online reader differs from Feast's for FeatureService %r (%s, first seen "
                                 "in row %d of %d: direct %r, Feast %r); set features.online_reader: feast to "
                                 "serve Feast's", self.service, kind, row, len(rows), mine, theirs)
        return found

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the comparison running now, if any (tests, shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{"samples": {outcome: n}, "differences": {kind: n}}``."""
        with self._lock:
            return {"samples": dict(self.counts), "differences": dict(self.differences)}

    def collector(self, prefix: str = "mlops_serving_feature_parity", **labels: str) -> Any:
        """A Prometheus collector of these counts, for a registry of the caller's
        (``registry.register(online.parity.collector(model=...))``): ``<prefix>_samples_total{outcome}`` and
        ``<prefix>_differences_total{kind}``, each with ``labels`` and ``service``."""
        return _Collector(self, prefix, {"service": self.service, **labels})

    def _run(self, rows: list[dict[str, Any]], as_of: datetime | None, served: list[dict[str, Any]]) -> None:
        try:
            self.compare(rows, as_of, served)
        finally:
            self._busy.release()

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1

    def _log_once(self, kind: str, message: str, *args: Any) -> None:
        with self._lock:
            if kind in self._logged:
                return
            self._logged.add(kind)
        logger.warning(message, *args)


class _Collector:
    def __init__(self, sampler: ParitySampler, prefix: str, labels: dict[str, str]) -> None:
        self._sampler = sampler
        self._prefix = prefix
        self._labels = labels

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        names = list(self._labels)
        snap = self._sampler.snapshot()
        samples = CounterMetricFamily(f"{self._prefix}_samples", "Lookups of the direct online reader re-read "
                                      "through Feast, by outcome (compared, differing, changed, skipped, failed).",
                                      labels=[*names, "outcome"])
        for outcome in ("compared", "differing", "changed", "skipped", "failed"):
            samples.add_metric([*self._labels.values(), outcome], snap["samples"].get(outcome, 0))
        yield samples
        found = CounterMetricFamily(f"{self._prefix}_differences", "Differences between the direct online "
                                    "reader and Feast's, by kind (value:, type:, flag:, missing:<name>).",
                                    labels=[*names, "kind"])
        for kind, n in sorted(snap["differences"].items()):
            found.add_metric([*self._labels.values(), kind], n)
        yield found
