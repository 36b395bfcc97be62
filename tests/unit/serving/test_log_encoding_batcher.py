"""Prediction log round trip and loss bound, micro-batching, model loading."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlops_serving import read_prediction_log
from mlops_serving.batcher import MicroBatcher
from mlops_serving.errors import ModelLoadError
from mlops_serving.prediction_log import PredictionLogWriter, log_rows
from mlops_serving.served import ModelRef, load_model


def _rows(n: int, ts: float, version: str = "1") -> list[dict[str, Any]]:
    return log_rows(request_id="r", ts=ts, model_name="fraud", model_version=version, variant="stable",
                    rows=[{"user_id": f"u{i}", "merchant_id": "m", "amount": float(i), "transaction_id": f"t{i}"}
                          for i in range(n)],
                    features=[{"f": i * 2.0} for i in range(n)], scores=[i / 10 for i in range(n)], degraded=False,
                    latency_ms=1.5)


def test_log_round_trip_and_since(tmp_path: Path) -> None:
    writer = PredictionLogWriter(tmp_path, "fraud", flush_s=60)
    writer.start()
    old = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    writer.append(_rows(3, old))
    assert writer.flush() == 3
    writer.append(_rows(2, old + 3600, version="2"))
    writer.stop()  # a clean stop flushes what is queued
    frame = read_prediction_log(tmp_path, "fraud")
    assert len(frame) == 5
    assert list(frame["model_version"]) == ["1", "1", "1", "2", "2"]
    assert frame["score"].tolist() == [0.0, 0.1, 0.2, 0.0, 0.1]
    assert str(frame["ts"].dt.tz) == "UTC"
    since = read_prediction_log(tmp_path, "fraud", since=datetime(2026, 1, 1, 0, 30, tzinfo=UTC))
    assert list(since["model_version"]) == ["2", "2"]
    naive = read_prediction_log(tmp_path, "fraud", since=datetime(2026, 1, 1, 0, 30))
    assert len(naive) == 2
    assert read_prediction_log(tmp_path, "other").empty
    assert not list(tmp_path.rglob("*.tmp"))


def test_flush_interval_bounds_what_is_in_memory(tmp_path: Path) -> None:
    writer = PredictionLogWriter(tmp_path, "fraud", flush_s=0.2)
    writer.start()
    writer.append(_rows(4, time.time()))
    deadline = time.monotonic() + 5
    while len(read_prediction_log(tmp_path, "fraud")) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(read_prediction_log(tmp_path, "fraud")) == 4  # on disk without a stop: within the interval
    writer.stop()


def test_full_queue_counts_drops_and_never_blocks(tmp_path: Path) -> None:
    dropped: list[int] = []
    writer = PredictionLogWriter(tmp_path, "fraud", flush_s=60, max_queue=5, on_dropped=dropped.append)
    started = time.perf_counter()
    writer.append(_rows(8, time.time()))
    # blocking would mean waiting for the 60 s flush to make room; 10 s leaves a loaded machine its hiccups
    assert time.perf_counter() - started < 10
    assert dropped == [3]
    assert writer.flush() == 5


def test_batcher_coalesces_concurrent_requests_and_spreads_errors() -> None:
    seen: list[int] = []

    async def process(items: list[int]) -> list[int]:
        seen.append(len(items))
        if -1 in items:
            raise ValueError("bad batch")
        return [i * 10 for i in items]

    async def main() -> tuple[list[int], Any]:
        batcher: MicroBatcher[int, int] = MicroBatcher(process, max_items=4)
        results = await asyncio.gather(*(batcher.submit(i) for i in range(6)))
        failed = await asyncio.gather(batcher.submit(-1), batcher.submit(5), return_exceptions=True)
        batcher.close()
        return list(results), failed

    results, failed = asyncio.run(main())
    assert results == [0, 10, 20, 30, 40, 50]
    assert seen[:2] == [4, 2]  # six submissions of one turn: batches of at most 4
    assert all(isinstance(f, ValueError) for f in failed)


def test_loaded_model_scores_like_a_numpy_forward_pass(tmp_path: Path) -> None:
    import torch
    from safetensors.numpy import load_file

    from mlops_model import ExportedModelError, build_tabular_mlp, save_exported

    arch = {"input_dim": 5, "hidden_sizes": [4], "dropout": 0.0}
    encoder = {"version": 1, "input_dim": 5, "derived": [], "categorical": [],
               "numeric": [{"name": f"f{i}", "log": False, "mean": 0.0, "std": 1.0} for i in range(5)]}
    torch.manual_seed(0)
    folder = save_exported(tmp_path / "m", build_tabular_mlp(arch).state_dict(),
                           {"kind": "tabular_mlp", "architecture": arch,
                            "features": {"feature_service": "fraud_v1", "encoder": encoder}})
    model = load_model(ModelRef("fraud", "1", folder))
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    w = load_file(str(folder / "model.safetensors"))
    h = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]
    np.testing.assert_allclose(model.model.score_encoded(x), 1 / (1 + np.exp(-h.reshape(-1))), rtol=1e-5)
    records = [{f"f{i}": float(v) for i, v in enumerate(row)} for row in x]
    assert model.score_records(records).tobytes() == model.model.score_encoded(x).tobytes()
    with pytest.raises(ExportedModelError, match=r"expects \[n, 5\]"):
        model.model.score_encoded(x[:, :4])
    meta = json.loads((folder / "model.json").read_text())
    del meta["features"]
    (folder / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match=r"no features\.encoder"):
        load_model(ModelRef("fraud", "1", folder))


def test_since_accepts_timedelta_arithmetic(tmp_path: Path) -> None:
    writer = PredictionLogWriter(tmp_path, "fraud", flush_s=60)
    now = datetime.now(UTC)
    writer.append(_rows(1, (now - timedelta(hours=2)).timestamp()) + _rows(1, now.timestamp()))
    writer.flush()
    assert len(read_prediction_log(tmp_path, "fraud", since=now - timedelta(hours=1))) == 1


def test_serving_metrics_stay_in_memory_after_feast_turned_on_multiprocess_mode(tmp_path: Path) -> None:
    """feast.metrics sets PROMETHEUS_MULTIPROC_DIR at import (before prometheus_client loads, as when the server
    imports Feast first); our series must not become mmap'd files there. A fresh process: the import order counts."""
    import subprocess
    import sys

    script = """
import os, sys
from pathlib import Path
import feast.metrics
from mlops_serving.metrics import ServingMetrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
assert Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]) == Path(sys.argv[1])
metrics = ServingMetrics()
metrics.requests.labels("fraud", "1", "stable", "v1").inc()
metrics.request_latency.labels("fraud", "1", "stable").observe(0.002)
files = CollectorRegistry()
MultiProcessCollector(files, path=sys.argv[1])  # what the mmap'd files hold, read as another process would
print("in files:", b"mlops_serving" in generate_latest(files))
sys.stdout.write(metrics.exposition().decode())
"""
    env = {k: v for k, v in os.environ.items() if "MULTIPROC" not in k.upper()}
    env["PROMETHEUS_MULTIPROCESS_DIR"] = str(tmp_path)  # where feast.metrics points prometheus_client
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.splitlines()[0] == "in files: False"
    assert 'mlops_serving_requests_total{model="fraud",protocol="v1",variant="stable",version="1"} 1.0' in out
