"""Both online readers against a Redis that speaks TLS only, with ACL users, alone and as a 3-node Redis Cluster.

Each server is started here (``tests/support``: a throwaway CA made at test time, ``redis-server --port 0
--tls-port``, ``--user`` ACL rules, ``--cluster-enabled`` nodes joined by ``redis-cli --cluster create``). The
repository's views are materialized through Feast with the platform's own store config (``rediss://writer@…``,
``redis_type: redis_cluster``, the password from an env var, the CA file) by a ``writer`` user; serving reads as
``serving``, a user allowed to read only. For every FeatureService of ``feature_repo/`` the direct reader's raw
read equals ``get_online_features(...).to_dict()``, value by value and type by type, and ``OnlineFeatures``
answers the same with either reader, on batches whose entities hash to every node of the cluster.
"""

from __future__ import annotations

import random
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from mlops_config import FeaturesConfig
from mlops_features import FeatureStoreUnavailableError, OnlineFeatures, apply_repo, materialize, open_store
from mlops_features.online_direct import DirectRedisReader
from mlops_features.online_parity import differences, same
from mlops_features.online_plan import ServicePlan, compute_on_demand
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import RedisClusterServers, RedisServer, make_tls_files

pytestmark = pytest.mark.integration

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
REPO_ROOT = Path(__file__).resolve().parents[3]
START = datetime(2026, 11, 1, tzinfo=UTC)
FRESH = datetime(2026, 11, 4, tzinfo=UTC)
STALE = datetime(2026, 11, 10, 12, tzinfo=UTC)
WRITER_VAR, SERVING_VAR = "MLOPS_TEST_REDIS_WRITER_SECRET", "MLOPS_TEST_REDIS_SERVING_SECRET"
WRITER_PASSWORD, SERVING_PASSWORD = "wr1ter,=x", "s3rving:p@ss"  # ACL rules: no spaces
DEFAULT_PASSWORD = "default-only"
USERS = (f"writer on >{WRITER_PASSWORD} ~* &* +@all",
         # reads only: HMGET and what a (cluster) client asks on connect
         f"serving on >{SERVING_PASSWORD} ~* resetchannels -@all +@read +@connection +cluster|slots +cluster|shards"
         " +cluster|nodes +command +readonly")


@dataclass
class Secure:
    kind: str
    servers: list[RedisServer]
    features: FeaturesConfig
    """The serving user's config (online_reader: direct)."""
    root: Path
    users: list[str]
    merchants: list[str]


def _write_transactions(root: Path, source_dir: str) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(2929)
    src = root / source_dir
    src.mkdir(parents=True, exist_ok=True)
    n = 400
    users = [f"U{i:04d}" for i in range(80)]
    merchants = [f"M{i:05d}" for i in range(25)]
    stamps = pd.to_datetime(START) + pd.to_timedelta(np.sort(rng.uniform(0, 3 * 86_400, n)), unit="s")
    stamps = stamps.floor("us")
    tx = pd.DataFrame({
        "transaction_id": [f"T{i:05d}" for i in range(n)],
        "user_id": [users[i % 80] for i in range(n)],
        "merchant_id": [merchants[int(rng.integers(0, 25))] for _ in range(n)],
        "event_timestamp": stamps, "created": stamps,
        "amount": np.round(rng.uniform(1, 500, n), 2), "currency": "EUR", "category": "grocery", "country": "DE",
        "device": "ios", "channel": "online", "is_fraud": (rng.uniform(size=n) < 0.1).astype(np.int8)})
    pq.write_table(pa.Table.from_pandas(tx, schema=FRAUD_SCHEMA, preserve_index=False), src / "transactions.parquet")
    return users, merchants


@pytest.fixture(scope="module", params=["tls_acl", "cluster_tls_acl"])
def secure(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv(WRITER_VAR, WRITER_PASSWORD)
    monkeypatch.setenv(SERVING_VAR, SERVING_PASSWORD)
    base = tmp_path_factory.mktemp(request.param)
    tls = make_tls_files(base / "tls")
    cluster = request.param.startswith("cluster")
    if cluster:
        group = RedisClusterServers(base / "cluster", password=DEFAULT_PASSWORD, tls=tls, users=USERS)
        servers = group.start().nodes
    else:
        servers = [RedisServer(base, password=DEFAULT_PASSWORD, tls=tls, users=USERS).start()]
    try:
        root = base / "repo"
        shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo",
                        ignore=shutil.ignore_patterns("__pycache__"))
        port = servers[0].port
        writer = FeaturesConfig(feature_service="fraud_v1",
                                online_store="redis", redis_url=f"rediss://writer@127.0.0.1:{port}/0",
                                redis_password_env=WRITER_VAR, redis_ca_cert=str(tls.ca),
                                redis_type="redis_cluster" if cluster else "redis",
                                feast_project=f"t_{uuid.uuid4().hex[:10]}", online_ttl_as_of=FRESH,
                                online_parity_sample=0.0, redis_timeout_s=5)
        users, merchants = _write_transactions(root, writer.source_dir)
        apply_repo(writer, root)
        materialize(writer, root, end=FRESH)
        serving = writer.model_copy(update={"redis_url": f"rediss://serving@127.0.0.1:{port}/0",
                                            "redis_password_env": SERVING_VAR})
        yield Secure(request.param, servers, serving, root, users, merchants)
    finally:
        for server in servers:
            server.stop()
        monkeypatch.undo()


def _rows(secure: Secure, n: int, seed: int) -> list[dict[str, Any]]:
    """Known users and merchants, unknown ones, repeats."""
    rng = random.Random(seed)
    users = [*secure.users, "U-nobody-1", "U-nobody-2"]
    merchants = [*secure.merchants, "M-nobody"]
    return [{"user_id": rng.choice(users), "merchant_id": rng.choice(merchants),
             "amount": round(rng.uniform(1, 900), 2)} for _ in range(n)]


def _admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(**server.client_kwargs())


def test_the_servers_are_what_the_readers_are_tested_on(secure: Secure) -> None:
    """TLS only (no plain port), the serving user cannot write, and in the cluster every node holds entities."""
    for server in secure.servers:
        assert "--port" in server.argv and server.argv[server.argv.index("--port") + 1] == "0"
    reader = redis.Redis(**{**secure.servers[0].client_kwargs(), "username": "serving",
                            "password": SERVING_PASSWORD})
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.set("mlops-test-serving-write", 1)
    project = secure.features.feast_project.encode()
    per_node = [sum(1 for k in _admin(s).scan_iter(count=10_000) if k.endswith(project)) for s in secure.servers]
    assert all(per_node) and sum(per_node) >= len(secure.users), per_node
    if secure.kind.startswith("cluster"):
        assert len(per_node) == 3


@pytest.mark.parametrize("n", [1, 9, 64, 256])
def test_the_raw_read_equals_feasts_to_dict(secure: Secure, n: int) -> None:
    store = open_store(secure.features, secure.root)
    assert store.config.online_store.redis_type.value == ("redis_cluster" if "cluster" in secure.kind else "redis")
    services = sorted(s.name for s in store.list_feature_services())
    assert {"fraud_v1", "fraud_rt_v1"} <= set(services)
    for name in services:
        service = store.get_feature_service(name)
        plan = ServicePlan.of(store, service)
        reader = DirectRedisReader(store, plan)
        rows = _rows(secure, n, seed=n)
        response = store.get_online_features(features=service, entity_rows=rows)
        expected = response.to_dict()
        got, _stamps = reader.read(rows)
        for od in plan.on_demand:
            got.update(compute_on_demand(plan, od, got, rows))
        compared = [k for k in expected if k not in ("user_id", "merchant_id", "amount")]
        assert compared
        served = 0
        for feature in compared:
            for i, (mine, theirs) in enumerate(zip(got[feature], expected[feature], strict=True)):
                assert same(mine, theirs), (name, n, feature, rows[i], mine, theirs)
                served += theirs is not None
        assert served or n == 1, (name, n)


def test_the_lookup_answers_the_same_with_either_reader(secure: Secure) -> None:
    """At FRESH and at STALE, when some of the same entities have expired (ttl applied by both)."""
    for name in ("fraud_v1", "fraud_rt_v1"):
        features = secure.features.model_copy(update={"feature_service": name})
        direct = OnlineFeatures(features, secure.root, contract=FRAUD_CONTRACT)
        feast = OnlineFeatures(features.model_copy(update={"online_reader": "feast"}), secure.root,
                               contract=FRAUD_CONTRACT)
        assert (direct.reader, feast.reader) == ("direct", "feast")
        rows = _rows(secure, 64, seed=7)
        known = {}
        for as_of in (FRESH, STALE):
            mine = direct.get(rows, as_of=as_of)
            assert differences(mine, feast.get(rows, as_of=as_of)) == [], (name, as_of)
            known[as_of] = sum(not r["_unknown_entity"] for r in mine)
        assert 0 < known[STALE] < known[FRESH] < len(rows), known


def test_a_wrong_password_is_an_outage_for_both_readers(secure: Secure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVING_VAR, SERVING_PASSWORD[:-1])
    rows = _rows(secure, 9, seed=9)
    for reader in ("direct", "feast"):
        online = OnlineFeatures(secure.features.model_copy(update={"online_reader": reader}), secure.root,
                                contract=FRAUD_CONTRACT)
        assert online.reader == reader
        with pytest.raises(FeatureStoreUnavailableError, match="online store unreachable"):
            online.get(rows)
