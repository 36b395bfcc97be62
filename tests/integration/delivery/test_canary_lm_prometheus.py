"""`mlops canary analyze --model llm-sft` from a real Prometheus, as promote.yml's analyze steps run it (no server
addresses: Prometheus at ``delivery.prometheus_url``, the scores from the shared prediction log).

Two real exposition endpoints serve the LM server's own registry (``mlops_serving.lm_api.LMMetrics``), one per
revision; a real Prometheus process scrapes them every second. The test records known traffic per version (answers,
5xx, time to first token, decode tokens and seconds) and writes the LM server's log rows through the real writer, so
the expected error rates, p99 and decode rates are arithmetic on those numbers, not the code's own output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.support.exposition import exposition_endpoint, wait_until

pytestmark = pytest.mark.integration

MODEL = "llm-sft"
# version: (answered, {status: count}, ttft s, decode tokens per answer, decode s per answer, completion tokens,
#           finish_reason)
TRAFFIC: dict[str, tuple[int, dict[str, int], float, int, float, int, str]] = {
    "1": (300, {"500": 3}, 0.04, 9, 0.18, 10, "stop"),  # 50 tokens/s, first token in 25-50 ms
    "2": (200, {"503": 40, "400": 9}, 0.40, 9, 0.90, 10, "stop"),  # 10 tokens/s, first token in 250-500 ms
}



def _total(url: str, promql: str) -> float:
    result = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else -1.0



@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory, start_prometheus: Any) -> Iterator[tuple[str, Path]]:
    """(Prometheus URL, prediction-log folder) once the known traffic is scraped and logged."""
    from mlops_serving.lm_api import LMMetrics
    from mlops_serving.prediction_log import PredictionLogWriter

    tmp = tmp_path_factory.mktemp("lm-canary-prom")
    revisions = {version: LMMetrics() for version in TRAFFIC}
    servers = [exposition_endpoint(m) for m in revisions.values()]
    # every series exists at 0 before the first scrape, so increase() sees the whole traffic
    for version, (_, errors, *_rest) in TRAFFIC.items():
        m = revisions[version]
        m.requests.labels(MODEL, version, "stable", "completions")
        m.ttft.labels(MODEL, version)
        m.tokens_per_s.labels(MODEL, version)
        m.decode_tokens.labels(MODEL, version)
        m.decode_seconds.labels(MODEL, version)
        for status in errors:
            m.errors.labels(MODEL, version, "internal", status)
    prom = start_prometheus(tmp / "prometheus", [addr for _, addr in servers], scrape_s=1)
    try:
        wait_until(lambda: _total(prom.url, "count(mlops_serving_lm_decode_tokens_total)") == len(TRAFFIC))
        time.sleep(1.5)
        for version, (answered, errors, ttft, tokens, decode_s, _, _) in TRAFFIC.items():
            m = revisions[version]
            m.requests.labels(MODEL, version, "stable", "completions").inc(answered)
            for _ in range(answered):
                m.ttft.labels(MODEL, version).observe(ttft)
                m.tokens_per_s.labels(MODEL, version).observe(tokens / decode_s)
            m.decode_tokens.labels(MODEL, version).inc(tokens * answered)
            m.decode_seconds.labels(MODEL, version).inc(decode_s * answered)
            for status, n in errors.items():
                m.errors.labels(MODEL, version, "internal", status).inc(n)
        wait_until(lambda: _total(prom.url, "sum(mlops_serving_requests_total)") == 500)
        time.sleep(2.5)  # a couple more samples at the final values
        writer = PredictionLogWriter(tmp / "log", MODEL, flush_s=0.2)
        writer.start()
        for version, (answered, _, ttft, _, decode_s, completion, finish) in TRAFFIC.items():
            writer.append([{"request_id": f"r{version}-{i}", "ts": datetime.now(UTC), "model_name": MODEL,
                            "model_version": version, "variant": "stable", "endpoint": "completions",
                            "prompt_tokens": 12, "completion_tokens": completion, "finish_reason": finish,
                            "latency_ms": (ttft + decode_s) * 1000.0, "ttft_ms": ttft * 1000.0}
                           for i in range(answered)])
        writer.stop()
        yield prom.url, tmp / "log"
    finally:
        prom.stop()
        for server, _ in servers:
            server.shutdown()
            server.server_close()


def test_the_lm_canary_is_read_from_prometheus_by_version(scraped: tuple[str, Path]) -> None:
    from mlops_config import DeliveryConfig
    from mlops_delivery.lm_canary import lm_version_counts

    url, _ = scraped
    counts = lm_version_counts(DeliveryConfig(canary_rate_window="5m"), url, MODEL)
    assert sorted(counts) == [1, 2]
    for version, (answered, errors, _, tokens, decode_s, _, _) in TRAFFIC.items():
        c = counts[int(version)]
        five_xx = sum(n for status, n in errors.items() if status.startswith("5"))
        # increase() extrapolates to the window's edges: counts are estimates, their ratios exact
        assert c.errors / c.answered == pytest.approx(five_xx / answered, rel=1e-6)
        assert c.decode_tokens / c.decode_seconds == pytest.approx(tokens / decode_s, rel=1e-6)
        assert c.answered == pytest.approx(answered, rel=0.25)
        assert c.ttft[-1][1] == pytest.approx(c.answered, rel=1e-6)  # one first token per answer


def test_cli_decides_an_lm_canary_from_prometheus_and_the_log(scraped: tuple[str, Path], config_dir: Path) -> None:
    from mlops_cli.app import app

    url, log = scraped
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir)}
    result = CliRunner().invoke(app, [
        "canary", "analyze", "--model", MODEL, "--stable-version", "1", "--canary-version", "2", "--exit-code",
        "--json", "--set", f"delivery.prometheus_url={url}", "--set", "delivery.canary_rate_window=5m",
        "--set", f"serving.prediction_log_uri={log}", "--set", "delivery.sequential.verdict=threshold"], env=env)
    assert result.exit_code == 4, result.output  # rollback
    import json

    body = json.loads(result.stdout)
    stable, canary = body["stable"], body["canary"]
    assert stable["error_rate"] == pytest.approx(3 / 303, rel=1e-6)
    assert canary["error_rate"] == pytest.approx(40 / 240, rel=1e-6)  # the 400s are the client's: not counted
    # PromQL-free p99: linear inside the bucket holding rank 0.99 * count (25-50 ms; 250-500 ms)
    assert stable["ttft_p99_s"] == pytest.approx(0.025 + 0.025 * 0.99, rel=1e-6)
    assert canary["ttft_p99_s"] == pytest.approx(0.25 + 0.25 * 0.99, rel=1e-6)
    assert stable["tokens_per_s_mean"] == pytest.approx(50.0, rel=1e-6)
    assert canary["tokens_per_s_mean"] == pytest.approx(10.0, rel=1e-6)
    assert stable["responses_logged"] == 300 and canary["responses_logged"] == 200
    failed = [r for r in body["reasons"] if r.startswith("FAILED")]
    assert any("error rate" in r for r in failed), body["reasons"]


def test_without_prometheus_or_server_addresses_the_lm_canary_says_what_to_give(config_dir: Path,
                                                                                tmp_path: Path) -> None:
    from mlops_cli.app import app

    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir)}
    result = CliRunner().invoke(app, [
        "canary", "analyze", "--model", MODEL, "--stable-version", "1", "--canary-version", "2",
        "--set", f"serving.prediction_log_uri={tmp_path / 'log'}"], env=env)
    assert result.exit_code != 0
    assert "delivery.prometheus_url" in result.output and "--stable-metrics" in result.output, result.output
