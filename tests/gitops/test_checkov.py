"""checkov, from its own venv (`make checkov-setup`), on the rendered manifests, the service Dockerfiles and
the workflows: zero failed checks, and every skipped check carries its reason next to the resource."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKOV_BIN = REPO / ".venv" / "tools" / "checkov" / "bin"


def run_checkov(target: Path, framework: str, kit: Any) -> dict[str, Any]:
    checkov = kit.tool("checkov", CHECKOV_BIN)  # fails (does not skip) when `make checkov-setup` did not run
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
           "LOG_LEVEL": "WARNING"}
    proc = subprocess.run([checkov, "-d", str(target), "--framework", framework, "-o", "json", "--skip-download"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.stdout.strip(), f"checkov printed nothing (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert len(reports) == 1 and reports[0]["check_type"] == framework, [r.get("check_type") for r in reports]
    return dict(reports[0])


# rendered targets scanned together; the cluster runtime and the Argo CD bootstrap hold no pod of their own
KUBERNETES_TARGETS = {"staging": ("staging",), "production": ("production",), "platform": ("platform",),
                      "bootstrap": ("cluster", "argocd")}


@pytest.fixture(scope="module", params=[*(f"kubernetes:{t}" for t in KUBERNETES_TARGETS), "dockerfile",
                                        "github_actions"])
def report(request: pytest.FixtureRequest, rendered_dir: Path, kit: Any,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    framework, _, target_name = str(request.param).partition(":")
    if framework == "kubernetes":
        # one rendered target per run: checkov's graph joins a NetworkPolicy to pods by labels across
        # namespaces, so the platform's catch-all policy would hide an overlay pod that has none (CKV2_K8S_6)
        target = tmp_path_factory.mktemp(f"checkov-{target_name}")
        for name in KUBERNETES_TARGETS[target_name]:
            (target / f"{name}.yaml").write_text((rendered_dir / f"{name}.yaml").read_text())
    else:
        target = {"dockerfile": REPO / "services", "github_actions": REPO / ".github" / "workflows"}[framework]
    return {**run_checkov(target, framework, kit), "target": request.param}


def test_checkov_finds_zero_failed_checks(report: dict[str, Any]) -> None:
    summary = report["summary"]
    failed = [f"{c['check_id']} {c['check_name']} on {c['resource']} ({c['file_path']})"
              for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, "\n".join(failed)
    assert summary["parsing_errors"] == 0
    assert summary["passed"] >= (1 if report["target"] == "kubernetes:bootstrap" else 100), summary
    if report["target"] in ("kubernetes:staging", "kubernetes:production", "kubernetes:platform"):
        # the graph checks ran: every pod of the target was joined to a NetworkPolicy of its own
        graph = [c for c in report["results"]["passed_checks"] if c["check_id"] == "CKV2_K8S_6"]
        assert len(graph) >= 3, f"CKV2_K8S_6 did not run on {report['target']}: {len(graph)} results"


def test_every_skip_is_documented_with_a_reason(report: dict[str, Any]) -> None:
    for check in report["results"]["skipped_checks"]:
        reason = (check["check_result"].get("suppress_comment") or "").strip()
        where = f"{check['check_id']} on {check['resource']}"
        assert len(reason) >= 30, f"{where} is skipped without a real reason: {reason!r}"
