"""The language model in the staging and production overlays, behind the switch an operator flips.

As committed, each overlay lists ``llm`` only in a comment and renders exactly what it rendered without it.
Flipped (the line uncommented, as an operator would, in a copy of ``infra/``), it renders the LM's
InferenceService, ServingRuntime, fine-tune PyTorchJob and hourly drift CronJob in the environment's namespace, the
served version
pinned by the overlay's ``model-llm-sft.yaml`` (the file promotions and rollbacks edit), everything else as before;
the LM's documents validate (Kubernetes core kinds strictly, KServe's and Kubeflow's models) and checkov finds no
failed check in the flipped render.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENVS = ("staging", "production")
SWITCH_OFF = "  # - llm  #"
SWITCH_ON = "  - llm  #"
MODELS = {"InferenceService": "V1beta1InferenceService", "ServingRuntime": "V1alpha1ServingRuntime",
          "PyTorchJob": "KubeflowOrgV1PyTorchJob"}


def flipped(tmp_path: Path, env: str) -> Path:
    """A copy of ``infra/`` with the overlay's switch turned on, as an operator's commit would."""
    infra = tmp_path / "infra"
    shutil.copytree(REPO / "infra", infra)
    kustomization = infra / "overlays" / env / "kustomization.yaml"
    text = kustomization.read_text(encoding="utf-8")
    assert text.count(SWITCH_OFF) == 1, f"{env}: the switch line {SWITCH_OFF!r} is not in the overlay once"
    kustomization.write_text(text.replace(SWITCH_OFF, SWITCH_ON), encoding="utf-8")
    return infra / "overlays" / env


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def lm_docs(base: str, kit: Any) -> set[tuple[str, str]]:
    return {key(d) for d in docs(kit.render(f"infra/base/{base}"))}


@pytest.mark.parametrize("env", ENVS)
def test_switched_off_the_overlay_renders_no_language_model(env: str, kit: Any) -> None:
    rendered = {key(d) for d in docs(kit.render(f"infra/overlays/{env}"))}
    assert not rendered & (lm_docs("serving-llm", kit) | lm_docs("training-llm", kit) | lm_docs("monitoring-llm", kit))


@pytest.mark.parametrize("env", ENVS)
def test_switched_on_the_overlay_deploys_the_pinned_language_model(env: str, kit: Any, tmp_path: Path,
                                                                    model_validator: Any) -> None:
    from mlops_delivery import ModelManifest

    before = {key(d): d for d in docs(kit.render(f"infra/overlays/{env}"))}
    overlay = flipped(tmp_path, env)
    after = {key(d): d for d in docs(kit.render(overlay))}
    wanted = lm_docs("serving-llm", kit) | lm_docs("training-llm", kit) | lm_docs("monitoring-llm", kit)
    assert set(after) == set(before) | wanted  # the LM's documents, and nothing else changes in kind or name
    assert all(after[k] == before[k] for k in before)
    assert {d["metadata"].get("namespace") for k, d in after.items() if k in wanted} == {f"mlops-{env}"}
    # the file promotions and rollbacks edit, read as they read it
    pinned = ModelManifest(REPO / "infra" / "overlays" / env / "model-llm-sft.yaml", env, "llm-sft")
    pin = yaml.safe_load(pinned.original)["spec"]["predictor"]["model"]["storageUri"]
    isvc = after[("InferenceService", "llm-sft")]
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == pin
    assert isvc["spec"]["predictor"]["model"]["runtime"] in {n for k, n in after if k == "ServingRuntime"}
    env_map = after[("ConfigMap", "llm-sft-train-env")]["data"]
    assert env_map["MLOPS_PROFILE"] == env
    for k, d in after.items():
        if k not in wanted:
            continue
        if k[0] in MODELS:
            assert list(model_validator.errors(d, MODELS[k[0]], k[0])) == [], k
        elif d["apiVersion"] in ("v1", "networking.k8s.io/v1", "batch/v1"):
            kubernetes_validate.validate(d, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("env", ENVS)
def test_checkov_finds_no_failed_check_in_the_switched_on_overlay(env: str, kit: Any, tmp_path: Path) -> None:
    from tests.gitops.test_checkov import run_checkov

    target = tmp_path / "rendered"
    target.mkdir()
    (target / f"{env}.yaml").write_text(kit.render(flipped(tmp_path, env)))
    report = run_checkov(target, "kubernetes", kit)
    failed = [f"{c['check_id']} {c['check_name']} on {c['resource']}" for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0 and not failed, "\n".join(failed)
    assert report["summary"]["parsing_errors"] == 0
    scanned = {c["resource"] for c in report["results"]["passed_checks"]}
    assert any("llm-sft" in r for r in scanned), "checkov saw none of the language model's resources"


def _cronjob(docs: dict[tuple[str, str], dict[str, Any]], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    job = docs[("CronJob", name)]
    return job, job["spec"]["jobTemplate"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("env", ENVS)
def test_switched_on_the_language_model_has_its_own_drift_job_like_frauds(env: str, kit: Any, tmp_path: Path) -> None:
    """`mlops monitor run --model llm-sft` (an existing command with those options, through the monitor image's
    entrypoint) hourly, as fraud-drift runs fraud's: the same image, profile, schedule rules, secret key names and
    state mount, but its own ServiceAccount, Secret, state volume and NetworkPolicy; the reference prompts it reads
    (training.causal_lm.dataset) are copied into the monitor image, and MLflow admits it."""
    import shlex

    import typer

    from mlops_cli.app import app as mlops_app
    from mlops_config import load_config
    from tests.gitops.test_environments_apart import admitted
    from tests.gitops.test_workflows import check_command, commands, make_targets

    after = {key(d): d for d in docs(kit.render(flipped(tmp_path, env)))}
    fraud, fraud_pod = _cronjob(after, "fraud-drift")
    lm, pod = _cronjob(after, "llm-sft-drift")
    (c,), (fc,) = pod["containers"], fraud_pod["containers"]
    entry = commands((REPO / "services" / "monitor" / "entrypoint.sh").read_text())[-1]
    assert entry[:4] == ["exec", "mlops", "monitor", "run"] and c["image"] == fc["image"]
    argv = [*entry[1:4], *c["args"]]
    assert check_command(argv, make_targets(), typer.main.get_command(mlops_app)) is None, argv
    assert argv[argv.index("--model") + 1] == "llm-sft"
    for field in ("concurrencyPolicy", "startingDeadlineSeconds"):
        assert lm["spec"][field] == fraud["spec"][field]
    assert lm["spec"]["schedule"].split()[1:] == fraud["spec"]["schedule"].split()[1:] == ["*"] * 4  # hourly
    assert c["envFrom"] == fc["envFrom"]
    assert after[("ConfigMap", c["envFrom"][0]["configMapRef"]["name"])]["data"]["MLOPS_PROFILE"] == env
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    fraud_refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in fc["env"] if "valueFrom" in e}
    assert {n: r["key"] for n, r in refs.items()} == {n: r["key"] for n, r in fraud_refs.items()}
    assert {r["name"] for r in refs.values()} == {"llm-sft-monitor-secrets"}
    assert c["volumeMounts"] == fc["volumeMounts"] and c["securityContext"] == fc["securityContext"]
    claim = next(v for v in pod["volumes"] if v["name"] == "state")["persistentVolumeClaim"]["claimName"]
    assert claim != next(v for v in fraud_pod["volumes"] if v["name"] == "state")["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in after
    assert pod["serviceAccountName"] != fraud_pod["serviceAccountName"]
    assert ("ServiceAccount", pod["serviceAccountName"]) in after
    labels = lm["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    policy = after[("NetworkPolicy", "llm-sft-drift")]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items() and policy["spec"]["ingress"] == []
    platform = [d for d in docs(kit.render("infra/platform")) if d["kind"] == "NetworkPolicy"]
    assert admitted(platform, "mlflow", 5000, f"mlops-{env}", labels)
    dataset = load_config(model="llm-sft", profile=env, config_dir=REPO / "configs", environ={},
                          check_secrets=False).config.training.causal_lm.dataset
    dockerfile = (REPO / "services" / "monitor" / "Dockerfile").read_text()
    copies = [shlex.split(ln)[1:] for ln in dockerfile.splitlines() if ln.startswith("COPY ") and "--from" not in ln]
    workdir = next(ln.split()[1] for ln in reversed(dockerfile.splitlines()) if ln.startswith("WORKDIR "))
    assert dataset and [dataset, f"{workdir}/{dataset}"] in copies, copies
