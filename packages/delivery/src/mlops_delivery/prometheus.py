"""Canary evidence from Prometheus: error rate and p99 latency per served version, through PromQL.

The serving exporter (``mlops_serving.metrics``) labels every series with ``model`` and ``version``, so
one query answers for both variants wherever they run (two InferenceService revisions, or one local
process serving both). Queries go to the HTTP API's ``/api/v1/query`` (instant vectors, all at one moment).

Each counter's count over the window is its value now less its value ``w`` ago (``x - (x offset w or x * 0)``: 0
for a series born inside the window), exact, with no extrapolation:

- answered: ``sum by (version) (<count of requests_total{model=M}>)``
- 5xx:      ``sum by (version) (<count of errors_total{model=M, status=~"5.."}>)``
- buckets:  ``sum by (version, le) (<count of latency_bucket{model=M}>)`` (the sequential verdict's slow share
  and answered count, read numerically by ``le``, since its text form is the exporter's)
- p99:      PromQL's ``histogram_quantile`` interpolation over those bucket counts
  (:func:`mlops_delivery.metrics.histogram_quantile`)

``w`` is ``delivery.canary_rate_window``, or the whole seconds since a canary step's start when one is given.
``increase()`` and ``rate()`` extrapolate each series to the window's edges by its own samples, so the buckets of
one histogram were scaled unevenly and their differences counted requests that never happened.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime
from typing import Any

import httpx

from mlops_config import DeliveryConfig
from mlops_delivery.errors import MetricsError
from mlops_delivery.metrics import histogram_quantile

logger = logging.getLogger(__name__)

FIVE_XX = 'status=~"5.."'


def query(prometheus_url: str, promql: str, *, at: float | None = None,
          timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Run an instant query (at Unix time ``at``, default now); returns the result vector
    (``[{"metric": {...}, "value": [ts, "v"]}, ...]``).

    Raises:
        MetricsError: Prometheus is unreachable, refuses the query, or answers something other than a vector.
    """
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    try:
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        response = httpx.get(url, params=params, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise MetricsError(
            f"Prometheus at {prometheus_url!r} is unreachable: {exc}; check delivery.prometheus_url") from exc
    try:
        body = response.json()
    except ValueError:
        raise MetricsError(f"Prometheus at {url!r} answered HTTP {response.status_code} without JSON") from None
    if response.status_code != 200 or body.get("status") != "success":
        raise MetricsError(f"Prometheus refused {promql!r}: HTTP {response.status_code} {body.get('error', body)}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise MetricsError(f"{promql!r} gave a {data.get('resultType')!r}, expected an instant vector")
    return list(data.get("result") or [])


def by_version(result: list[dict[str, Any]]) -> dict[str, float]:
    """``{version label: value}`` of a vector (NaN values, e.g. a quantile of no observations, dropped)."""
    out: dict[str, float] = {}
    for sample in result:
        value = float(sample["value"][1])
        if not math.isnan(value):
            out[str(sample["metric"].get("version", ""))] = value
    return out


def _selector(model: str, extra: str = "") -> str:
    quoted = model.replace("\\", "\\\\").replace('"', '\\"')
    return "{" + f'model="{quoted}"' + (f", {extra}" if extra else "") + "}"


def by_version_buckets(result: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """``{version label: [(le, cumulative count), ...] ascending}`` of a ``sum by (version, le)`` vector."""
    out: dict[str, list[tuple[float, float]]] = {}
    for sample in result:
        value = float(sample["value"][1])
        if not math.isnan(value):
            le = float(sample["metric"].get("le", "nan"))
            out.setdefault(str(sample["metric"].get("version", "")), []).append((le, value))
    return {version: sorted(pairs) for version, pairs in out.items()}


def version_figures(delivery: DeliveryConfig, prometheus_url: str, model: str, *, since: datetime | None = None
                    ) -> dict[str, dict[str, Any]]:
    """``{"answered"|"errors"|"p99_s": {version: value}, "buckets": {version: [(le, count), ...]}}`` over
    ``delivery.canary_rate_window``, or, with ``since``, over the whole seconds since then: a canary step's
    analysis counts that step's traffic only (a fixed 5-minute window reached back over the unanalysed 10 % step,
    where the canary's first requests on a cold pod were its only slow ones).

    Raises:
        MetricsError: a query fails, or Prometheus holds no request series of ``model`` at all.
    """
    at = time.time()
    w = delivery.canary_rate_window if since is None else f"{max(1, math.ceil(at - since.timestamp()))}s"
    requests, errors = counter_name(delivery.requests_metric), counter_name(delivery.errors_metric)
    queries = {
        "answered": f"sum by (version) ({_counted(requests + _selector(model), w)})",
        "errors": f"sum by (version) ({_counted(errors + _selector(model, FIVE_XX), w)})",
    }
    # one evaluation time for all the queries: the counts are differences between the samples at `at` and at
    # `at - w`, so queries evaluated a moment apart would count different requests and skew their ratio
    figures: dict[str, dict[str, Any]] = {
        name: by_version(query(prometheus_url, promql, at=at)) for name, promql in queries.items()}
    buckets = f"{delivery.tabular.latency_metric}_bucket{_selector(model)}"
    figures["buckets"] = by_version_buckets(query(
        prometheus_url, f"sum by (version, le) ({_counted(buckets, w)})", at=at))
    # p99 from those exact counts (PromQL's interpolation), not from rate() of each bucket series, which
    # extrapolates them unevenly, as increase() does
    figures["p99_s"] = {version: histogram_quantile(0.99, counts) for version, counts in figures["buckets"].items()}
    if not figures["answered"]:
        raise MetricsError(
            f"Prometheus at {prometheus_url!r} holds no {requests!r} series for model {model!r} in the last {w}: "
            "is it scraping the predictors? (delivery.requests_metric names the counter)")
    logger.debug("canary figures from %s: %s", prometheus_url, figures)
    return figures


def _counted(series: str, window: str) -> str:
    """PromQL for what each counter series counted in the last ``window``: its value now less its value then (0
    for a series born inside the window, a pod started since). Not ``increase()``: that extrapolates each series
    to the window's edges by its own samples, so the buckets of one histogram are scaled differently (a series at
    0 when the window opens is not extrapolated back, one already counting is) and their differences count
    phantom requests: a canary whose logged requests all took under 100 ms showed 29 of 774 "slower than 100 ms"
    from the buckets of a pod that had started inside the window."""
    return f"({series} - ({series} offset {window} or {series} * 0))"


def counter_name(metric: str) -> str:
    """A counter's exposed name: ``metric`` with its ``_total`` suffix."""
    return metric if metric.endswith("_total") else f"{metric}_total"


def window_counts(prometheus_url: str, model: str, window: str, *, counters: dict[str, tuple[str, str]],
                  histograms: dict[str, str]) -> tuple[dict[str, dict[str, float]],
                                                       dict[str, dict[str, list[tuple[float, float]]]]]:
    """Counts of ``model``'s series by version over ``window``, all evaluated at one time:
    ``{name: {version: increase}}`` for ``counters`` (``name: (counter, extra matcher)``) and
    ``{name: {version: [(le, cumulative increase), ...]}}`` for ``histograms`` (``name: histogram``).

    Raises:
        MetricsError: a query fails.
    """
    at = time.time()  # one evaluation time: increase() extrapolates to it, and ratios of counts must agree
    totals = {name: by_version(query(prometheus_url, f"sum by (version) (increase({counter_name(metric)}"
                                                     f"{_selector(model, extra)}[{window}]))", at=at))
              for name, (metric, extra) in counters.items()}
    buckets = {name: by_version_buckets(query(prometheus_url, f"sum by (version, le) (increase({metric}_bucket"
                                                              f"{_selector(model)}[{window}]))", at=at))
               for name, metric in histograms.items()}
    return totals, buckets
