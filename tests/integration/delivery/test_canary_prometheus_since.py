"""A canary step's Prometheus figures cover that step only: the requests a canary served before ``since`` (a cold
pod's first requests at an unanalysed 10 % step) are not counted in the analysed step's slow share.

A real Prometheus scrapes one exposition endpoint (the serving exporter's own registry) every second; the counts
expected are the requests the test recorded after ``since``, by arithmetic."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from mlops_config import DeliveryConfig
from mlops_delivery.prometheus import version_figures
from mlops_serving.metrics import ServingMetrics
from tests.support.exposition import exposition_endpoint, wait_until

pytestmark = pytest.mark.integration


def _total(url: str, promql: str) -> float:
    result = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _slow(buckets: list[tuple[float, float]], le: float) -> float:
    """Observations above ``le`` from cumulative ``(le, count)`` buckets."""
    counts = dict(buckets)
    return counts[float("inf")] - counts[le]


def test_the_figures_since_a_step_leave_out_the_requests_before_it(tmp_path, start_prometheus) -> None:
    metrics = ServingMetrics()
    server, addr = exposition_endpoint(metrics)
    for version, variant in (("1", "stable"), ("2", "canary")):
        metrics.requests.labels("fraud", version, variant, "v2")
        metrics.request_latency.labels("fraud", version, variant)
    prom = start_prometheus(tmp_path / "prometheus", [addr], scrape_s=1)
    try:
        wait_until(lambda: _total(prom.url, "count(mlops_serving_requests_total)") == 2)
        time.sleep(1.5)
        cold = 30  # the canary's first requests on a cold pod, before the analysed step: 0.5 s each
        metrics.requests.labels("fraud", "2", "canary", "v2").inc(cold)
        for _ in range(cold):
            metrics.request_latency.labels("fraud", "2", "canary").observe(0.5)
        wait_until(lambda: _total(prom.url, "sum(mlops_serving_requests_total)") == cold)
        time.sleep(2.5)  # scraped at that value more than once before the step starts
        since = datetime.now(UTC)
        time.sleep(1.5)
        for version, variant in (("1", "stable"), ("2", "canary")):
            metrics.requests.labels("fraud", version, variant, "v2").inc(500)
            for _ in range(500):
                metrics.request_latency.labels("fraud", version, variant).observe(0.004)
        wait_until(lambda: _total(prom.url, "sum(mlops_serving_requests_total)") == cold + 1000)
        time.sleep(2.5)
        delivery = DeliveryConfig(canary_rate_window="5m")
        step = version_figures(delivery, prom.url, "fraud", since=since)
        window = version_figures(delivery, prom.url, "fraud")
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
    # over the step: exactly the 500 requests a side sent after `since`, none of the canary's slower than 100 ms
    # (with increase(), the buckets' different extrapolations showed 29.8 phantom slow requests here)
    assert (step["answered"]["2"], step["answered"]["1"]) == (500.0, 500.0)
    assert _slow(step["buckets"]["2"], 0.1) == 0.0 and _slow(step["buckets"]["1"], 0.1) == 0.0
    # the configured 5-minute window reaches back over the cold requests: exactly those 30 are slow
    assert window["answered"]["2"] == 530.0 and _slow(window["buckets"]["2"], 0.1) == cold
