"""Shadow traffic with real servers: a transformer in front of a live predictor process mirrors requests to a
candidate predictor process (or to a candidate that errors, hangs or is down).

The live answer must be the one a transformer without shadow gives, byte for byte; mirrored answers land in the
shadow log under the live request's id; a bad candidate never changes the answer nor makes it wait.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

V1 = "/v1/models/fraud:predict"
REPO = Path(__file__).resolve().parents[3]


def until(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


class PredictorProcess:
    """``mlops serve --role predictor`` on a free port, as the InferenceService's predictor runs it."""

    def __init__(self, folder: Path, version: str, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._err = log.open("w")
        cmd = [str(Path(sys.executable).with_name("mlops")), "serve", "--model", "fraud", "--role", "predictor",
               "--model-dir", str(folder), "--model-version", version, "--port", str(port)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ}, stdout=subprocess.DEVNULL, stderr=self._err)
        self._log = log
        if not until(self._ready, 120):
            self.stop()
            raise RuntimeError(f"predictor {version} not ready: {log.read_text()[-2000:]}")

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._err.close()


@pytest.fixture(scope="module")
def predictors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The live predictor (version 3) and the candidate (version 4, other weights) as processes."""
    kit = _conftest()
    export_model, free_port = kit.export_model, kit.free_port
    tmp = tmp_path_factory.mktemp("shadow-predictors")
    live_dir = export_model(tmp / "models" / "3", seed=3)
    cand_dir = export_model(tmp / "models" / "4", seed=4, hidden=(12,))
    # signed as training signs them: the predictors (cwd REPO, local profile) verify with the repo's local pair
    from mlops_config import load_config
    from mlops_model import model_signer

    signer = model_signer(load_config(config_dir=REPO / "configs").config.provenance, REPO)
    signer(live_dir)
    signer(cand_dir)
    live = PredictorProcess(live_dir, "3", free_port(), tmp / "live.err")
    try:
        cand = PredictorProcess(cand_dir, "4", free_port(), tmp / "candidate.err")
    except BaseException:
        live.stop()
        raise
    yield {"live": live, "candidate": cand, "live_dir": live_dir, "candidate_dir": cand_dir}
    cand.stop()
    live.stop()


def _conftest() -> Any:
    """This folder's conftest as a module (not importable by name under --import-mode=importlib)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("serving_conftest", Path(__file__).with_name("conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up by name
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def transformer(kit: Any, tmp: Path, source: Any, predictor_url: str, **shadow: Any) -> Any:
    from mlops_serving.remote import remote_loader
    from mlops_serving.service import create_app

    cfg = kit.serving_config(tabular={"role": "transformer", **({"shadow": shadow} if shadow else {})})
    app = create_app(cfg, model_name="fraud", loader=remote_loader(predictor_url.removeprefix("http://"), "fraud"),
                     source=source, log_dir=tmp / "predlog")
    return kit.start_server(app, tmp / "predlog")


def ask(url: str, i: int, kit: Any) -> tuple[dict[str, Any], float]:
    body = {"instances": [kit.instance(i), kit.instance(i + 7)]}
    t0 = time.perf_counter()
    r = httpx.post(f"{url}{V1}", json=body, headers={"x-request-id": f"req-{i}"}, timeout=30)
    elapsed = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    return r.json(), elapsed


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus exposition (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_shadow_answers_are_logged_and_the_live_answer_is_unchanged(
        tmp_path: Path, kit: Any, redis_features: Any, predictors: dict[str, Any]) -> None:
    from mlops_serving import read_prediction_log, read_shadow_log

    n = 12
    plain = transformer(kit, tmp_path / "plain", redis_features, predictors["live"].url)
    shadowed = transformer(kit, tmp_path / "shadowed", redis_features, predictors["live"].url,
                           fraction=1.0, url=predictors["candidate"].url, timeout_s=5.0)
    try:
        for i in range(n):
            assert ask(shadowed.url, i, kit)[0] == ask(plain.url, i, kit)[0]  # the candidate never shows
        assert until(lambda: len(read_shadow_log(tmp_path / "shadowed" / "predlog", "fraud")) == 2 * n)
        text = httpx.get(f"{shadowed.url}/metrics").text
    finally:
        shadowed.stop()
        plain.stop()
    assert metric(text, "mlops_serving_shadow_mirrored_total", model="fraud") == n
    assert metric(text, "mlops_serving_shadow_answered_total", model="fraud", version="4") == n
    assert metric(text, "mlops_serving_shadow_seconds_count", model="fraud", version="4") == n

    shadow = read_shadow_log(tmp_path / "shadowed" / "predlog", "fraud")
    assert sorted(set(shadow["request_id"])) == sorted(f"req-{i}" for i in range(n))
    assert set(shadow["status"]) == {"ok"} and set(shadow["model_version"]) == {"4"}
    assert set(shadow["live_version"]) == {"3"} and (shadow["latency_ms"] > 0).all()
    # the live half of each shadow row is the prediction log's row of the same request and instance
    live = read_prediction_log(tmp_path / "shadowed" / "predlog", "fraud")
    live["instance"] = live.groupby("request_id").cumcount()
    joined = shadow.merge(live[["request_id", "instance", "score", "transaction_id"]],
                          on=["request_id", "instance"], suffixes=("", "_live"))
    assert len(joined) == 2 * n
    np.testing.assert_allclose(joined["live_score"], joined["score_live"], rtol=1e-6)
    assert (joined["transaction_id"] == joined["transaction_id_live"]).all()
    # the candidate's scores, by hand: its own weights over the same request + feature rows
    rows = [kit.instance(i) if k == 0 else kit.instance(i + 7) for i, k in
            zip(joined["request_id"].str.removeprefix("req-").astype(int), joined["instance"], strict=True)]
    merged = pd.DataFrame([{**r, **kit.USERS[r["user_id"]], **kit.MERCHANTS[r["merchant_id"]]} for r in rows])
    want = kit.numpy_score(predictors["candidate_dir"], kit.small_encode(merged, kit.small_encoder()))
    np.testing.assert_allclose(joined["score"], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(joined["score"], joined["live_score"])  # two models: the comparison means something


class _Erroring(BaseHTTPRequestHandler):
    """A candidate that tells its encoder, then fails every prediction with a 500."""

    encoder: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        self._answer(200, {"served_version": "9", "features": {"feature_service": "fraud_v1",
                                                               "encoder": self.encoder}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._answer(500, {"error": "boom"})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


class BadCandidate:
    """``errors``: a real HTTP server answering 500; ``hangs``: accepts and never answers; ``down``: no listener."""

    def __init__(self, kind: str, kit: Any) -> None:
        self.kind = kind
        self._held: list[socket.socket] = []
        self._server: ThreadingHTTPServer | None = None
        self._sock: socket.socket | None = None
        if kind == "errors":
            handler = type("Handler", (_Erroring,), {"encoder": kit.small_encoder()})
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
            self.port = self._server.server_address[1]
        elif kind == "hangs":
            self._sock = socket.socket()
            self._sock.bind(("127.0.0.1", 0))
            self._sock.listen(64)
            self.port = self._sock.getsockname()[1]
            threading.Thread(target=self._hold, daemon=True).start()
        else:
            self.port = kit.free_port()

    def _hold(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._sock is not None:
            self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.mark.parametrize(("kind", "status"), [("errors", "http_500"), ("hangs", "timeout"), ("down", "unreachable")])
def test_a_bad_candidate_never_changes_the_live_answer_or_its_latency(
        tmp_path: Path, kit: Any, redis_features: Any, predictors: dict[str, Any], kind: str, status: str) -> None:
    from mlops_serving import read_shadow_log

    n, timeout_s, queue_size = 30, 2.0, 4
    bad = BadCandidate(kind, kit)
    plain = transformer(kit, tmp_path / "plain", redis_features, predictors["live"].url)
    shadowed = transformer(kit, tmp_path / "shadowed", redis_features, predictors["live"].url, fraction=1.0,
                           url=f"127.0.0.1:{bad.port}", timeout_s=timeout_s, queue_size=queue_size)
    try:
        on, off = [], []
        started = time.monotonic()
        for i in range(n):
            got, t_on = ask(shadowed.url, i, kit)
            want, t_off = ask(plain.url, i, kit)
            assert got == want
            on.append(t_on)
            off.append(t_off)
        elapsed = time.monotonic() - started
        if kind != "hangs":  # every mirrored request answered (logged) before its counters are read
            assert until(lambda: len(read_shadow_log(tmp_path / "shadowed" / "predlog", "fraud")) == 2 * n)
        text = httpx.get(f"{shadowed.url}/metrics").text
    finally:
        shadowed.stop()
        plain.stop()
        bad.close()
    # the bound: no live request waited for the candidate (a wait would cost timeout_s each while it hangs)
    assert max(on) < timeout_s / 2, (kind, sorted(on)[-3:])
    assert np.median(on) < np.median(off) + 0.05, (kind, np.median(on), np.median(off))
    errors = metric(text, "mlops_serving_shadow_errors_total", model="fraud", type=status)
    mirrored = metric(text, "mlops_serving_shadow_mirrored_total", model="fraud")
    dropped = metric(text, "mlops_serving_shadow_dropped_total", model="fraud", reason="queue_full")
    assert mirrored + dropped == n
    if kind == "hangs":
        # each call to the candidate is held for timeout_s and carries at most what the queue held (queue_size):
        # at most calls * queue_size left the queue while the loop ran, queue_size waited, the rest was dropped
        calls = int(elapsed // timeout_s) + 1
        assert dropped >= n - queue_size - calls * queue_size and errors <= calls * queue_size, (dropped, errors)
        assert dropped > 0
    else:
        assert dropped == 0 and errors == n
        shadow = read_shadow_log(tmp_path / "shadowed" / "predlog", "fraud")
        assert set(shadow["status"]) == {status} and shadow["score"].isna().all()
        assert sorted(set(shadow["request_id"])) == sorted(f"req-{i}" for i in range(n))
