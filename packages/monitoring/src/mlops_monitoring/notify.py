"""Delivering alerts: fire, re-fire, resolve, and never lose one to a failed POST.

Two body formats (``monitoring.webhook_format``):

- ``alertmanager``: Alertmanager's ``POST /api/v2/alerts`` takes a JSON *array* of
  ``{labels, annotations, startsAt, endsAt, generatorURL}``. Alertmanager identifies an alert by its
  labels, so a condition keeps one label set (``alertname``, ``model``, ``severity``) from run to run;
  a firing alert's ``endsAt`` lies ``alert_valid_s`` ahead and a resolve sends the same labels with
  ``endsAt`` = now.
- ``json``: one object per message for any other receiver: the alert's fields plus ``status``
  (``firing`` | ``resolved``), ``labels``, ``startsAt`` and ``endsAt``.

A small state file per model (``monitoring.alert_state_file`` under ``project.state_dir``) holds the
alert firing now, so a later run at a lower level can resolve it, and an *outbox*: messages whose
delivery failed, re-sent in order before anything new. It is replaced atomically (temporary file,
fsync, rename), so a crash mid-write leaves the previous state, never a torn one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mlops_config import MonitoringConfig
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError
from mlops_monitoring.policy import Level
from mlops_monitoring.webhook import post_json

log = logging.getLogger(__name__)

ALERT_NAME = "ModelDriftMonitor"


@dataclass
class AlertState:
    """What the state file holds: the alert firing now (``None``: none) and undelivered messages."""

    active: dict[str, Any] | None = None
    """``{"labels": {...}, "startsAt": iso, "level": LEVEL}`` of the alert firing now."""
    outbox: list[dict[str, Any]] = field(default_factory=list)
    """Messages ``{"url", "format", "kind", "body", "created", "error"}`` not yet delivered, oldest first."""

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON."""
        return {"active": self.active, "outbox": list(self.outbox)}


def state_path(state_dir: Path, monitoring: MonitoringConfig, model: str) -> Path:
    """Where the alert state of ``model`` lives."""
    return state_dir / monitoring.alert_state_file.format(model=model)


def load_state(path: Path) -> AlertState:
    """Read the state file (an empty state when there is none).

    Raises:
        MonitoringError: the file exists but is not a state file (it is left in place for a person to read).
    """
    if not path.is_file():
        return AlertState()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return AlertState(active=data.get("active"), outbox=list(data.get("outbox") or []))
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise MonitoringError(f"alert state {str(path)!r} is unreadable ({exc}); move it aside to start afresh, "
                              "after re-sending what its outbox holds") from None


def save_state(path: Path, state: AlertState) -> None:
    """Replace the state file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state.to_dict(), fh, indent=2, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_labels(model: str, level: str) -> dict[str, str]:
    """The label set that identifies the alert of ``model`` at ``level`` in Alertmanager."""
    return {"alertname": ALERT_NAME, "model": model, "severity": level.lower()}


def _message(monitoring: MonitoringConfig, kind: str, body: Any, now: datetime) -> dict[str, Any]:
    assert monitoring.webhook_url is not None
    return {"url": monitoring.webhook_url, "format": monitoring.webhook_format, "kind": kind, "body": body,
            "created": _iso(now)}


def firing_message(monitoring: MonitoringConfig, alert: dict[str, Any], starts: datetime, now: datetime,
                   generator_url: str = "") -> dict[str, Any]:
    """The message that (re-)fires ``alert`` (an ``Alert.to_dict()``), in the configured format."""
    labels = alert_labels(alert["model"], alert["level"])
    ends = now + timedelta(seconds=monitoring.alert_valid_s)
    if monitoring.webhook_format == "alertmanager":
        reasons = "; ".join(alert.get("reasons") or [])
        annotations = {"summary": f"{alert['level']} drift of model {alert['model']}",
                       "description": reasons[:4000], "window": json.dumps(alert.get("window") or {}, default=str)}
        if alert.get("report_path"):
            annotations["report"] = str(alert["report_path"])
        body: Any = [{"labels": labels, "annotations": annotations, "startsAt": _iso(starts), "endsAt": _iso(ends),
                      "generatorURL": generator_url}]
    else:
        body = {**alert, "status": "firing", "labels": labels, "startsAt": _iso(starts), "endsAt": _iso(ends)}
    return _message(monitoring, "firing", body, now)


def resolve_message(monitoring: MonitoringConfig, active: dict[str, Any], now: datetime,
                    generator_url: str = "") -> dict[str, Any]:
    """The message that resolves the alert ``active`` (from the state file): same labels, ``endsAt`` = now."""
    labels = dict(active["labels"])
    if monitoring.webhook_format == "alertmanager":
        body: Any = [{"labels": labels, "annotations": {"summary": f"resolved: {labels.get('model')}"},
                      "startsAt": active["startsAt"], "endsAt": _iso(now), "generatorURL": generator_url}]
    else:
        body = {"model": labels.get("model"), "level": active.get("level"), "status": "resolved", "labels": labels,
                "startsAt": active["startsAt"], "endsAt": _iso(now)}
    return _message(monitoring, "resolved", body, now)


@dataclass(frozen=True)
class Delivery:
    """One message's fate."""

    kind: str
    url: str
    ok: bool
    detail: str
    status: int | None = None


def plan_messages(state: AlertState, alert: dict[str, Any], monitoring: MonitoringConfig, now: datetime,
                  generator_url: str = "") -> list[dict[str, Any]]:
    """New messages for this run's ``alert`` given what fires now; updates ``state.active`` to match.

    WARNING or CRITICAL fires (keeping ``startsAt`` while the label set is unchanged, resolving the
    previous label set when the level changed); a lower level resolves what fires.
    """
    messages: list[dict[str, Any]] = []
    active = state.active
    if Level(alert["level"]).rank >= Level.WARNING.rank:
        labels = alert_labels(alert["model"], alert["level"])
        same = active is not None and active.get("labels") == labels
        if active is not None and not same:
            messages.append(resolve_message(monitoring, active, now, generator_url))
        starts = datetime.fromisoformat(active["startsAt"].replace("Z", "+00:00")) if same and active else now
        messages.append(firing_message(monitoring, alert, starts, now, generator_url))
        state.active = {"labels": labels, "startsAt": _iso(starts), "level": alert["level"]}
    elif active is not None:
        messages.append(resolve_message(monitoring, active, now, generator_url))
        state.active = None
    return messages


def send(messages: list[dict[str, Any]], monitoring: MonitoringConfig) -> tuple[list[Delivery], list[dict[str, Any]]]:
    """POST ``messages`` in order to the receiver configured *now*; stop at the first failure. Returns the
    outcomes and the undelivered rest.

    A queued message keeps the URL it was planned with only as a record: the bearer token goes with the current
    ``webhook_url`` (a receiver that moved, or an old http:// one, never gets it), and ``webhook_https_only`` is
    checked here too, since a config built in code is not always validated at load."""
    done: list[Delivery] = []
    url = monitoring.webhook_url or ""
    for i, message in enumerate(messages):
        try:
            if monitoring.webhook_https_only and not url.startswith("https://"):
                raise AlertDeliveryError(f"webhook {url!r} is not https:// but webhook_https_only is true; "
                                         "nothing was sent (the bearer token never travels in clear)", url=url)
            status = post_json(url, message["body"], token_env=monitoring.webhook_token_env,
                               timeout_s=monitoring.webhook_timeout_s)
        except AlertDeliveryError as exc:
            log.error("%s alert not delivered: %s", message["kind"], exc)
            done.append(Delivery(message["kind"], url, False, str(exc), exc.status))
            rest = [{**m, "error": str(exc)} if j == 0 else m for j, m in enumerate(messages[i:])]
            return done, rest
        done.append(Delivery(message["kind"], url, True, f"HTTP {status}", status))
    return done, []


def notify(alert: dict[str, Any], monitoring: MonitoringConfig, path: Path, *, now: datetime | None = None,
           generator_url: str = "") -> list[Delivery]:
    """Deliver what this run's ``alert`` calls for, after whatever earlier runs could not deliver.

    Args:
        alert: ``Alert.to_dict()`` of this run (its ``level`` decides fire / resolve / nothing).
        monitoring: ``webhook_url``, ``webhook_format``, token, timeout, ``alert_valid_s``.
        path: The model's alert state file (see :func:`state_path`).
        now: The run's time (default: now, UTC).
        generator_url: Where the alert came from (Alertmanager's ``generatorURL``).

    Returns:
        One :class:`Delivery` per message attempted (outbox first); a failed one ends the attempt and it and
        every later message stay in the outbox for the next run.
    """
    now = now or datetime.now(UTC)
    if not monitoring.webhook_url:
        return []
    state = load_state(path)
    messages = [*state.outbox, *plan_messages(state, alert, monitoring, now, generator_url)]
    if not messages:
        return []
    done, rest = send(messages, monitoring)
    state.outbox = rest
    save_state(path, state)
    if rest:
        log.error("%d alert message(s) kept in %s for the next run", len(rest), path)
    return done
