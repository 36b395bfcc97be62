"""`mlops train submit`: the production overlay's TrainJob template becomes a named, unsuspended job; the wait
ends with the job's Complete / Failed condition and a failure surfaces the reason and the pods' logs.

The cluster is a stand-in `kubectl` script (no Kubernetes API here): it renders with the real kubectl from
the venv, records what is created, and answers `get` with a scripted sequence of TrainJob statuses.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from mlops_training import TrainingError, job_from_overlay, job_state, submit_trainjob

REPO = Path(__file__).resolve().parents[3]
KUBECTL = Path(sys.executable).parent / "kubectl"


def _rendered() -> str:
    import subprocess

    return subprocess.run([str(KUBECTL), "kustomize", "infra/overlays/production"], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=120).stdout


def test_template_becomes_a_named_unsuspended_job() -> None:
    job = job_from_overlay(_rendered(), "gh42-1")
    assert job["metadata"]["name"] == "fraud-trainjob-gh42-1"
    assert job["metadata"]["namespace"] == "mlops-production"
    assert job["spec"]["suspend"] is False
    assert job["spec"]["trainer"]["numNodes"] == 2
    template = next(d for d in yaml.safe_load_all(_rendered()) if d and d["kind"] == "TrainJob")
    assert template["spec"]["suspend"] is True  # the overlay itself is untouched


def test_bad_run_id_or_missing_template_is_refused() -> None:
    with pytest.raises(TrainingError, match="is not a DNS label"):
        job_from_overlay(_rendered(), "Run_1")
    with pytest.raises(TrainingError, match=r"expected one trainer\.kubeflow\.org/v1alpha1 TrainJob"):
        job_from_overlay("kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n", "r1")


def test_state_from_conditions() -> None:
    assert job_state({}) == ("Running", "", "")
    assert job_state({"conditions": [{"type": "Created", "status": "True", "reason": "JobSetCreated"}]})[0:2] == \
        ("Running", "JobSetCreated")
    failed = {"conditions": [{"type": "Created", "status": "True"},
                             {"type": "Failed", "status": "True", "reason": "JobSetFailed", "message": "node-0 OOM"}]}
    assert job_state(failed) == ("Failed", "JobSetFailed", "node-0 OOM")
    assert job_state({"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted"}]})[0] == \
        "Complete"
    assert job_state({"conditions": [{"type": "Complete", "status": "False"}]})[0] == "Running"


def _fake_kubectl(tmp: Path, statuses: list[dict]) -> Path:
    (tmp / "statuses.json").write_text(json.dumps(statuses))
    script = tmp / "kubectl"
    script.write_text(f"""#!{sys.executable}
import json, subprocess, sys
from pathlib import Path
tmp = Path({str(tmp)!r})
args = sys.argv[1:]
with open(tmp / "calls.log", "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "kustomize":
    sys.exit(subprocess.run([{str(KUBECTL)!r}, *args]).returncode)
if args[0] == "create":
    (tmp / "created.json").write_text(sys.stdin.read())
    print("trainjob created")
elif args[0] == "get":
    statuses = json.loads((tmp / "statuses.json").read_text())
    seen = sum(1 for line in (tmp / "calls.log").read_text().splitlines() if json.loads(line)[0] == "get")
    print(json.dumps({{"status": statuses[min(seen, len(statuses)) - 1]}}))
elif args[0] == "logs":
    print("[pod/fraud-trainjob-r1-node-0-0/node] torch.OutOfMemoryError: CUDA out of memory")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_submit_waits_and_surfaces_a_failure_with_logs(tmp_path: Path) -> None:
    kubectl = _fake_kubectl(tmp_path, [
        {"conditions": [{"type": "Created", "status": "True", "reason": "JobSetCreated"}]},
        {"conditions": [{"type": "Failed", "status": "True", "reason": "JobSetFailed", "message": "pod OOMKilled"}]},
    ])
    printed: list[str] = []
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with pytest.raises(TrainingError, match="fraud-trainjob-r1 failed: JobSetFailed: pod OOMKilled"):
            submit_trainjob(Path("infra/overlays/production"), "r1", poll_s=0.01, kubectl=str(kubectl),
                            echo=printed.append)
    finally:
        os.chdir(cwd)
    created = json.loads((tmp_path / "created.json").read_text())
    assert created["metadata"]["name"] == "fraud-trainjob-r1" and created["spec"]["suspend"] is False
    calls = [json.loads(line) for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert [c[0] for c in calls] == ["kustomize", "create", "get", "get", "logs"]
    assert "jobset.sigs.k8s.io/jobset-name=fraud-trainjob-r1" in calls[-1]
    assert any("CUDA out of memory" in p for p in printed)


def test_submit_returns_when_complete(tmp_path: Path) -> None:
    kubectl = _fake_kubectl(tmp_path, [
        {}, {"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted"}]}])
    result = submit_trainjob(REPO / "infra/overlays/production", "r2", poll_s=0.01, kubectl=str(kubectl),
                             echo=lambda _: None)
    assert (result.name, result.namespace, result.state) == ("fraud-trainjob-r2", "mlops-production", "Complete")


def _rendered_with_lm(tmp_path: Path) -> str:
    """The production overlay with its language-model switch on, as an operator's commit would have it."""
    import shutil
    import subprocess

    infra = tmp_path / "infra"
    shutil.copytree(REPO / "infra", infra)
    kustomization = infra / "overlays" / "production" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("  # - llm  #", "  - llm  #"))
    return subprocess.run([str(KUBECTL), "kustomize", str(infra / "overlays" / "production")], capture_output=True,
                          text=True, check=True, timeout=120).stdout


def test_each_models_template_by_its_annotation(tmp_path: Path) -> None:
    """--model picks the template annotated with the model: fraud's TrainJob, the language model's suspended
    PyTorchJob (unsuspended in the copy, the overlay's own left suspended); a model without one is named."""
    rendered = _rendered_with_lm(tmp_path)
    fraud = job_from_overlay(rendered, "gh7-1", model="fraud")
    assert (fraud["kind"], fraud["metadata"]["name"], fraud["spec"]["suspend"]) == ("TrainJob", "fraud-trainjob-gh7-1",
                                                                                    False)
    lm = job_from_overlay(rendered, "gh7-1", model="llm-sft")
    assert (lm["kind"], lm["metadata"]["name"], lm["metadata"]["namespace"]) == (
        "PyTorchJob", "llm-sft-finetune-gh7-1", "mlops-production")
    assert lm["spec"]["runPolicy"]["suspend"] is False
    template = next(d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"] == "llm-sft-finetune")
    assert template["spec"]["runPolicy"]["suspend"] is True
    assert job_from_overlay(rendered, "gh7-1")["metadata"]["name"] == "fraud-trainjob-gh7-1"  # no --model: as before
    with pytest.raises(TrainingError, match=r"mlops\.platform/model: llm-sft.*switched on"):
        job_from_overlay(_rendered(), "gh7-1", model="llm-sft")  # the committed overlay: the LM is off


def test_a_pytorchjob_is_watched_as_a_pytorchjob(tmp_path: Path) -> None:
    kubectl = _fake_kubectl(tmp_path, [
        {"conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]},
        {"conditions": [{"type": "Running", "status": "True"},
                        {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}])
    import shutil

    infra = tmp_path / "repo" / "infra"
    shutil.copytree(REPO / "infra", infra)
    kustomization = infra / "overlays" / "production" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("  # - llm  #", "  - llm  #"))
    result = submit_trainjob(infra / "overlays" / "production", "r3", poll_s=0.01, kubectl=str(kubectl),
                             echo=lambda _: None, model="llm-sft")
    assert (result.name, result.state, result.reason) == ("llm-sft-finetune-r3", "Complete", "PyTorchJobSucceeded")
    calls = [json.loads(line) for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert [c[:2] for c in calls if c[0] == "get"] == [["get", "pytorchjob"], ["get", "pytorchjob"]]
    assert job_state({"conditions": [{"type": "Succeeded", "status": "True"}]})[0] == "Complete"
