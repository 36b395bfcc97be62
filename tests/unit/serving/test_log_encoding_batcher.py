"""Prediction log round trip and loss bound, encoder fast path parity, micro-batching, model loading."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_serving import read_prediction_log
from mlops_serving.batcher import MicroBatcher
from mlops_serving.encoding import RecordEncoder, compile_encoder, probe_rows
from mlops_serving.errors import ModelLoadError
from mlops_serving.prediction_log import PredictionLogWriter, log_rows
from mlops_serving.predictor import ModelRef, load_model


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
    assert time.perf_counter() - started < 0.5
    assert dropped == [3]
    assert writer.flush() == 5


def _spec() -> dict[str, Any]:
    return {"version": 1, "input_dim": 2 + 1 + 3 + 2,
            "numeric": [{"name": "amount", "log": True, "mean": 1.0, "std": 2.0},
                        {"name": "count", "log": False, "mean": 3.0, "std": 0.5}],
            "derived": [{"name": "ratio", "op": "log_ratio", "args": ["amount", "count"], "mean": 0.1, "std": 1.5}],
            "categorical": [{"name": "currency", "vocab": ["EUR", "USD"]}, {"name": "device", "vocab": ["ios"]}]}


def test_record_encoder_matches_hand_arithmetic() -> None:
    x = RecordEncoder(_spec())([{"amount": 9.0, "count": 4, "currency": "USD", "device": "web"},
                                {"amount": None, "count": None, "currency": None, "device": "ios"}])
    log9 = np.log1p(9.0)
    want0 = [(log9 - 1.0) / 2.0, (4 - 3.0) / 0.5, (np.log(10.0 / 5.0) - 0.1) / 1.5, 0, 1, 0, 0, 1]
    want1 = [0.0, 0.0, 0.0, 0, 0, 1, 1, 0]  # missing → 0 after scaling; None → the "other" slot
    np.testing.assert_allclose(x, np.array([want0, want1], dtype=np.float32), rtol=1e-6)


def test_compile_encoder_uses_fast_path_only_when_it_matches() -> None:
    from mlops_features import encode

    spec = _spec()
    fast = compile_encoder(spec, encode)
    assert isinstance(fast, RecordEncoder)
    probes = probe_rows(spec)
    np.testing.assert_array_equal(fast(probes), encode(pd.DataFrame(probes), spec))

    def different(df: pd.DataFrame, enc: dict[str, Any]) -> np.ndarray:
        return encode(df, enc) + 1.0

    assert not isinstance(compile_encoder(spec, different), RecordEncoder)
    assert not isinstance(compile_encoder({**spec, "version": 2}, encode), RecordEncoder)


def test_batcher_coalesces_concurrent_requests_and_spreads_errors() -> None:
    seen: list[int] = []

    def process(items: list[int]) -> list[int]:
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

    from mlops_core.exported import build_tabular_mlp, save_exported

    arch = {"input_dim": 5, "hidden_sizes": [4], "dropout": 0.0}
    torch.manual_seed(0)
    folder = save_exported(tmp_path / "m", build_tabular_mlp(arch).state_dict(),
                           {"kind": "tabular_mlp", "architecture": arch,
                            "features": {"feature_service": "fraud_v1", "encoder": {"input_dim": 5}}})
    model = load_model(ModelRef("fraud", "1", folder))
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    w = load_file(str(folder / "model.safetensors"))
    h = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]
    np.testing.assert_allclose(model.score(x), 1 / (1 + np.exp(-h.reshape(-1))), rtol=1e-5)
    with pytest.raises(ValueError, match=r"expects \[n, 5\]"):
        model.score(x[:, :4])
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
