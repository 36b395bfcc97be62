"""Training on the cluster: submit the overlay's training job template and wait for it.

The overlay (``infra/overlays/<env>``) holds each model's training job as a suspended template: the tabular
model's Kubeflow Trainer ``TrainJob``, the language model's Kubeflow ``PyTorchJob`` (``runPolicy.suspend``), each
annotated ``mlops.platform/model: <model>``. :func:`submit_trainjob` renders the overlay with ``kubectl kustomize``,
picks the model's template, names a copy after the run (``<template>-<run id>``, which is also its run name and
checkpoint folder), unsuspends it, creates it, then polls its status until a ``Complete`` (``Succeeded``) or
``Failed`` condition: the workflow step lives exactly as long as the job, prints its progress, and on failure
prints the pods' last log lines and exits non-zero.
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
PYTORCHJOB_API = "kubeflow.org/v1"
PYTORCHJOB_LABEL = "training.kubeflow.org/job-name"
MODEL_ANNOTATION = "mlops.platform/model"
"""Names the model a training job template trains (``mlops train submit --model``)."""
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


def _is_template(doc: dict[str, Any]) -> bool:
    """A TrainJob (suspended by the overlay), or a PyTorchJob kept suspended as a template (a running one is not)."""
    if doc.get("kind") == "TrainJob" and doc.get("apiVersion") == API_VERSION:
        return True
    return (doc.get("kind") == "PyTorchJob" and doc.get("apiVersion") == PYTORCHJOB_API
            and ((doc.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True)


def _model_of(doc: dict[str, Any]) -> str | None:
    return (doc["metadata"].get("annotations") or {}).get(MODEL_ANNOTATION)


def job_from_overlay(rendered: str, run_id: str, *, template: str | None = None,
                     model: str | None = None) -> dict[str, Any]:
    """The overlay's training job template (of ``model``, by its ``mlops.platform/model`` annotation, when given),
    named ``<template>-<run_id>`` and unsuspended.

    Raises:
        TrainingError: the overlay holds no (or more than one) matching template, or the name is not a DNS label.
    """
    docs = [d for d in yaml.safe_load_all(rendered) if d and _is_template(d)]
    jobs = [d for d in docs if model is None or _model_of(d) == model]
    if template is not None:
        jobs = [d for d in jobs if d["metadata"]["name"] == template]
    if model is None:  # as before --model: the one TrainJob
        jobs = [d for d in jobs if d["kind"] == "TrainJob"]
    if len(jobs) != 1:
        names = [d["metadata"]["name"] for d in jobs]
        wanted = f"{API_VERSION} TrainJob" if model is None else f"training job ({MODEL_ANNOTATION}: {model})"
        found = {d["metadata"]["name"]: _model_of(d) for d in docs}
        raise TrainingError(f"expected one {wanted} template in the overlay, found {names!r}"
                            + ("" if template is None else f" named {template!r}")
                            + ("" if model is None else f"; templates and their models: {found!r} (is the "
                               "model's overlay switched on?)"))
    job = copy.deepcopy(jobs[0])
    name = f"{job['metadata']['name']}-{run_id}".lower()
    if len(name) > 63 or not _NAME.match(name):
        raise TrainingError(f"TrainJob name {name!r} (template + run id {run_id!r}) is not a DNS label of at most "
                            "63 characters; pass a shorter --run-id of letters, digits and '-'")
    job["metadata"] = {k: v for k, v in job["metadata"].items() if k in ("namespace", "labels", "annotations")}
    job["metadata"]["name"] = name
    if job["kind"] == "PyTorchJob":
        job["spec"]["runPolicy"]["suspend"] = False
    else:
        job["spec"]["suspend"] = False
    return job


def job_state(status: dict[str, Any]) -> tuple[str, str, str]:
    """``(state, reason, message)`` from a TrainJob's or PyTorchJob's status: ``Complete`` / ``Failed`` once a
    condition of that type (a PyTorchJob's ``Succeeded`` is ``Complete``) is True, else ``Running`` (with the newest
    condition's reason, if any)."""
    conditions = status.get("conditions") or []
    for kind in ("Failed", "Complete", "Succeeded"):
        for cond in conditions:
            if cond.get("type") == kind and cond.get("status") == "True":
                state = "Complete" if kind == "Succeeded" else kind
                return state, str(cond.get("reason", "")), str(cond.get("message", ""))
    last = conditions[-1] if conditions else {}
    return "Running", str(last.get("reason", "")), str(last.get("message", ""))


def _run(cmd: list[str], stdin: str | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise TrainingError(f"`{' '.join(cmd[:4])} …` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def submit_trainjob(
    overlay: Path, run_id: str, *, timeout_s: float = 3 * 3600, poll_s: float = 15.0, template: str | None = None,
    kubectl: str | None = None, echo: Callable[[str], None] = print, log_lines: int = 200, model: str | None = None,
) -> TrainJobResult:
    """Render ``overlay``, create the named training job (``model``'s template when given), and wait until it
    completes or fails.

    Raises:
        TrainingError: the job failed (its condition's reason and message, after the pods' last log lines were
            echoed), or did not finish within ``timeout_s``, or kubectl failed.
    """
    kubectl = kubectl or kubectl_path()
    job = job_from_overlay(_run([kubectl, "kustomize", str(overlay)]), run_id, template=template, model=model)
    name, namespace, kind = job["metadata"]["name"], job["metadata"].get("namespace", "default"), job["kind"]
    _run([kubectl, "create", "-f", "-"], stdin=json.dumps(job))
    nodes = (sum(int(r.get("replicas", 1)) for r in job["spec"]["pytorchReplicaSpecs"].values())
             if kind == "PyTorchJob" else job["spec"]["trainer"].get("numNodes", "?"))
    echo(f"created {kind} {namespace}/{name} ({nodes} nodes)")
    pods = PYTORCHJOB_LABEL if kind == "PyTorchJob" else JOBSET_LABEL
    start, seen = time.monotonic(), ""
    while True:
        status = json.loads(_run([kubectl, "get", kind.lower(), name, "-n", namespace, "-o", "json"])
                            ).get("status", {})
        state, reason, message = job_state(status)
        line = f"{state} {reason} {message}".strip()
        if line != seen:
            echo(f"{kind} {name}: {line}")
            seen = line
        if state != "Running":
            break
        if time.monotonic() - start > timeout_s:
            _echo_logs(kubectl, name, namespace, echo, log_lines, pods)
            raise TrainingError(f"{kind} {namespace}/{name} did not finish within {timeout_s:.0f}s (last: {line}); "
                                f"it keeps running: `kubectl delete {kind.lower()} {name} -n {namespace}` to stop it")
        time.sleep(poll_s)
    seconds = time.monotonic() - start
    if state == "Failed":
        _echo_logs(kubectl, name, namespace, echo, log_lines, pods)
        raise TrainingError(f"{kind} {namespace}/{name} failed: {reason}: {message}")
    return TrainJobResult(name, namespace, state, reason, message, seconds)


def _echo_logs(kubectl: str, name: str, namespace: str, echo: Callable[[str], None], lines: int,
               label: str = JOBSET_LABEL) -> None:
    try:
        echo(_run([kubectl, "logs", "-n", namespace, "-l", f"{label}={name}", "--all-containers",
                   "--prefix", f"--tail={lines}"]))
    except TrainingError as exc:  # the failure itself is what matters; missing logs are only reported
        echo(f"(no logs of {name}: {exc})")


__all__ = ["TrainJobResult", "job_from_overlay", "job_state", "kubectl_path", "submit_trainjob"]
