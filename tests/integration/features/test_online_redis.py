"""The online-store suite against a real Redis server, and recovery after a Redis outage.

The suite is tests/unit/features/test_online.py's ``OnlineSuite``; only the store differs. Each class uses
its own Feast project, so its keys never meet another test's; ``teardown`` deletes them.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import FeatureStoreUnavailableError, OnlineFeatures, materialize, open_store, prepare_local_data
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import RedisServer, sample_as_of, shared_redis_url

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
SUITE = REPO_ROOT / "tests/unit/features/test_online.py"
_spec = importlib.util.spec_from_file_location("features_online_suite", SUITE)
assert _spec is not None and _spec.loader is not None
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)


class TestRedis(_suite.OnlineSuite):  # type: ignore[name-defined,misc]
    @pytest.fixture(scope="class")
    @classmethod
    def online_overrides(cls, redis_url_class: str) -> dict[str, Any]:
        return {"online_store": "redis", "redis_url": redis_url_class, "feast_project": f"t_{uuid.uuid4().hex[:10]}",
                "online_ttl_as_of": sample_as_of()}


@pytest.fixture(scope="module")
def redis_url_class() -> str:
    """The shared test Redis, like the ``redis_url`` fixture but once per module (fails, not skips, when down)."""
    return shared_redis_url()


def _copy_repo(root: Path) -> None:
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))


def test_lookups_fail_fast_during_an_outage_and_recover_by_themselves(
    own_redis_server: RedisServer, tmp_path: Path
) -> None:
    _copy_repo(tmp_path)
    features = FeaturesConfig(feature_service="fraud_v1",
                              online_store="redis", redis_url=f"redis://127.0.0.1:{own_redis_server.port}/0",
                              online_ttl_as_of=sample_as_of())
    prepare_local_data(DataConfig(rows=600, days=2, users=30, merchants=10), features, tmp_path,
                       contract=FRAUD_CONTRACT, seed=3)
    online = OnlineFeatures(features, tmp_path, contract=FRAUD_CONTRACT)
    row = {"user_id": "U000001", "merchant_id": "M00001"}
    before = online.get([row])[0]
    assert not before["unknown_user"]

    own_redis_server.stop()
    t0 = time.perf_counter()
    with pytest.raises(FeatureStoreUnavailableError, match="online store unreachable"):
        online.get([row])
    assert time.perf_counter() - t0 < 1.0  # features.redis_timeout_s, no retry back-off
    assert online.ping() is False

    own_redis_server.start()  # back, but empty (no persistence): lookups work again, with defaults
    assert online.ping() is True
    assert online.get([row])[0]["unknown_user"] is True
    materialize(features, tmp_path)
    assert online.get([row])[0] == before  # the same object, no restart


def test_teardown_removes_this_projects_keys(redis_url: str, tmp_path: Path) -> None:
    project = f"t_{uuid.uuid4().hex[:10]}"
    _copy_repo(tmp_path)
    features = FeaturesConfig(feature_service="fraud_v1",
                              online_store="redis", redis_url=redis_url, feast_project=project)
    prepare_local_data(DataConfig(rows=300, days=1, users=20, merchants=5), features, tmp_path,
                       contract=FRAUD_CONTRACT, seed=4)
    client = redis.Redis.from_url(redis_url)
    mine = [k for k in client.scan_iter(count=10_000) if project.encode() in k]
    assert len(mine) == 20 + 5
    open_store(features, tmp_path).teardown()
    assert not [k for k in client.scan_iter(count=10_000) if project.encode() in k]
