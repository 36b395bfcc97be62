"""Every overlay renders with `kubectl kustomize`, validates against Kubernetes and CRD schemas, and holds
the platform's rules: non-root, read-only root filesystem, requests and limits, no `latest`, pinned models."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mlops_config import DeliveryConfig
from mlops_delivery import plan_promotion
from mlops_delivery.promotion import apply_change

# An older supported minor and the newest the validator knows: manifests must work on both.
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
CUSTOM = {
    ("serving.kserve.io/v1beta1", "InferenceService"): ("model", "V1beta1InferenceService"),
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): ("model", "V1alpha1ServingRuntime"),
    ("kubeflow.org/v1", "PyTorchJob"): ("model", "KubeflowOrgV1PyTorchJob"),
    ("monitoring.coreos.com/v1", "PrometheusRule"): ("schema", "monitoring.coreos.com_v1_prometheusrule.json"),
    ("argoproj.io/v1alpha1", "Application"): ("schema", "argoproj.io_v1alpha1_application.json"),
    ("argoproj.io/v1alpha1", "AppProject"): ("schema", "argoproj.io_v1alpha1_appproject.json"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("schema", "trainer.kubeflow.org_v1alpha1_trainjob.json"),
    ("security.istio.io/v1", "RequestAuthentication"): ("schema", "security.istio.io_v1_requestauthentication.json"),
    ("security.istio.io/v1", "AuthorizationPolicy"): ("schema", "security.istio.io_v1_authorizationpolicy.json"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"):
        ("schema", "trainer.kubeflow.org_v1alpha1_clustertrainingruntime.json"),
}


def all_docs(rendered: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, docs in rendered.items() for doc in docs]


def doc_id(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata'].get('namespace', '-')}/{doc['metadata']['name']}"


def validate_custom(doc: dict[str, Any], model_validator: Any, json_schema: Any) -> list[str]:
    how, name = CUSTOM[(doc["apiVersion"], doc["kind"])]
    if how == "model":
        return list(model_validator.errors(doc, name, doc_id(doc)))
    errors = [f"{doc_id(doc)}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in json_schema(name).iter_errors(doc)]
    if doc["kind"] == "ClusterTrainingRuntime":  # the schema leaves the JobSet's Job templates to the k8s models
        for i, job in enumerate(doc["spec"]["template"]["spec"].get("replicatedJobs", [])):
            errors += model_validator.errors(job.get("template"), "V1JobTemplateSpec",
                                             f"{doc_id(doc)}.replicatedJobs[{i}].template")
    return errors


def test_every_target_renders_the_expected_kinds(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {name: sorted({d["kind"] for d in docs}) for name, docs in rendered.items()}
    for env in ("staging", "production"):
        assert {"InferenceService", "ServingRuntime", "PyTorchJob", "CronJob", "PrometheusRule", "ConfigMap",
                "Namespace", "NetworkPolicy", "ServiceAccount"} <= set(kinds[env]), kinds[env]
        assert all(d["metadata"].get("namespace") == f"mlops-{env}" for d in rendered[env] if d["kind"] != "Namespace")
    assert {"Deployment", "StatefulSet", "Service", "NetworkPolicy"} <= set(kinds["platform"])
    assert kinds["cluster"] == ["ClusterTrainingRuntime"]
    assert all("namespace" not in d["metadata"] for d in rendered["cluster"])
    for env in ("staging", "production"):
        assert "TrainJob" in kinds[env]
    assert kinds["argocd"] == ["AppProject", "Application", "ConfigMap"]


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_core_kinds_validate_strictly_against_kubernetes(rendered: dict[str, list[dict[str, Any]]],
                                                         k8s_version: str) -> None:
    errors, checked = [], 0
    for _, doc in all_docs(rendered):
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            continue
        try:
            kubernetes_validate.validate(doc, k8s_version, strict=True)
            checked += 1
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc_id(doc)}: {exc.message} at {'/'.join(map(str, exc.path))}")
    assert not errors, "\n".join(errors)
    assert checked >= 25


def test_strict_validation_catches_a_misspelt_core_field(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployment = yaml.safe_load(yaml.safe_dump(next(d for d in rendered["platform"] if d["kind"] == "Deployment")))
    kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


def test_custom_resources_validate_against_their_schemas(rendered: dict[str, list[dict[str, Any]]],
                                                         model_validator: Any, json_schema: Any) -> None:
    seen, errors = set(), []
    for _, doc in all_docs(rendered):
        key = (doc["apiVersion"], doc["kind"])
        if key in CUSTOM:
            seen.add(key)
            errors += validate_custom(doc, model_validator, json_schema)
    assert not errors, "\n".join(errors)
    assert seen == set(CUSTOM)


@pytest.mark.parametrize(
    ("kind", "patch", "expected"),
    [
        ("InferenceService", lambda d: d["spec"]["predictor"].update(canaryTraficPercent=10), "unknown field"),
        ("InferenceService", lambda d: d["spec"]["predictor"].update(minReplicas="2"), "expected int"),
        ("PyTorchJob", lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
         .update(imagePullPolicy=["Always"]), "expected str"),
        ("PyTorchJob", lambda d: d["spec"].update(elasticPolicy={"rdzvBackends": "c10d"}), "unknown field"),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update(four="5m"), "Additional properties"),
        ("PrometheusRule", lambda d: d["spec"]["groups"][0]["rules"][0].update({"for": "5 minutes"}),
         "does not match"),
        ("Application", lambda d: d["spec"]["syncPolicy"]["automated"].update(prune="yes"), "is not of type"),
        ("AppProject", lambda d: d["spec"].update(syncWindow=[]), "Additional properties"),
        ("TrainJob", lambda d: d["spec"]["trainer"].update(numNodes="2"), "is not of type 'integer'"),
        ("TrainJob", lambda d: d["spec"]["runtimeRef"].pop("name"), "'name' is a required property"),
        ("TrainJob", lambda d: d["spec"]["trainer"].update(numProcPerNodes=8), "Additional properties"),
        ("ClusterTrainingRuntime", lambda d: d["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
         ["template"]["spec"]["containers"][0].update(volumeMount=[]), "unknown field"),
        ("ClusterTrainingRuntime", lambda d: d["spec"]["mlPolicy"].update(numNodes="one"), "is not of type"),
    ],
)
def test_schema_checks_catch_real_mistakes(rendered: dict[str, list[dict[str, Any]]], model_validator: Any,
                                           json_schema: Any, kind: str, patch: Any, expected: str) -> None:
    doc = yaml.safe_load(yaml.safe_dump(next(d for _, d in all_docs(rendered) if d["kind"] == kind)))
    assert validate_custom(doc, model_validator, json_schema) == []
    patch(doc)
    errors = validate_custom(doc, model_validator, json_schema)
    assert errors and expected in errors[0], errors


def containers(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod-level spec, container) pairs of a workload, custom kinds included."""
    kind, spec = doc["kind"], doc.get("spec", {})
    pods: list[dict[str, Any]] = []
    if kind in ("Deployment", "StatefulSet"):
        pods = [spec["template"]["spec"]]
    elif kind == "CronJob":
        pods = [spec["jobTemplate"]["spec"]["template"]["spec"]]
    elif kind == "PyTorchJob":
        pods = [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    elif kind == "ClusterTrainingRuntime":
        pods = [j["template"]["spec"]["template"]["spec"] for j in spec["template"]["spec"]["replicatedJobs"]]
    elif kind == "ServingRuntime":
        pods = [spec]
    elif kind == "InferenceService":
        pods = [spec["transformer"]] if "transformer" in spec else []  # a shadow predictor has none
        pred = spec["predictor"]
        out = [(pred, {"name": "predictor-model", **pred["model"]})]
        return out + [(p, c) for p in pods for c in p.get("containers", [])]
    return [(p, c) for p in pods for c in p.get("containers", [])]


def test_every_container_is_locked_down_and_sized(rendered: dict[str, list[dict[str, Any]]]) -> None:
    problems, count = [], 0
    for _, doc in all_docs(rendered):
        for pod, c in containers(doc):
            count += 1
            where = f"{doc_id(doc)}:{c['name']}"
            image = c.get("image")
            if image is not None and (image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]):
                problems.append(f"{where}: image {image!r} has no pinned tag or digest")
            sc = c.get("securityContext") or {}
            if doc["kind"] != "InferenceService" or c["name"] != "predictor-model":
                if sc.get("readOnlyRootFilesystem") is not True:
                    problems.append(f"{where}: readOnlyRootFilesystem is not true")
                if sc.get("allowPrivilegeEscalation") is not False:
                    problems.append(f"{where}: allowPrivilegeEscalation is not false")
                if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
                    problems.append(f"{where}: capabilities are not all dropped")
            non_root = sc.get("runAsNonRoot", (pod.get("securityContext") or {}).get("runAsNonRoot"))
            if non_root is not True:
                problems.append(f"{where}: runAsNonRoot is not true")
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                if not {"cpu", "memory"} <= set(res.get(part) or {}):
                    problems.append(f"{where}: resources.{part} lacks cpu or memory")
    assert not problems, "\n".join(problems)
    assert count >= 12


def test_inference_service_pins_an_immutable_version(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for env in ("staging", "production"):
        isvc = next(d for d in rendered[env] if d["kind"] == "InferenceService" and d["metadata"]["name"] == "fraud")
        stable = isvc["metadata"]["annotations"]["mlops.platform/stable-version"]
        uri = isvc["spec"]["predictor"]["model"]["storageUri"]
        assert re.fullmatch(r"s3://mlops-artifacts/models/fraud/v\d+/", uri), uri
        assert uri.endswith(f"/v{stable}/")
        assert isvc["spec"]["transformer"]["containers"], "transformer missing"
        for part in ("predictor", "transformer"):
            assert 1 <= isvc["spec"][part]["minReplicas"] <= isvc["spec"][part]["maxReplicas"]
    prod = next(d for d in rendered["production"]
                if d["kind"] == "InferenceService" and d["metadata"]["name"] == "fraud")
    assert prod["spec"]["predictor"]["minReplicas"] == 2


def test_production_canary_renders_and_validates(tmp_path: Path, kit: Any, model_validator: Any) -> None:
    shutil.copytree(kit.repo / "infra", tmp_path / "infra")
    cfg = DeliveryConfig()
    for to, pct in (("staging", None), ("canary", 10)):
        apply_change(plan_promotion(cfg, tmp_path, "fraud", 5, to, percent=pct), cfg, tmp_path)
    docs = [d for d in yaml.safe_load_all(kit.render("infra/overlays/production", cwd=tmp_path)) if d]
    isvc = next(d for d in docs if d["kind"] == "InferenceService" and d["metadata"]["name"] == "fraud")
    assert isvc["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert isvc["spec"]["predictor"]["model"]["storageUri"].endswith("/v5/")
    assert isvc["spec"]["predictor"]["minReplicas"] == 2  # the other production patch still applies
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Serverless"
    assert list(model_validator.errors(isvc, "V1beta1InferenceService")) == []


def test_production_shadow_renders_and_validates(tmp_path: Path, kit: Any, model_validator: Any) -> None:
    from mlops_delivery import plan_shadow
    from mlops_delivery.shadow_stage import apply_shadow

    shutil.copytree(kit.repo / "infra", tmp_path / "infra")
    cfg = DeliveryConfig()
    apply_change(plan_promotion(cfg, tmp_path, "fraud", 5, "staging"), cfg, tmp_path)
    apply_shadow(plan_shadow(cfg, tmp_path, "fraud", 5, fraction=0.5), cfg, tmp_path)
    docs = [d for d in yaml.safe_load_all(kit.render("infra/overlays/production", cwd=tmp_path)) if d]
    isvcs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "InferenceService"}
    assert set(isvcs) == {"fraud", "fraud-shadow"}
    shadow, live = isvcs["fraud-shadow"], isvcs["fraud"]
    assert shadow["metadata"]["namespace"] == "mlops-production" and "transformer" not in shadow["spec"]
    assert shadow["spec"]["predictor"]["model"]["storageUri"].endswith("/v5/")
    assert shadow["spec"]["predictor"]["minReplicas"] == 1
    assert live["spec"]["predictor"]["model"]["storageUri"].endswith("/v1/")  # the live model is untouched
    assert live["metadata"]["annotations"]["mlops.platform/shadow-version"] == "5"
    env_from = live["spec"]["transformer"]["containers"][0]["envFrom"]
    assert {"configMapRef": {"name": "fraud-shadow-env", "optional": True}} in env_from
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fraud-shadow-env")
    assert config["data"] == {"MLOPS__SERVING__TABULAR__SHADOW__FRACTION": "0.5",
                              "MLOPS__SERVING__TABULAR__SHADOW__URL": "fraud-shadow-predictor"}
    for isvc in isvcs.values():
        assert list(model_validator.errors(isvc, "V1beta1InferenceService")) == []
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "fraud-shadow-serving")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": "fraud-shadow"}
    # the transformer reads these keys through the one config layer: they must load as valid settings, by these names
    from mlops_config import ServingConfig, load_config

    mirrored = {"fraction": 0.5, "url": "fraud-shadow-predictor"}
    assert ServingConfig(tabular={"shadow": mirrored}).tabular.shadow.fraction == 0.5
    shadow_cfg = load_config("production", "fraud", config_dir=kit.repo / "configs", environ=dict(config["data"]),
                             check_secrets=False).config.serving.tabular.shadow
    assert (shadow_cfg.fraction, shadow_cfg.url) == (0.5, "fraud-shadow-predictor")


def test_pytorchjob_is_multi_node_hybrid_shard_over_nccl(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for env in ("staging", "production"):
        job = next(d for d in rendered[env] if d["kind"] == "PyTorchJob")
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert set(specs) == {"Master", "Worker"}
        nodes = sum(s["replicas"] for s in specs.values())
        env_cm = next(d for d in rendered[env]
                      if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "fraud-train-env")
        data = env_cm["data"]
        assert data["MLOPS__TRAINING__FSDP__SHARDING_STRATEGY"] == "HYBRID_SHARD"
        assert data["MLOPS__TRAINING__BACKEND"] == "nccl"
        assert int(data["MLOPS__TRAINING__NNODES"]) == nodes == 2
        assert int(data["MLOPS__TRAINING__NPROC"]) == int(job["spec"]["nprocPerNode"])
        assert data["MLOPS__TRAINING__RDZV_ENDPOINT"].startswith(f"{job['metadata']['name']}-master-0:")
        assert data["MLOPS_PROFILE"] == env
        for spec in specs.values():
            c = spec["template"]["spec"]["containers"][0]
            assert c["resources"]["limits"]["nvidia.com/gpu"] == data["MLOPS__TRAINING__NPROC"]
            assert {"configMapRef": {"name": "fraud-train-env"}} in c["envFrom"]


def test_argocd_apps_staging_automated_production_gated(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = {d["metadata"]["name"]: d for d in rendered["argocd"]}
    staging, production, project = docs["fraud-staging"], docs["fraud-production"], docs["mlops-platform"]
    assert staging["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    assert staging["spec"]["source"]["path"] == "infra/overlays/staging"
    assert production["spec"]["source"]["path"] == "infra/overlays/production"
    assert production["spec"]["syncPolicy"]["automated"]["prune"] is False
    windows = [w for w in project["spec"]["syncWindows"] if "fraud-production" in w["applications"]]
    assert windows and windows[0]["kind"] == "allow"
    assert docs["mlops-platform-services"]["spec"]["source"]["path"] == "infra/platform"
    assert "*" not in project["spec"]["sourceRepos"]
    assert all(d["namespace"] != "*" and d["server"] != "*" for d in project["spec"]["destinations"])
    for app in (staging, production, docs["mlops-platform-services"]):
        assert app["spec"]["project"] == "mlops-platform"
        assert app["spec"]["source"]["repoURL"] in project["spec"]["sourceRepos"]
        assert {"server": app["spec"]["destination"]["server"], "namespace": app["spec"]["destination"]["namespace"]} \
            in project["spec"]["destinations"]
    health = docs["argocd-cm"]["data"]["resource.customizations.health.serving.kserve.io_InferenceService"]
    assert 'hs.status = "Healthy"' in health and 'hs.status = "Degraded"' in health


def test_monitoring_is_wired_in(rendered: dict[str, list[dict[str, Any]]], kit: Any) -> None:
    docs = rendered["production"]
    dashboard = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "grafana-dashboard-fraud")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert yaml.safe_load(next(iter(dashboard["data"].values())))["panels"]
    rules = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert sum(len(g["rules"]) for g in rules["spec"]["groups"]) >= 3
    cron = next(d for d in docs if d["kind"] == "CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_trainjob_runs_the_pytorchjob_worker_on_the_cluster_runtime(rendered: dict[str, list[dict[str, Any]]]) -> None:
    runtime = next(d for d in rendered["cluster"] if d["kind"] == "ClusterTrainingRuntime")
    node_job = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node")
    pod = node_job["template"]["spec"]["template"]["spec"]
    node = next(c for c in pod["containers"] if c["name"] == "node")  # the container the torch plugin drives
    assert "command" not in node and "args" not in node  # the image's entrypoint: `mlops train run`
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v}
    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
    for env in ("staging", "production"):
        job = next(d for d in rendered[env] if d["kind"] == "TrainJob")
        pytorch = next(d for d in rendered[env] if d["kind"] == "PyTorchJob")
        master = pytorch["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        pt_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in master["volumes"]
                     if "persistentVolumeClaim" in v}
        pt_mounts = {m["name"]: m["mountPath"] for m in master["containers"][0]["volumeMounts"]}
        assert claims == pt_claims and mounts["checkpoints"] == pt_mounts["checkpoints"]  # the same DCP store
        assert node["envFrom"] == master["containers"][0]["envFrom"]
        assert job["spec"]["suspend"] is True  # a template: train.yml submits named copies
        ref = job["spec"]["runtimeRef"]
        assert (ref["kind"], ref["name"]) == ("ClusterTrainingRuntime", runtime["metadata"]["name"])
        data = next(d for d in rendered[env] if d["kind"] == "ConfigMap"
                    and d["metadata"]["name"] == "fraud-train-env")["data"]
        trainer = job["spec"]["trainer"]
        assert trainer["numNodes"] == int(data["MLOPS__TRAINING__NNODES"]) == 2  # multi-node
        assert trainer["numProcPerNode"] == int(data["MLOPS__TRAINING__NPROC"])
        assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == data["MLOPS__TRAINING__NPROC"]
        assert trainer["image"] == master["containers"][0]["image"]
        env_vars = {e["name"]: e for e in trainer["env"]}
        names = [e["name"] for e in trainer["env"]]
        assert names.index("MLOPS_RUN_NAME") < names.index("MLOPS__TRAINING__RDZV_ENDPOINT")  # $(..) expands
        assert env_vars["MLOPS__TRAINING__RDZV_ENDPOINT"]["value"] == \
            "$(MLOPS_RUN_NAME)-node-0-0.$(MLOPS_RUN_NAME):29400"
        assert "jobset.sigs.k8s.io/jobset-name" in env_vars["MLOPS_RUN_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
