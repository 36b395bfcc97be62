"""Our Prometheus rules as a plain rule file, for a Prometheus outside Kubernetes and for ``promtool``.

In a cluster the rules ship as a ``PrometheusRule`` (``infra/base/monitoring/prometheus-rules.yaml``) that
the Prometheus operator loads; its ``spec`` is exactly a Prometheus rule file (``groups: [...]``). A
Prometheus started as a plain process (the rehearsal) and ``promtool check|test rules`` read that file
format, so it is written from the one source, never kept as a second copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlops_monitoring.errors import MonitoringError

RULES_MANIFEST = "infra/base/monitoring/prometheus-rules.yaml"
"""The ``PrometheusRule`` holding the serving and drift alerts, relative to the repository root."""


def rule_groups(manifest: Path) -> dict[str, Any]:
    """The ``spec`` (``{"groups": [...]}``) of the ``PrometheusRule`` at ``manifest``.

    Raises:
        MonitoringError: the file is missing or is not a PrometheusRule with rule groups.
    """
    if not manifest.is_file():
        raise MonitoringError(f"Prometheus rules {str(manifest)!r} do not exist")
    doc = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or kind != "PrometheusRule":
        raise MonitoringError(f"{str(manifest)!r} is not a PrometheusRule (kind {kind!r})")
    spec = doc.get("spec") or {}
    if not isinstance(spec.get("groups"), list) or not spec["groups"]:
        raise MonitoringError(f"{str(manifest)!r} has no spec.groups")
    return {"groups": spec["groups"]}


def write_rule_file(manifest: Path, out: Path) -> Path:
    """Write the rule groups of the ``PrometheusRule`` at ``manifest`` as a plain Prometheus rule file ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(rule_groups(manifest), sort_keys=False, width=4096), encoding="utf-8")
    return out
