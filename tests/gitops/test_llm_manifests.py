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
    assert set(rendered) == {"ServiceAccount", "ServingRuntime", "InferenceService"}
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
