"""The rehearsal's per-workload credentials (``mlops_pipeline.rehearsal.workloads``) on a real redis-server that
loads the ACL rendered from ``infra/platform/redis.yaml``: the probe the platform step runs passes there, and fails
on an ACL whose reader may write; the serving containers' env is what their manifests give their pods."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_pipeline import PipelineError
from mlops_pipeline.rehearsal.workloads import acl_probe, container_env, namespace, redis_acl
from tests.support import RedisServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _serve(tmp_path: Path, acl: str) -> RedisServer:
    (tmp_path / "users.acl").write_text(acl)
    return RedisServer(tmp_path, aclfile=tmp_path / "users.acl").start()


def test_the_platform_acl_holds_on_a_real_server(tmp_path: Path) -> None:
    acl, users = redis_acl(REPO)
    assert "@" not in "".join(line.split()[2] for line in acl.splitlines() if " on " in line)  # every hash put in
    assert namespace(REPO) == "mlops-staging"
    server = _serve(tmp_path, acl)
    try:
        probe = acl_probe(server.url, users, "mlops-staging", "fraud_detection_staging")
    finally:
        server.stop()
    assert probe == {"users": ["mlops-production.fraud-reader", "mlops-production.fraud-writer",
                               "mlops-staging.fraud-reader", "mlops-staging.fraud-writer"],
                     "anonymous_refused": True, "reader_reads": True, "reader_write_refused": True,
                     "other_env_read_refused": True}


def test_a_reader_that_may_write_fails_the_probe(tmp_path: Path) -> None:
    acl, users = redis_acl(REPO)
    loose = "\n".join(line + " +hset" if line.startswith("user mlops-staging.fraud-reader") else line
                      for line in acl.splitlines()) + "\n"
    server = _serve(tmp_path, loose)
    try:
        with pytest.raises(PipelineError, match="'reader_write_refused': False"):
            acl_probe(server.url, users, "mlops-staging", "fraud_detection_staging")
    finally:
        server.stop()


def test_serving_containers_get_only_their_manifests_credentials() -> None:
    store = {"REDIS_PASSWORD": "reader-pw", "FEAST_REGISTRY_PASSWORD": "registry-pw", "MLFLOW_TRACKING_PASSWORD": "x"}
    transformer = container_env(REPO, "transformer", "mlops-staging", store)
    assert transformer["REDIS_USERNAME"] == "mlops-staging.fraud-reader"
    assert (transformer["REDIS_PASSWORD"], transformer["FEAST_REGISTRY_PASSWORD"]) == ("reader-pw", "registry-pw")
    assert transformer["MLOPS__TRACKING__PASSWORD_ENV"] == "null" and "MLFLOW_TRACKING_PASSWORD" not in transformer
    predictor = container_env(REPO, "predictor", "mlops-staging", store)
    assert not {"REDIS_USERNAME", "REDIS_PASSWORD", "FEAST_REGISTRY_PASSWORD"} & set(predictor)
    assert predictor["MLOPS__FEATURES__REDIS_PASSWORD_ENV"] == "null"
