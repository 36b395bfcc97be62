"""Training on the cluster: submit the overlay's Kubeflow Trainer ``TrainJob`` and wait for it.

The overlay (``infra/overlays/<env>``) holds the TrainJob as a suspended template. :func:`submit_trainjob`
renders the overlay with ``kubectl kustomize``, names a copy after the run (``<template>-<run id>``, which is
also its run name and checkpoint folder), unsuspends it, creates it, then polls its status until a
``Complete`` or ``Failed`` condition: the workflow step lives exactly as long as the job, prints its
progress, and on failure prints the pods' last log lines and exits non-zero.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlops_training.errors import TrainingError

log = logging.getLogger(__name__)

API_VERSION = "trainer.kubeflow.org/v1alpha1"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class TrainJobResult:
    """How a submitted TrainJob ended."""

    name: str
    namespace: str
    state: str
    reason: str
    message: str
    seconds: float


def kubectl_path() -> str:
    """``kubectl`` next to this Python (the repo's venv installs it), else on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    if found is None:
        raise TrainingError("kubectl is not installed (make setup puts it in .venv/bin); cannot submit a TrainJob")
    return found


def job_from_overlay(rendered: str, run_id: str, *, template: str | None = None) -> dict[str, Any]:
    """The overlay's TrainJob template, named ``<template>-<run_id>`` and unsuspended.

    Raises:
        TrainingError: the overlay holds no (or more than one unnamed) TrainJob, or the name is not a DNS label.
    """
    jobs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") == "TrainJob"
            and d.get("apiVersion") == API_VERSION]
    if template is not None:
        jobs = [d for d in jobs if d["metadata"]["name"] == template]
    if len(jobs) != 1:
        names = [d["metadata"]["name"] for d in jobs]
        raise TrainingError(f"expected one {API_VERSION} TrainJob template in the overlay, found {names!r}"
                            + ("" if template is None else f" named {template!r}"))
    job = copy.deepcopy(jobs[0])
    name = f"{job['metadata']['name']}-{run_id}".lower()
    if len(name) > 63 or not _NAME.match(name):
        raise TrainingError(f"TrainJob name {name!r} (template + run id {run_id!r}) is not a DNS label of at most "
                            "63 characters; pass a shorter --run-id of letters, digits and '-'")
    job["metadata"] = {k: v for k, v in job["metadata"].items() if k in ("namespace", "labels", "annotations")}
    job["metadata"]["name"] = name
    job["spec"]["suspend"] = False
    return job


def job_state(status: dict[str, Any]) -> tuple[str, str, str]:
    """``(state, reason, message)`` from a TrainJob's status: ``Complete`` / ``Failed`` once a condition of
    that type is True, else ``Running`` (with the newest condition's reason, if any)."""
    conditions = status.get("conditions") or []
    for kind in ("Failed", "Complete"):
        for cond in conditions:
            if cond.get("type") == kind and cond.get("status") == "True":
                return kind, str(cond.get("reason", "")), str(cond.get("message", ""))
    last = conditions[-1] if conditions else {}
    return "Running", str(last.get("reason", "")), str(last.get("message", ""))


def _run(cmd: list[str], stdin: str | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise TrainingError(f"`{' '.join(cmd[:4])} …` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def submit_trainjob(
    overlay: Path, run_id: str, *, timeout_s: float = 3 * 3600, poll_s: float = 15.0, template: str | None = None,
    kubectl: str | None = None, echo: Callable[[str], None] = print, log_lines: int = 200,
) -> TrainJobResult:
    """Render ``overlay``, create the named TrainJob, and wait until it completes or fails.

    Raises:
        TrainingError: the job failed (its condition's reason and message, after the pods' last log lines were
            echoed), or did not finish within ``timeout_s``, or kubectl failed.
    """
    kubectl = kubectl or kubectl_path()
    job = job_from_overlay(_run([kubectl, "kustomize", str(overlay)]), run_id, template=template)
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    _run([kubectl, "create", "-f", "-"], stdin=json.dumps(job))
    echo(f"created TrainJob {namespace}/{name} ({job['spec']['trainer'].get('numNodes', '?')} nodes)")
    start, seen = time.monotonic(), ""
    while True:
        status = json.loads(_run([kubectl, "get", "trainjob", name, "-n", namespace, "-o", "json"])).get("status", {})
        state, reason, message = job_state(status)
        line = f"{state} {reason} {message}".strip()
        if line != seen:
            echo(f"TrainJob {name}: {line}")
            seen = line
        if state != "Running":
            break
        if time.monotonic() - start > timeout_s:
            _echo_logs(kubectl, name, namespace, echo, log_lines)
            raise TrainingError(f"TrainJob {namespace}/{name} did not finish within {timeout_s:.0f}s (last: {line}); "
                                f"it keeps running: `kubectl delete trainjob {name} -n {namespace}` to stop it")
        time.sleep(poll_s)
    seconds = time.monotonic() - start
    if state == "Failed":
        _echo_logs(kubectl, name, namespace, echo, log_lines)
        raise TrainingError(f"TrainJob {namespace}/{name} failed: {reason}: {message}")
    return TrainJobResult(name, namespace, state, reason, message, seconds)


def _echo_logs(kubectl: str, name: str, namespace: str, echo: Callable[[str], None], lines: int) -> None:
    try:
        echo(_run([kubectl, "logs", "-n", namespace, "-l", f"{JOBSET_LABEL}={name}", "--all-containers",
                   "--prefix", f"--tail={lines}"]))
    except TrainingError as exc:  # the failure itself is what matters; missing logs are only reported
        echo(f"(no logs of {name}: {exc})")


__all__ = ["TrainJobResult", "job_from_overlay", "job_state", "kubectl_path", "submit_trainjob"]
