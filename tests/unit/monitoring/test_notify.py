"""The alert state machine: fire, keep startsAt while the label set holds, resolve what a lower level ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mlops_config import MonitoringConfig
from mlops_monitoring import MonitoringError
from mlops_monitoring.notify import AlertState, load_state, plan_messages, save_state

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
AM = MonitoringConfig(webhook_url="http://127.0.0.1:9/api/v2/alerts", webhook_format="alertmanager")


def _alert(level: str) -> dict:
    return {"model": "fraud", "level": level, "reasons": [f"{level}: amount PSI 0.3"], "window": {"rows": 10},
            "evidence": {}, "quality": None, "report_path": None}


def test_critical_twice_keeps_one_alert_with_its_first_start() -> None:
    state = AlertState()
    [first] = plan_messages(state, _alert("CRITICAL"), AM, T0)
    [again] = plan_messages(state, _alert("CRITICAL"), AM, T0 + timedelta(hours=1))
    assert first["kind"] == again["kind"] == "firing"
    assert first["body"][0]["startsAt"] == again["body"][0]["startsAt"] == "2026-12-01T08:00:00.000Z"
    assert again["body"][0]["endsAt"] == "2026-12-01T11:00:00.000Z"  # 1 h later + alert_valid_s (2 h)
    assert first["body"][0]["labels"] == {"alertname": "ModelDriftMonitor", "model": "fraud", "severity": "critical"}


def test_a_lower_level_resolves_the_old_label_set_first() -> None:
    state = AlertState()
    plan_messages(state, _alert("CRITICAL"), AM, T0)
    resolved, fired = plan_messages(state, _alert("WARNING"), AM, T0 + timedelta(minutes=30))
    assert resolved["kind"] == "resolved" and resolved["body"][0]["labels"]["severity"] == "critical"
    assert resolved["body"][0]["endsAt"] == "2026-12-01T08:30:00.000Z"
    assert fired["kind"] == "firing" and fired["body"][0]["labels"]["severity"] == "warning"
    assert fired["body"][0]["startsAt"] == "2026-12-01T08:30:00.000Z"
    [ended] = plan_messages(state, _alert("INFO"), AM, T0 + timedelta(hours=1))
    assert ended["kind"] == "resolved" and state.active is None
    assert plan_messages(state, _alert("OK"), AM, T0 + timedelta(hours=2)) == []


def test_json_format_sends_one_object_with_a_status() -> None:
    cfg = AM.model_copy(update={"webhook_format": "json"})
    state = AlertState()
    [fired] = plan_messages(state, _alert("WARNING"), cfg, T0)
    assert isinstance(fired["body"], dict) and fired["body"]["status"] == "firing"
    assert fired["body"]["level"] == "WARNING" and fired["body"]["reasons"] == ["WARNING: amount PSI 0.3"]
    [resolved] = plan_messages(state, _alert("OK"), cfg, T0 + timedelta(hours=1))
    assert resolved["body"]["status"] == "resolved" and resolved["body"]["level"] == "WARNING"


def test_state_round_trips_and_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "monitoring" / "alerts-fraud.json"
    assert load_state(path) == AlertState()
    state = AlertState(active={"labels": {"a": "b"}, "startsAt": "x", "level": "WARNING"}, outbox=[{"kind": "firing"}])
    save_state(path, state)
    assert load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["alerts-fraud.json"]  # no temporary file left
    path.write_text("{not json")
    with pytest.raises(MonitoringError, match=r"alerts-fraud\.json.*unreadable"):
        load_state(path)


def test_https_only_names_the_bad_url() -> None:
    with pytest.raises(ValueError, match=r"webhook_url 'http://am:9093/api/v2/alerts' is not https://"):
        MonitoringConfig(webhook_url="http://am:9093/api/v2/alerts", webhook_https_only=True)
    assert MonitoringConfig(webhook_url="https://am:9093/api/v2/alerts", webhook_https_only=True).webhook_url
