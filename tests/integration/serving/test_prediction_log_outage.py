"""A prediction-log store that fails while the real server answers: every row still reaches the store once it
is back, the failures show in /metrics, and nothing is counted as dropped."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration


def _counter(text: str, name: str) -> float:
    match = re.search(rf'^{name}_total{{model="fraud"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def test_rows_survive_a_store_outage(tmp_path: Path, kit: Any, redis_features: Any) -> None:
    from mlops_serving import read_prediction_log

    store = tmp_path / "predlog"
    store.write_text("the mount is missing")  # a file where the store's folder should be: every write fails
    srv = kit.start_server(kit.make_app(tmp_path, redis_features), store)
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as client:
            for i in range(20):
                r = client.post("/v1/models/fraud:predict", json={"instances": [kit.instance(i)]})
                assert r.status_code == 200, r.text
            deadline = time.monotonic() + 10
            while _counter(client.get("/metrics").text, "mlops_serving_prediction_log_flush_failures") < 2:
                assert time.monotonic() < deadline, "no failed flush was counted"
                time.sleep(0.1)
            store.unlink()  # the store is back
            deadline = time.monotonic() + 10
            while _counter(client.get("/metrics").text, "mlops_serving_prediction_log_rows") < 20:
                assert time.monotonic() < deadline, "the held rows were not written after the store came back"
                time.sleep(0.1)
            metrics = client.get("/metrics").text
    finally:
        srv.stop()
    assert _counter(metrics, "mlops_serving_prediction_log_dropped") == 0
    frame = read_prediction_log(store, "fraud")
    assert sorted(frame["transaction_id"], key=lambda t: int(t[1:])) == [f"t{i}" for i in range(20)]
