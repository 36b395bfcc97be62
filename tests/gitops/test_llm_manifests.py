"""The language model's KServe manifests (infra/base/serving-llm) render and validate like the fraud model's:
Kubernetes core kinds strictly, the InferenceService and ServingRuntime against KServe's own models; the
storage layout is the Hugging Face one, and the runtime is the predictor image whose entrypoint serves the LM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
TARGET = "infra/base/serving-llm"
MODELS = {"InferenceService": "V1beta1InferenceService", "ServingRuntime": "V1alpha1ServingRuntime"}


def docs(kit: Any) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(kit.render(TARGET)) if d}


def test_llm_manifests_validate_against_kubernetes_and_kserve(kit: Any, model_validator: Any) -> None:
    rendered = docs(kit)
    assert set(rendered) == {"ServiceAccount", "ServingRuntime", "InferenceService", "NetworkPolicy",
                             "RequestAuthentication", "AuthorizationPolicy"}
    for kind, model in MODELS.items():
        assert list(model_validator.errors(rendered[kind], model, kind)) == []
    kubernetes_validate.validate(rendered["ServiceAccount"], kubernetes_validate.latest_version(), strict=True)


def test_schema_check_catches_a_misspelt_field(kit: Any, model_validator: Any) -> None:
    isvc = docs(kit)["InferenceService"]
    isvc["spec"]["predictor"]["model"]["storageUrl"] = isvc["spec"]["predictor"]["model"].pop("storageUri")
    assert any("storageUrl" in e for e in model_validator.errors(isvc, MODELS["InferenceService"]))


def test_the_lm_is_served_by_the_predictor_image_in_the_hugging_face_layout(kit: Any) -> None:
    rendered = docs(kit)
    isvc, runtime = rendered["InferenceService"], rendered["ServingRuntime"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "huggingface"  # what KServe's Hugging Face runtime also accepts
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["storageUri"].startswith("s3://") and "/llm-sft/" in model["storageUri"]
    assert isvc["spec"]["predictor"]["serviceAccountName"] == rendered["ServiceAccount"]["metadata"]["name"]
    (container,) = runtime["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLOPS__PROJECT__MODEL"] == isvc["metadata"]["name"]
    assert (REPO / "configs" / "models" / f"{env['MLOPS__PROJECT__MODEL']}.yaml").is_file()
    assert container["image"].startswith("ghcr.io/mlops-platform/predictor:")
    entrypoint = (REPO / "services/predictor/entrypoint.sh").read_text()
    assert '--model-dir "${MODEL_DIR:-/mnt/models}"' in entrypoint and env["MODEL_DIR"] == "/mnt/models"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


# --- the fine-tune (infra/base/training-llm) -------------------------------------------------------------------
TRAIN_TARGET = "infra/base/training-llm"


ROLES_JOB = "llm-sft-mlflow-roles"  # the language model's MLflow users (roles-job.yaml), with its account and policy


def train_docs(kit: Any, *, roles: bool = False) -> dict[str, dict[str, Any]]:
    """The fine-tune's documents by kind; ``roles``: the roles Job's instead (each named ``ROLES_JOB``)."""
    docs = [d for d in yaml.safe_load_all(kit.render(TRAIN_TARGET)) if d]
    return {d["kind"]: d for d in docs if (d["metadata"]["name"] == ROLES_JOB) == roles}


def test_llm_finetune_manifests_validate_against_kubernetes_and_kubeflow(kit: Any, model_validator: Any) -> None:
    rendered = train_docs(kit)
    assert set(rendered) == {"ServiceAccount", "PersistentVolumeClaim", "ConfigMap", "PyTorchJob", "NetworkPolicy"}
    assert list(model_validator.errors(rendered["PyTorchJob"], "KubeflowOrgV1PyTorchJob", "PyTorchJob")) == []
    for kind in ("ServiceAccount", "PersistentVolumeClaim", "ConfigMap", "NetworkPolicy"):
        kubernetes_validate.validate(rendered[kind], kubernetes_validate.latest_version(), strict=True)
    job = rendered["PyTorchJob"]
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replica"] = 1  # misspelt: the validator must see it
    assert any("replica" in e for e in model_validator.errors(job, "KubeflowOrgV1PyTorchJob", "PyTorchJob"))
    roles = train_docs(kit, roles=True)
    assert set(roles) == {"ServiceAccount", "NetworkPolicy", "Job"}
    for doc in roles.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    pod = roles["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == ROLES_JOB
    assert roles["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"] == roles["Job"]["spec"]["template"][
        "metadata"]["labels"]


def test_everything_the_finetune_job_names_is_produced_by_the_platform(kit: Any) -> None:
    from mlops_config import load_config

    rendered = train_docs(kit)
    job, env_map = rendered["PyTorchJob"], rendered["ConfigMap"]
    (role,) = job["spec"]["pytorchReplicaSpecs"].values()  # one node: the master
    pod = role["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].startswith("ghcr.io/mlops-platform/trainer:")
    assert "exec mlops train run" in (REPO / "services/trainer/entrypoint.sh").read_text()
    assert container["args"] == ["--model", "llm-sft"]
    env = env_map["data"]
    assert {r["configMapRef"]["name"] for r in container["envFrom"] if "configMapRef" in r} == {
        env_map["metadata"]["name"]}
    assert pod["serviceAccountName"] == rendered["ServiceAccount"]["metadata"]["name"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {rendered["PersistentVolumeClaim"]["metadata"]["name"]}

    # the config the pod loads: the profile of its env map, the model of its args, its env overrides
    overrides = {k: v for k, v in env.items() if k.startswith("MLOPS__")}
    config = load_config(profile=env["MLOPS_PROFILE"], model="llm-sft", config_dir=REPO / "configs",
                         environ=overrides, check_secrets=False).config
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert config.training.checkpoint.dir in mounts  # checkpoints and the pretrained cache on the volume
    assert int(job["spec"]["nprocPerNode"]) == config.training.nproc
    # the data: the model config's dataset, copied into the image at the path it is resolved against (/app)
    dataset = config.training.causal_lm.dataset
    assert dataset is not None and (REPO / dataset).is_file()
    dockerfile = (REPO / "services/trainer/Dockerfile").read_text()
    assert f"COPY {dataset} /app/{dataset}" in dockerfile and "WORKDIR /app" in dockerfile
    # the pretrained checkpoint: a registry alias of the model the platform registers (its registered name)
    name = config.tracking.registered_model_prefix + "llm-sft"
    assert config.training.causal_lm.checkpoint == f"models:/{name}@champion"


def test_checkov_passes_on_the_llm_manifests(kit: Any, tmp_path: Path) -> None:
    """checkov does not look inside CRDs, so each PyTorchJob replica's pod template is also checked as the Pod
    the training operator makes of it (its labels, annotations and spec)."""
    from .test_checkov import run_checkov

    docs = [d for target in (TARGET, TRAIN_TARGET) for d in yaml.safe_load_all(kit.render(target)) if d]
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {**role["template"].get("metadata", {}), "name": f"{d['metadata']['name']}-{name.lower()}"},
             "spec": role["template"]["spec"]}
            for d in docs if d["kind"] == "PyTorchJob" for name, role in d["spec"]["pytorchReplicaSpecs"].items()]
    assert pods
    for d in docs + pods:  # in an environment's namespace, as an overlay that opts in renders them
        d["metadata"]["namespace"] = "mlops-production"
    (tmp_path / "llm.yaml").write_text(yaml.safe_dump_all(docs + pods))
    report = run_checkov(tmp_path, "kubernetes", kit)
    failed = [f"{c['check_id']} {c['check_name']} on {c['resource']}" for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0 and not failed, "\n".join(failed)
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["passed"] >= 50, report["summary"]
    checked = {c["resource"] for c in report["results"]["passed_checks"]}
    assert {f"Pod.mlops-production.{p['metadata']['name']}" for p in pods} <= checked
    for check in report["results"]["skipped_checks"]:
        assert len((check["check_result"].get("suppress_comment") or "").strip()) >= 30, check["check_id"]
