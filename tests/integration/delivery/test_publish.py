"""A promotion publishes the version's exported model to its ``storageUri`` (a local folder stands in for the
bucket) before the overlay names it; the published files hash to what the registry recorded; a tampered or
partial target is refused and the overlay stays as it was."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mlops_config import DeliveryConfig, TrackingConfig
from mlops_delivery import PublishError, promote_version, publish_model

pytestmark = pytest.mark.integration

STAGING = "infra/overlays/staging/model-fraud.yaml"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def world(tmp_path: Path, repo_root: Path, register_exported: Callable[[Path, str, int], str]
          ) -> tuple[Path, TrackingConfig, DeliveryConfig, Path]:
    from mlops_core import lifecycle

    root = tmp_path / "repo"
    shutil.copytree(repo_root / "infra", root / "infra")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    tracking = TrackingConfig()
    for seed in (1, 2):
        version = register_exported(root, "fraud", seed)
        lifecycle.promote(tracking, root, "fraud", version, "candidate", reason="trained", actor="test")
    report = {"model": "fraud", "candidate": {"version": "2"},
              "gates": [{"name": n, "passed": True, "reason": "hand-made"}
                        for n in ("quality", "reproducibility", "latency", "contract")]}
    lifecycle.promote(tracking, root, "fraud", "2", "staging", reason="gates passed", actor="test",
                      gate_report=report)
    bucket = tmp_path / "bucket"
    delivery = DeliveryConfig(storage_uri_template=f"{bucket.as_uri()}/models/{{model}}/v{{version}}/")
    return root, tracking, delivery, bucket


def test_promotion_publishes_the_registered_weights_before_naming_them(world, register_exported) -> None:
    from mlops_core import mlflow_client
    from mlops_model import load_exported

    root, tracking, delivery, bucket = world
    change = promote_version(delivery, tracking, root, "fraud", 2, "staging")
    assert change.changed and change.after.stable_version == 2
    uri = change.after.storage_uri
    assert uri == f"{bucket.as_uri()}/models/fraud/v2/" and f"storageUri: {uri}" in (root / STAGING).read_text()
    target = bucket / "models" / "fraud" / "v2"
    # The bytes at the URI are the bytes the training run logged, and they load to the registered weights.
    run_id = mlflow_client(tracking, root).get_model_version("fraud", "2").run_id
    logged = Path(mlflow_client(tracking, root).download_artifacts(run_id, "model", str(root / "logged")))
    assert _sha256(target / "model.safetensors") == _sha256(logged / "model.safetensors")
    tag = mlflow_client(tracking, root).get_model_version("fraud", "2").tags["mlops.weights_sha256"]
    _, meta = load_exported(target, verify=True)
    assert meta["weights_sha256"] == tag
    assert change.evidence["published"]["weights_sha256"] == tag
    # Publishing the same version again is a verified no-op.
    again = publish_model(tracking, root, "fraud", 2, uri)
    assert not again.uploaded and again.weights_sha256 == tag


def test_a_tampered_target_is_refused_and_the_overlay_is_left_alone(world) -> None:
    root, tracking, delivery, bucket = world
    uri = f"{bucket.as_uri()}/models/fraud/v2/"
    publish_model(tracking, root, "fraud", 2, uri)
    weights = bucket / "models" / "fraud" / "v2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    before = (root / STAGING).read_text()
    with pytest.raises(PublishError, match="does not match its SHA-256"):
        promote_version(delivery, tracking, root, "fraud", 2, "staging")
    assert (root / STAGING).read_text() == before


def test_a_partial_or_foreign_target_is_refused(world) -> None:
    root, tracking, _, bucket = world
    target = bucket / "models" / "fraud" / "v2"
    target.mkdir(parents=True)
    (target / "model.json").write_text("{}")  # an upload that died before the weights and the marker
    with pytest.raises(PublishError, match=r"holds \['model.json'\] but no publish.json"):
        publish_model(tracking, root, "fraud", 2, target.as_uri())
    # Another version's model at this URI: refused, never overwritten.
    shutil.rmtree(target)
    publish_model(tracking, root, "fraud", 2, target.as_uri())
    with pytest.raises(PublishError, match="already holds a different model"):
        publish_model(tracking, root, "fraud", 1, target.as_uri())
    assert (target / "model.safetensors").is_file()


def test_a_version_without_recorded_weights_is_refused(world) -> None:
    from mlops_core import mlflow_client
    root, tracking, _, bucket = world
    mlflow_client(tracking, root).delete_model_version_tag("fraud", "1", "mlops.weights_sha256")
    with pytest.raises(PublishError, match=r"has no 'mlops\.weights_sha256' tag"):
        publish_model(tracking, root, "fraud", 1, (bucket / "x").as_uri())
