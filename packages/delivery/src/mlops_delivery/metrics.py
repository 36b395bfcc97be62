"""Evidence for canary analysis: Prometheus text exposition and prediction-score distributions.

Counters and histograms are read with ``prometheus_client``'s own parser; p99 comes from histogram
buckets the way PromQL's ``histogram_quantile`` computes it (linear inside the bucket), and the
prediction-distribution shift is the population stability index (:mod:`mlops_model.statistics`) over
quantile bins of the stable scores.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from mlops_delivery.errors import MetricsError
from mlops_model import StatisticsError, statistics

logger = logging.getLogger(__name__)


def read_metrics_text(source: str, *, timeout_s: float = 5.0) -> str:
    """The exposition text at ``source``: an ``http(s)://`` URL (a ``/metrics`` endpoint) or a file."""
    if source.startswith(("http://", "https://")):
        import httpx

        try:
            response = httpx.get(source, timeout=timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise MetricsError(f"cannot scrape metrics from {source!r}: {exc}") from exc
        return response.text
    path = Path(source)
    if not path.is_file():
        raise MetricsError(f"metrics source {source!r} is neither an http(s) URL nor an existing file")
    return path.read_text(encoding="utf-8")


def parse_samples(text: str, *, source: str = "metrics") -> list[Sample]:
    """Every sample in a text exposition."""
    try:
        return [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as exc:
        raise MetricsError(f"{source!r} is not Prometheus text exposition: {exc}") from exc


def _matches(sample: Sample, names: Iterable[str], labels: Mapping[str, str] | None) -> bool:
    return sample.name in names and all(sample.labels.get(k) == v for k, v in (labels or {}).items())


def counter_total(samples: list[Sample], name: str, *, labels: Mapping[str, str] | None = None,
                  label_prefix: Mapping[str, str] | None = None) -> float:
    """Sum of a counter over all its series that carry ``labels`` (and whose labels start with ``label_prefix``).

    ``name`` may be given with or without the ``_total`` suffix.
    """
    base = name.removesuffix("_total")
    total = 0.0
    for s in samples:
        if not _matches(s, (base, f"{base}_total"), labels):
            continue
        if label_prefix and not all(str(s.labels.get(k, "")).startswith(p) for k, p in label_prefix.items()):
            continue
        total += float(s.value)
    return total


def histogram_buckets(samples: list[Sample], name: str, *,
                      labels: Mapping[str, str] | None = None) -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` buckets of a histogram, summed over its series, sorted by ``le``."""
    sums: dict[float, float] = {}
    for s in samples:
        if _matches(s, (f"{name}_bucket",), labels):
            le = float(s.labels["le"])
            sums[le] = sums.get(le, 0.0) + float(s.value)
    return sorted(sums.items())


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's ``histogram_quantile`` over cumulative buckets; ``None`` without observations.

    The answer is interpolated linearly inside the bucket holding rank ``q * count``; the lowest bucket
    starts at 0; a rank in the ``+Inf`` bucket answers the highest finite upper bound.
    """
    if not 0 <= q <= 1:
        raise MetricsError(f"quantile {q!r} must be in [0, 1]")
    if not buckets or not math.isinf(buckets[-1][0]):
        raise MetricsError(f"histogram needs a '+Inf' bucket, got upper bounds {[b for b, _ in buckets]}")
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return buckets[-2][0] if len(buckets) > 1 else None
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return buckets[-2][0] if len(buckets) > 1 else None


def population_stability_index(expected: np.ndarray, actual: np.ndarray, *, bins: int = 10,
                               floor: float = 1e-4) -> float:
    """PSI of ``actual`` against ``expected`` over quantile bins of ``expected``: the one PSI of
    :mod:`mlops_model.statistics` (only empty bins floored), so canary analysis and drift agree on the same data.
    """
    try:
        return statistics.psi(*statistics.quantile_bin_counts(expected, actual, bins), floor=floor)
    except StatisticsError as exc:
        raise MetricsError(f"prediction PSI: {exc} (stable vs canary scores)") from None
