"""Canary analysis from a real Prometheus (its HTTP API, PromQL) and the prediction log.

Two real exposition endpoints, one per predictor revision, serve the serving exporter's own registry
(``mlops_serving.metrics.ServingMetrics``); a real Prometheus process scrapes them every second. The test
records known traffic: per version a count of answered requests at one latency and a count of 5xx, so
the expected error rates and p99 (PromQL's linear interpolation inside the bucket) are arithmetic on
those numbers, not the code's own output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from mlops_config import DeliveryConfig
from mlops_delivery.canary import analyze_canary_prometheus
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter, log_rows
from tests.support.exposition import exposition_endpoint, wait_until

pytestmark = pytest.mark.integration

# (model, version, variant, answered, latency_s, {status: errors})
TRAFFIC = [
    ("fraud", "1", "stable", 1000, 0.004, {"500": 5}),
    ("fraud", "2", "canary", 400, 0.020, {"503": 20, "422": 10}),  # 4xx are the client's fault: not counted
    ("good", "1", "stable", 1000, 0.004, {"500": 2}),
    ("good", "2", "canary", 300, 0.004, {"500": 1}),
]



def _q(url: str, promql: str) -> list:
    return httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()["data"]["result"]



def _scores(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.beta(2, 5, n)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory, start_prometheus) -> Iterator[tuple[str, Path]]:
    """(Prometheus URL, prediction-log folder) once the known traffic is scraped and logged."""
    tmp = tmp_path_factory.mktemp("canary-prom")
    revisions = {variant: ServingMetrics() for variant in ("stable", "canary")}
    servers = [exposition_endpoint(m) for m in revisions.values()]
    # every series exists at 0 before the first scrape, so increase() sees the whole traffic
    for model, version, variant, _, _, errors in TRAFFIC:
        m = revisions[variant]
        m.requests.labels(model, version, variant, "v2")
        m.request_latency.labels(model, version, variant)
        for status in errors:
            m.errors.labels(model, version, "internal", status)
    prom = start_prometheus(tmp / "prometheus", [addr for _, addr in servers], scrape_s=1)
    try:
        wait_until(lambda: len(_q(prom.url, "mlops_serving_requests_total")) == len(TRAFFIC))
        time.sleep(1.5)
        for model, version, variant, answered, latency, errors in TRAFFIC:
            m = revisions[variant]
            m.requests.labels(model, version, variant, "v2").inc(answered)
            for _ in range(answered):
                m.request_latency.labels(model, version, variant).observe(latency)
            for status, n in errors.items():
                m.errors.labels(model, version, "internal", status).inc(n)
        wait_until(lambda: float(_q(prom.url, "sum(mlops_serving_requests_total)")[0]["value"][1]) == 2700)
        time.sleep(2.5)  # a couple more samples at the final values
        writer = PredictionLogWriter(tmp / "log", "fraud", flush_s=0.2)
        writer.start()
        rng = np.random.default_rng(0)
        for version, variant, scores in (("1", "stable", _scores(rng, 2000)), ("2", "canary", _scores(rng, 2000))):
            writer.append(log_rows(request_id=f"r{version}", ts=time.time(), model_name="fraud", model_version=version,
                                   variant=variant, rows=[{"transaction_id": str(i)} for i in range(len(scores))],
                                   features=[{}] * len(scores), scores=list(scores), degraded=False, latency_ms=4.0))
        writer.stop()
        good = PredictionLogWriter(tmp / "log", "good", flush_s=0.2)
        good.start()
        for version, variant in (("1", "stable"), ("2", "canary")):
            scores = _scores(rng, 2000)
            good.append(log_rows(request_id=f"g{version}", ts=time.time(), model_name="good", model_version=version,
                                 variant=variant, rows=[{"transaction_id": str(i)} for i in range(len(scores))],
                                 features=[{}] * len(scores), scores=list(scores), degraded=False, latency_ms=4.0))
        good.stop()
        yield prom.url, tmp / "log"
    finally:
        prom.stop()
        for server, _ in servers:
            server.shutdown()
            server.server_close()


# The threshold rule decides in the first two tests (they pin down its evidence); the sequential verdict (the
# default) gets its own test below, on the same scraped series.
DELIVERY = DeliveryConfig(canary_rate_window="5m", sequential={"verdict": "threshold"})


def test_a_slower_failing_canary_is_rolled_back_on_prometheus_evidence(scraped: tuple[str, Path]) -> None:
    url, log = scraped
    result = analyze_canary_prometheus(DELIVERY, url, log, "fraud", stable_version=1, canary_version=2)
    assert result.decision == "rollback", result.reasons
    assert result.stable.error_rate == pytest.approx(5 / 1005, rel=1e-6)
    assert result.canary.error_rate == pytest.approx(20 / 420, rel=1e-6)  # the 422s are not server errors
    # PromQL's histogram_quantile: linear inside the bucket holding rank 0.99 * count
    assert result.stable.p99_s == pytest.approx(0.003 + (0.005 - 0.003) * 0.99, rel=1e-6)
    assert result.canary.p99_s == pytest.approx(0.015 + (0.025 - 0.015) * 0.99, rel=1e-6)
    # increase() extrapolates to the query time by up to ~1.1 scrape intervals (1 s) over the few seconds the
    # series have existed, so counts are estimates (the ratios above are exact)
    assert result.canary.requests == pytest.approx(420, rel=0.25)
    assert result.canary.logged_predictions == 2000 and result.stable.logged_predictions == 2000
    failed = [r for r in result.reasons if r.startswith("FAILED")]
    assert any("error rate" in r for r in failed) and any("p99 latency" in r for r in failed)
    assert result.prediction_psi is not None and result.prediction_psi < DELIVERY.tabular.max_prediction_psi


def test_a_healthy_canary_is_promoted_and_the_decision_rule_is_replaceable(scraped: tuple[str, Path]) -> None:
    url, log = scraped
    result = analyze_canary_prometheus(DELIVERY, url, log, "good", stable_version=1, canary_version=2)
    assert result.decision == "promote", result.reasons
    assert result.canary.error_rate == pytest.approx(1 / 301, rel=1e-6)
    seen = []

    def strict(delivery, stable, canary, psi):
        seen.append((stable.version, canary.version))
        return "hold", ("sequential test: not enough evidence yet",)

    held = analyze_canary_prometheus(DELIVERY, url, log, "good", stable_version=1, canary_version=2, decide_fn=strict)
    assert held.decision == "hold" and seen == [(1, 2)]


def test_cli_asks_prometheus_when_no_metrics_urls_are_given(scraped: tuple[str, Path], config_dir: Path) -> None:
    from mlops_cli.app import app

    url, log = scraped
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir)}
    result = CliRunner().invoke(app, [
        "canary", "analyze", "--model", "fraud", "--stable-version", "1", "--canary-version", "2", "--exit-code",
        "--set", f"delivery.prometheus_url={url}", "--set", "delivery.canary_rate_window=5m",
        "--set", f"serving.prediction_log_uri={log}", "--set", "delivery.sequential.verdict=threshold"], env=env)
    assert result.exit_code == 4, result.output  # rollback
    assert "rollback" in result.stdout


def test_the_sequential_verdict_reads_slow_share_and_answered_counts_from_prometheus(
        scraped: tuple[str, Path]) -> None:
    # slow = above 10 ms, a bucket bound: every canary answer (20 ms) is slow, no stable one (4 ms) is
    delivery = DeliveryConfig(canary_rate_window="5m", tabular={"sequential": {"slow_ms": 10}})
    result = analyze_canary_prometheus(delivery, url := scraped[0], scraped[1], "fraud", stable_version=1,
                                       canary_version=2)
    assert url
    assert result.stable.slow_requests == 0
    # increase() extrapolates to the window's edges: counts are estimates, the ratio to answered is exact
    assert result.canary.latency_count == pytest.approx(400, rel=0.25)
    assert result.canary.slow_requests == pytest.approx(result.canary.latency_count, rel=1e-9)
    assert result.stable.latency_count == pytest.approx(1000, rel=0.25)
    assert not any("insufficient" in r for r in result.reasons), result.reasons
    assert result.sequential is not None and result.decision == "rollback", result.reasons
