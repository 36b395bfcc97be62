"""The rehearsal's MLflow users per workload and environment (``mlops_pipeline.rehearsal.mlflow_roles``) on a real
``mlflow server --app-name basic-auth`` on PostgreSQL, started as the rehearsal starts it (``server`` in conftest.py:
``topology.launch_mlflow``, default_permission NO_PERMISSIONS, one admin): each role does what its workload does and
is refused the rest; the probe the tracking step runs passes, and fails on a reader granted EDIT. What MLflow cannot
separate (the monitor may register a version of its own model, anyone may create a registered model) is asserted as
allowed, with the defence that holds: a version without training's run and tags is never published."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from mlops_config import TrackingConfig
from mlops_pipeline import PipelineError
from mlops_pipeline.rehearsal.mlflow_roles import (
    GRANTS,
    Environment,
    acting_as,
    passwords,
    permission_probe,
    prefix,
    provision,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GATES = ("quality", "reproducibility", "latency", "contract")


def _envs(server: tuple[str, tuple[str, str]], grants: Any = GRANTS) -> tuple[dict[str, Environment], str]:
    tag = secrets.token_hex(3)  # each test its own environments on the shared server
    staging, production = f"t{tag}-staging", f"t{tag}-production"
    users = passwords([staging, production], "fraud")
    return provision(server[0], server[1], users, [staging, production], "fraud-detection", "fraud", grants), staging


def _tracking(url: str, env: Environment, root: Path) -> TrackingConfig:
    return TrackingConfig(uri=url, artifact_location=(root / "unused").as_uri(), experiment=env.experiment,
                          registered_model_prefix=prefix(env.namespace),
                          username_env="MLFLOW_TRACKING_USERNAME", password_env="MLFLOW_TRACKING_PASSWORD")


def _refused(call: Any) -> bool:
    """``True`` when the server refused ``call`` for lack of permission (403), not for any other reason."""
    from mlflow.exceptions import MlflowException
    from requests import HTTPError  # what the artifact proxy's client raises

    try:
        call()
    except MlflowException as exc:
        return exc.error_code == "PERMISSION_DENIED" or "403" in str(exc)
    except HTTPError as exc:
        return exc.response is not None and exc.response.status_code == 403
    return False


def test_the_probe_passes_with_the_roles_grants(server: tuple[str, tuple[str, str]]) -> None:
    envs, staging = _envs(server)
    probe = permission_probe(server[0], envs, staging)
    assert probe.pop("users") == sorted(f"{staging}.fraud-{r}" for r in ("delivery", "monitor", "reader", "trainer"))
    assert probe == dict.fromkeys(probe, True) and len(probe) == 12


@pytest.mark.parametrize(("role", "loose", "broken"), [
    ("reader", ("READ", "EDIT"), "reader_alias_refused"),
    ("monitor", ("EDIT", "MANAGE"), "monitor_run_refused"),
    ("delivery", ("EDIT", "MANAGE"), "delivery_run_refused"),
])
def test_a_mis_granted_role_fails_the_probe(server: tuple[str, tuple[str, str]], role: str, loose: tuple[str, str],
                                            broken: str) -> None:
    envs, staging = _envs(server, {**GRANTS, role: loose})
    with pytest.raises(PipelineError, match=f"'{broken}': False"):
        permission_probe(server[0], envs, staging)


def test_each_role_does_its_workloads_calls_and_no_more(server: tuple[str, tuple[str, str]], tmp_path: Path) -> None:
    from mlops_core import lifecycle, mlflow_client
    from mlops_delivery import PublishError
    from mlops_delivery.publish import download_version

    url = server[0]
    envs, staging = _envs(server)
    env = envs[staging]
    other = next(e for n, e in envs.items() if n != staging)
    tracking = _tracking(url, env, tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"\0" * 16)

    with acting_as(env, "trainer"):  # training: a run, its artifacts (through the proxy), a version, an alias
        client = mlflow_client(tracking, tmp_path)
        run = client.create_run(env.experiment_id)
        client.log_metric(run.info.run_id, "f1", 0.5)
        client.log_artifacts(run.info.run_id, str(tmp_path / "model"), "model")
        v1 = client.create_model_version(env.model, source=f"{run.info.artifact_uri}/model", run_id=run.info.run_id,
                                         tags={"mlops.weights_sha256": "0" * 64})
        lifecycle.promote(tracking, tmp_path, "fraud", v1.version, "candidate", reason="trained", actor="trainer")
        assert _refused(lambda: client.create_run(other.experiment_id))  # not the other environment's
        assert _refused(lambda: client.create_model_version(other.model, source="mlflow-artifacts:/x"))

    with acting_as(env, "delivery"):  # promotion: alias moves under the lifecycle lock, artifact reads
        report = {"model": "fraud", "candidate": {"version": v1.version},
                  "gates": [{"name": n, "passed": True, "reason": "hand-made"} for n in GATES]}
        lifecycle.promote(tracking, tmp_path, "fraud", v1.version, "staging", reason="gates", actor="delivery",
                          gate_report=report)
        client = mlflow_client(tracking, tmp_path)
        assert [a.path for a in client.list_artifacts(run.info.run_id, "model")] == ["model/weights.bin"]
        assert _refused(lambda: client.create_run(env.experiment_id))
        assert _refused(lambda: client.log_metric(run.info.run_id, "f1", 0.9))

    with acting_as(env, "monitor"):  # the drift job: alias moves on its model only, no run, no artifact
        client = mlflow_client(tracking, tmp_path)
        client.set_registered_model_alias(env.model, "fallback", v1.version)
        client.delete_registered_model_alias(env.model, "fallback")  # the rollback removes the fallback alias
        assert lifecycle.aliases(tracking, tmp_path, "fraud") == {"staging": v1.version}
        assert _refused(lambda: client.create_run(env.experiment_id))
        assert _refused(lambda: client.log_artifacts(run.info.run_id, str(tmp_path / "model"), "forged"))
        assert _refused(lambda: client.set_registered_model_alias(other.model, "champion", "1"))
        assert _refused(lambda: client.get_experiment(other.experiment_id))
        # What MLflow cannot refuse it (alias moves need update on the model, as version creation does): a
        # version of its own model, from training's run (the server admits no proxied source outside the run
        # named) or from outside the platform's artifacts, tagged as training tags ...
        again = client.create_model_version(env.model, source=f"{run.info.artifact_uri}/model",
                                            run_id=run.info.run_id)
        outside = client.create_model_version(env.model, source="s3://elsewhere/model")
        client.set_model_version_tag(env.model, outside.version, "mlops.weights_sha256", "0" * 64)
        assert (again.version, outside.version) == ("2", "3")
    # ... adds no model: `again` is training's own export; `outside` has no training run, so nothing is published
    with acting_as(env, "delivery"), pytest.raises(PublishError, match="has no run"):
        download_version(tracking, tmp_path, "fraud", int(outside.version), tmp_path / "dl")

    with acting_as(env, "reader"):
        client = mlflow_client(tracking, tmp_path)
        assert client.get_registered_model(env.model).aliases == {"staging": v1.version}
        assert _refused(lambda: client.set_registered_model_alias(env.model, "champion", v1.version))
        assert _refused(lambda: client.create_model_version(env.model, source="mlflow-artifacts:/x"))
        assert _refused(lambda: client.get_registered_model(other.model))
