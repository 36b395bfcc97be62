"""``mlops registry roles apply`` (``mlops_core.tracking_roles.apply_roles``) on a real ``mlflow server --app-name
basic-auth`` on PostgreSQL (``server`` in conftest.py): the admin creates an environment's experiment, registered model
and one user per role with exactly the role table's grants; a re-run changes nothing; a rotated password is set; a
loosened grant is put back. The cluster's ``mlflow-roles`` Job is run as Kubernetes would run it: its command and env
read off the rendered staging overlay, each ``secretKeyRef`` filled from a stand-in Secret, so the manifest and the
CLI must agree on every name."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mlops_core import TrackingError
from mlops_core.tracking_roles import GRANTS, apply_roles

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
API, API3 = "/api/2.0/mlflow", "/api/3.0/mlflow"
ROLES = ("trainer", "delivery", "monitor", "reader")
# written down from the roles, not copied from GRANTS: (experiment, registered model)
WANT = {"trainer": ("EDIT", "MANAGE"), "delivery": ("READ", "MANAGE"), "monitor": ("READ", "MANAGE"),
        "reader": ("READ", "READ")}


def _permission(server: tuple[str, tuple[str, str]], user: str, kind: str, resource: str) -> str:
    resp = httpx.get(f"{server[0]}{API3}/users/permissions/get", auth=server[1], timeout=30,
                     params={"username": user, "resource_type": kind, "resource_id": resource})
    resp.raise_for_status()
    return str(resp.json()["permission"])


def _login(url: str, user: str, password: str) -> int:
    return httpx.get(f"{url}{API}/experiments/search", params={"max_results": 1}, auth=(user, password),
                     timeout=30).status_code


def _apply(server: tuple[str, tuple[str, str]], ns: str, passwords: dict[str, str], **kw: Any) -> Any:
    return apply_roles(server[0], server[1], namespace=ns, experiment=f"{ns}.fraud-detection",
                       registered_model=f"{ns}.fraud", model="fraud", passwords=passwords, **kw)


def test_apply_creates_each_roles_user_with_exactly_its_grants_and_a_rerun_changes_nothing(
        server: tuple[str, tuple[str, str]]) -> None:
    ns = f"t{secrets.token_hex(3)}-staging"
    passwords = {r: secrets.token_urlsafe(12) for r in ROLES}
    first = _apply(server, ns, passwords)
    assert first.users == {r: f"{ns}.fraud-{r}" for r in ROLES}
    assert f"created experiment {ns}.fraud-detection" in first.changes
    assert f"created registered model {ns}.fraud" in first.changes
    for role, (on_exp, on_model) in WANT.items():
        user = f"{ns}.fraud-{role}"
        assert f"created user {user}" in first.changes
        assert _permission(server, user, "experiment", first.experiment_id) == on_exp
        assert _permission(server, user, "registered_model", f"{ns}.fraud") == on_model
        # the lifecycle lock only for the roles that manage the model; the server's default (nothing) for the reader
        assert _permission(server, user, "registered_model", f"{ns}.fraud.lifecycle-lock") == (
            "MANAGE" if on_model == "MANAGE" else "NO_PERMISSIONS")
        assert _login(server[0], user, passwords[role]) == 200
    again = _apply(server, ns, passwords)
    assert again.changes == []
    assert (again.experiment_id, again.grants) == (first.experiment_id, first.grants)


def test_a_rotated_password_is_set_and_a_loosened_grant_is_put_back(server: tuple[str, tuple[str, str]]) -> None:
    ns = f"t{secrets.token_hex(3)}-production"
    passwords = {r: secrets.token_urlsafe(12) for r in ROLES}
    applied = _apply(server, ns, passwords)
    trainer, reader = f"{ns}.fraud-trainer", f"{ns}.fraud-reader"
    rotated = {**passwords, "trainer": secrets.token_urlsafe(12)}
    assert _apply(server, ns, rotated).changes == [f"set the password of {trainer}"]
    assert (_login(server[0], trainer, passwords["trainer"]), _login(server[0], trainer, rotated["trainer"])) == (
        401, 200)
    # someone granted the reader EDIT by hand: the next apply puts the table's READ back
    assert _apply(server, ns, rotated, grants={**GRANTS, "reader": ("EDIT", "EDIT")}).changes == [
        f"changed {reader} on experiment {applied.experiment_id}: READ -> EDIT",
        f"changed {reader} on registered_model {ns}.fraud: READ -> EDIT"]
    assert _permission(server, reader, "registered_model", f"{ns}.fraud") == "EDIT"
    assert _apply(server, ns, rotated).changes == [
        f"changed {reader} on experiment {applied.experiment_id}: EDIT -> READ",
        f"changed {reader} on registered_model {ns}.fraud: EDIT -> READ"]
    assert _permission(server, reader, "registered_model", f"{ns}.fraud") == "READ"


def test_a_role_without_a_password_or_a_wrong_admin_is_refused(server: tuple[str, tuple[str, str]]) -> None:
    ns = f"t{secrets.token_hex(3)}-staging"
    with pytest.raises(TrackingError, match=r"no password for the MLflow role\(s\) \['reader'\]"):
        _apply(server, ns, {r: "x" * 12 for r in ROLES if r != "reader"})
    with pytest.raises(TrackingError, match=rf"refused to read experiment 'e' \(asked as '{server[1][0]}'\): 401"):
        apply_roles(server[0], (server[1][0], "wrong"), namespace=ns, experiment="e", registered_model="m",
                    model="fraud", passwords={r: "x" * 12 for r in ROLES})


def test_the_admin_is_the_one_given_not_the_pods_mlflow_user(server: tuple[str, tuple[str, str]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The Job's pod, like every workload's, has ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` of a role's user (here
    one the server does not know): MLflow's clients read those by default; apply_roles must ask as the admin given."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "mlops-staging.fraud-reader")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-admins")
    ns = f"t{secrets.token_hex(3)}-staging"
    passwords = {r: secrets.token_urlsafe(12) for r in ROLES}
    applied = _apply(server, ns, passwords)
    assert f"created user {ns}.fraud-monitor" in applied.changes
    assert _permission(server, f"{ns}.fraud-monitor", "registered_model", f"{ns}.fraud") == "MANAGE"


def _rendered_job(target: str = "infra/overlays/staging", name: str = "mlflow-roles"
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """The rendered ``name`` Job's container, and the data of the ConfigMap it takes env from."""
    out = subprocess.run(["kubectl", "kustomize", target], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == name)
    container = job["spec"]["template"]["spec"]["containers"][0]
    (ref,) = [e["configMapRef"]["name"] for e in container.get("envFrom", [])]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == ref)
    return container, cm["data"]


def _job_env(container: dict[str, Any], configmap: dict[str, str], namespace: str,
             secret_data: dict[tuple[str, str], str]) -> dict[str, str]:
    """The env Kubernetes would give the container: the ConfigMap, then each entry (Secrets from ``secret_data``)."""
    env = dict(configmap)
    for entry in container["env"]:
        source = entry.get("valueFrom") or {}
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[entry["name"]] = secret_data[(ref["name"], ref["key"])]  # KeyError: a key no Secret provides
        elif "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[entry["name"]] = namespace
        else:
            env[entry["name"]] = entry["value"]
    return env


def _run_job(container: dict[str, Any], env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    argv = [a.replace("$(POD_NAMESPACE)", env["POD_NAMESPACE"]) for a in container["command"]]
    assert argv[0] == "mlops"
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HOME": os.environ["HOME"],
            **env, "MLOPS__TRACKING__URI": url}  # the one value a test must change: where the server is
    return subprocess.run([sys.executable, "-m", "mlops_cli", *argv[1:]], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=120)


def test_the_clusters_job_creates_the_users_its_workloads_secrets_log_in_as(
        server: tuple[str, tuple[str, str]]) -> None:
    container, configmap = _rendered_job()
    assert configmap["MLOPS_PROFILE"] == "staging"
    ns = "mlops-staging"
    user = {r: f"{ns}.fraud-{r}" for r in ROLES}
    pw = {r: secrets.token_urlsafe(12) for r in ROLES}
    stand_in = {("mlflow-roles-secrets", "admin-username"): server[1][0],
                ("mlflow-roles-secrets", "admin-password"): server[1][1],
                ("mlflow-roles-secrets", "delivery-password"): pw["delivery"],
                ("mlflow-roles-secrets", "reader-password"): pw["reader"],
                ("fraud-train-secrets", "MLFLOW_TRACKING_USERNAME"): user["trainer"],
                ("fraud-train-secrets", "MLFLOW_TRACKING_PASSWORD"): pw["trainer"],
                ("fraud-monitor-secrets", "MLFLOW_TRACKING_USERNAME"): user["monitor"],
                ("fraud-monitor-secrets", "MLFLOW_TRACKING_PASSWORD"): pw["monitor"]}
    env = _job_env(container, configmap, ns, stand_in)
    assert not set(pw.values()) & set(container["command"])  # no password in argv
    proc = _run_job(container, env, server[0])
    assert proc.returncode == 0, proc.stderr
    applied = json.loads(proc.stdout)
    # the staging profile's names: one experiment and one registered model ("fraud") for the environment
    assert (applied["experiment"], applied["registered_model"]) == ("fraud-detection", "fraud")
    assert applied["users"] == user and len(applied["changes"]) == 2 + 4 * 3 + 3
    exp_id = applied["experiment_id"]
    # each workload's Secret now logs in as its role, with its role's rights only
    trainer, monitor = (user["trainer"], pw["trainer"]), (user["monitor"], pw["monitor"])
    runs = f"{server[0]}{API}/runs/create"
    assert httpx.post(runs, json={"experiment_id": exp_id}, auth=trainer, timeout=30).status_code == 200
    assert httpx.post(runs, json={"experiment_id": exp_id}, auth=monitor, timeout=30).status_code == 403
    alias = {"name": "fraud", "alias": "probe", "version": "999999"}  # 404 once authorized, 403 when not
    aliases = f"{server[0]}{API}/registered-models/alias"
    assert httpx.post(aliases, json=alias, auth=monitor, timeout=30).status_code == 404
    assert httpx.post(aliases, json=alias, auth=(user["reader"], pw["reader"]), timeout=30).status_code == 403
    # the next sync: nothing to change
    again = _run_job(container, env, server[0])
    assert again.returncode == 0 and json.loads(again.stdout)["changes"] == [], again.stderr
    # a workload Secret naming another role's user is refused before anything is applied
    wrong = _job_env(container, configmap, ns, {**stand_in, ("fraud-monitor-secrets", "MLFLOW_TRACKING_USERNAME"):
                                                user["trainer"]})
    refused = _run_job(container, wrong, server[0])
    assert refused.returncode != 0
    assert f"MLFLOW_ROLE_MONITOR_USERNAME={user['trainer']!r} (expected {user['monitor']!r})" in refused.stdout + \
        refused.stderr


def test_the_language_models_job_creates_its_users_on_its_own_experiment_and_model_only(
        server: tuple[str, tuple[str, str]]) -> None:
    """With the ``llm`` switch on, staging's ``llm-sft-mlflow-roles`` Job (rendered from infra/overlays/staging/llm)
    creates ``mlops-staging.llm-sft-<role>`` with the table's grants on llm-sft's own experiment and registered
    model; the language model's trainer writes runs there and is refused fraud's experiment and model."""
    container, configmap = _rendered_job("infra/overlays/staging/llm", "llm-sft-mlflow-roles")
    assert configmap["MLOPS_PROFILE"] == "staging"
    ns = "mlops-staging"
    user = {r: f"{ns}.llm-sft-{r}" for r in ROLES}
    pw = {r: secrets.token_urlsafe(12) for r in ROLES}
    stand_in = {("mlflow-roles-secrets", "admin-username"): server[1][0],
                ("mlflow-roles-secrets", "admin-password"): server[1][1],
                ("mlflow-roles-secrets", "llm-sft-delivery-password"): pw["delivery"],
                ("mlflow-roles-secrets", "llm-sft-reader-password"): pw["reader"],
                ("llm-train-secrets", "MLFLOW_TRACKING_USERNAME"): user["trainer"],
                ("llm-train-secrets", "MLFLOW_TRACKING_PASSWORD"): pw["trainer"],
                ("llm-sft-monitor-secrets", "MLFLOW_TRACKING_USERNAME"): user["monitor"],
                ("llm-sft-monitor-secrets", "MLFLOW_TRACKING_PASSWORD"): pw["monitor"]}
    env = _job_env(container, configmap, ns, stand_in)
    assert not set(pw.values()) & set(container["command"])  # no password in argv
    proc = _run_job(container, env, server[0])
    assert proc.returncode == 0, proc.stderr
    applied = json.loads(proc.stdout)
    assert (applied["experiment"], applied["registered_model"]) == ("llm-sft", "llm-sft")
    assert applied["users"] == user
    for role, (on_exp, on_model) in WANT.items():
        assert _permission(server, user[role], "experiment", applied["experiment_id"]) == on_exp
        assert _permission(server, user[role], "registered_model", "llm-sft") == on_model
    # fraud's experiment and model (made here by the admin, whichever test ran first): nothing for the LM's users
    admin = server[1]
    made = httpx.post(f"{server[0]}{API}/experiments/create", json={"name": "fraud-detection"}, auth=admin,
                      timeout=30)
    assert made.status_code in (200, 400), made.text  # 400: RESOURCE_ALREADY_EXISTS
    fraud_exp = httpx.get(f"{server[0]}{API}/experiments/get-by-name", params={"experiment_name": "fraud-detection"},
                          auth=admin, timeout=30).json()["experiment"]["experiment_id"]
    runs = f"{server[0]}{API}/runs/create"
    trainer = (user["trainer"], pw["trainer"])
    assert httpx.post(runs, json={"experiment_id": applied["experiment_id"]}, auth=trainer, timeout=30
                      ).status_code == 200
    assert httpx.post(runs, json={"experiment_id": fraud_exp}, auth=trainer, timeout=30).status_code == 403
    for role in ROLES:
        assert _permission(server, user[role], "experiment", fraud_exp) == "NO_PERMISSIONS"
        assert _permission(server, user[role], "registered_model", "fraud") == "NO_PERMISSIONS"
