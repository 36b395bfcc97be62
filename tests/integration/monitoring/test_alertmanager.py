"""Alerts reach a real Alertmanager in its v2 format, resolve when the level drops, and survive a failed POST.

Alertmanager (Debian's ``prometheus-alertmanager``) runs as a process on a free port; what it holds is
read back through its own API (``GET /api/v2/alerts``). The delivery-failure test uses a real HTTP
receiver that answers 503 first and records what it gets once it recovers.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops_config import MonitoringConfig, PlatformConfig, ProjectConfig, ServingConfig, TrackingConfig
from mlops_features.sample import generate_transactions
from mlops_model import DEFAULT_CONTRACT
from mlops_monitoring import MonitorRun, run_monitor

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _rows(tmp: Path, seed: int, drift: str, n: int) -> pd.DataFrame:
    paths = generate_transactions(tmp / f"{drift}-{seed}", rows=n, days=1, seed=seed, drift=drift)
    df = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    z = 0.8 * (np.log(df["amount"].to_numpy()) - 4.0)
    return df.assign(score=1 / (1 + np.exp(-(z - 3.0))))


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A reference, a clean batch (OK/INFO), a category-drifted one (WARNING) and a covariate one (CRITICAL)."""
    tmp = tmp_path_factory.mktemp("batches")
    out = {}
    for name, seed, drift, n in (("reference", 1, "none", 20_000), ("clean", 2, "none", 3000),
                                 ("warning", 4, "category", 3000), ("critical", 5, "covariate", 3000)):
        out[name] = tmp / f"{name}.parquet"
        _rows(tmp, seed, drift, n).to_parquet(out[name])
    return out


def _fraud_monitoring(**settings: Any) -> MonitoringConfig:
    """Monitoring as the reference model resolves it: its contract's key features (amount's covariate drift is
    CRITICAL) and ids and label ignored."""
    return PlatformConfig(contract=DEFAULT_CONTRACT, monitoring=MonitoringConfig(**settings)).monitoring


def _alerts(am_url: str) -> list[dict]:
    response = httpx.get(f"{am_url}/api/v2/alerts", timeout=5)
    response.raise_for_status()
    return list(response.json())


def _run(root: Path, monitoring: MonitoringConfig, batches: dict[str, Path], which: str, now: datetime):
    return run_monitor(MonitorRun(monitoring, ServingConfig(prediction_log_uri="log"),
                       TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts"),
                       ProjectConfig(reports_dir="reports"), root, "fraud", current=batches[which],
                       reference=batches["reference"], dry_run=True, html=False, now=now, contract=DEFAULT_CONTRACT))


def test_critical_reaches_alertmanager_with_its_labels_and_is_resolved_when_the_level_drops(
        tmp_path: Path, alertmanager, batches: dict[str, Path]) -> None:
    monitoring = _fraud_monitoring(webhook_url=f"{alertmanager.url}/api/v2/alerts", webhook_format="alertmanager")
    now = datetime.now(UTC)
    first = _run(tmp_path, monitoring, batches, "critical", now)
    assert first.level == "CRITICAL"
    first.check()  # delivered: nothing to raise
    held = _alerts(alertmanager.url)
    assert len(held) == 1, held
    alert = held[0]
    assert alert["labels"] == {"alertname": "ModelDriftMonitor", "model": "fraud", "severity": "critical"}
    assert alert["status"]["state"] == "active"
    assert "amount PSI" in alert["annotations"]["description"]
    starts = datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00"))
    ends = datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00"))
    assert abs((ends - starts).total_seconds() - monitoring.alert_valid_s) < 2  # stays active between runs
    assert abs((starts - now).total_seconds()) < 2

    # the level drops: the same label set is resolved (endsAt now), and Alertmanager lists it no more
    second = _run(tmp_path, monitoring, batches, "clean", datetime.now(UTC))
    assert second.level in ("OK", "INFO"), second.reasons
    sent = [a for a in second.actions if a.action == "webhook"]
    assert [(a.ok, a.extra["kind"]) for a in sent] == [(True, "resolved")]
    assert _alerts(alertmanager.url) == []
    state = json.loads((tmp_path / ".mlops/monitoring/alerts-fraud.json").read_text())
    assert state == {"active": None, "outbox": []}


def test_a_level_change_resolves_the_old_label_set_and_fires_the_new_one(
        tmp_path: Path, alertmanager, batches: dict[str, Path]) -> None:
    monitoring = _fraud_monitoring(webhook_url=f"{alertmanager.url}/api/v2/alerts", webhook_format="alertmanager")
    assert _run(tmp_path, monitoring, batches, "critical", datetime.now(UTC)).level == "CRITICAL"
    assert _run(tmp_path, monitoring, batches, "warning", datetime.now(UTC)).level == "WARNING"
    assert [a["labels"]["severity"] for a in _alerts(alertmanager.url)] == ["warning"]


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 while ``down``; afterwards 200, recording every body."""

    state: dict = {}  # noqa: RUF012 - replaced per server below

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.state["down"]:
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"receiver overloaded")
            return
        self.state["received"].append(body)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[tuple[str, dict]]:
    handler = type("Flaky", (_Flaky,), {"state": {"down": True, "received": []}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v2/alerts", handler.state
    server.shutdown()
    server.server_close()


def test_failed_delivery_exits_non_zero_naming_url_and_status_and_the_alert_is_resent_next_run(
        config_dir: Path, flaky: tuple[str, dict], batches: dict[str, Path]) -> None:
    from mlops_cli.app import app

    url, state = flaky
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir)}
    args = ["monitor", "run", "--reference", str(batches["reference"]), "--no-html", "--dry-run",
            "--set", f"monitoring.webhook_url={url}", "--set", "monitoring.webhook_format=alertmanager"]
    runner = CliRunner()
    failed = runner.invoke(app, [*args, "--current", str(batches["critical"])], env=env)
    assert failed.exit_code == 1, failed.output
    assert f"not delivered to {url!r}" in failed.stderr and "HTTP 503" in failed.stderr
    outbox = config_dir.parent / ".mlops/monitoring/alerts-fraud.json"
    kept = json.loads(outbox.read_text())["outbox"]
    assert [m["kind"] for m in kept] == ["firing"] and kept[0]["body"][0]["labels"]["severity"] == "critical"
    assert state["received"] == []

    state["down"] = False  # the receiver is back: the kept alert goes first, then this run's resolve
    ok = runner.invoke(app, [*args, "--current", str(batches["clean"])], env=env)
    assert ok.exit_code == 0, ok.output
    assert len(state["received"]) == 2
    fired, resolved = state["received"]
    assert fired == kept[0]["body"]
    assert resolved[0]["labels"] == fired[0]["labels"] and resolved[0]["startsAt"] == fired[0]["startsAt"]
    assert resolved[0]["endsAt"] < fired[0]["endsAt"]
    assert json.loads(outbox.read_text())["outbox"] == []
