"""The direct online reader against Feast's own, on a real Redis: the same values, of the same types.

One Feast repository (a copy of ``feature_repo/`` plus a test-only view holding every Feast scalar type and
their lists, served with the repo's two views as ``all_types_v1``) is applied and materialized once into the
shared test Redis under a project of its own. Its entities are known, unknown, partially materialized (in one of
the two user views only, a feature missing from a user's hash, null and NaN values), or stale at the chosen
``as_of``. For every FeatureService of the repository and batches of 1, 9, 64 and 256 rows:

- the reader's raw columns equal ``get_online_features(...).to_dict()`` (and its event times Feast's response's);
- ``OnlineFeatures`` with ``online_reader: direct`` answers exactly what it answers with ``online_reader: feast``
  (ttl, defaults, flags and on-demand views applied), with ``as_of`` before and after the entities expire.

Plus: a dead Redis raises ``FeatureStoreUnavailableError``; a password-protected Redis is read with the store's
own connection settings; a registry change Feast sees and the reader (built at load) does not is caught by the
sampled runtime comparison.
"""

from __future__ import annotations

import math
import random
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
from tests.support import RedisServer, free_port, shared_redis_url

pytestmark = pytest.mark.integration

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
REPO_ROOT = Path(__file__).resolve().parents[3]
START = datetime(2026, 11, 1, tzinfo=UTC)
FRESH = datetime(2026, 11, 4, tzinfo=UTC)
"""The day after the data: every user_transactions value is inside its 7 days, all_types (2 days) only the later."""
STALE = datetime(2026, 11, 10, 12, tzinfo=UTC)
"""Users last seen before Nov 3 12:00 are past user_transactions' 7 days; every all_types value is expired."""
SIZES = (1, 9, 64, 256)

ALL_TYPES_VIEW = '''"""Test only: a view holding every Feast scalar type and their lists (tests/integration/features/
test_online_direct.py writes its source)."""

from datetime import timedelta

from definitions import merchant_risk, user, user_transactions
from feast import FeatureService, FeatureView, Field, FileSource
from feast.types import Array, Bool, Bytes, Float32, Float64, Int32, Int64, String, UnixTimestamp

all_types_source = FileSource(name="all_types_source", path="../data/features/all_types.parquet",
                              timestamp_field="event_timestamp")


def _f(name, dtype):
    return Field(name=name, dtype=dtype, tags={"default": "0"})


all_types = FeatureView(
    name="all_types",
    entities=[user],
    ttl=timedelta(days=2),
    source=all_types_source,
    online=True,
    schema=[
        Field(name="user_id", dtype=String),
        _f("t_int32", Int32), _f("t_int64", Int64), _f("t_float32", Float32), _f("t_float64", Float64),
        _f("t_string", String), _f("t_bool", Bool), _f("t_bytes", Bytes), _f("t_unix", UnixTimestamp),
        _f("l_int32", Array(Int32)), _f("l_int64", Array(Int64)), _f("l_float32", Array(Float32)),
        _f("l_float64", Array(Float64)), _f("l_string", Array(String)), _f("l_bool", Array(Bool)),
        _f("l_bytes", Array(Bytes)), _f("l_unix", Array(UnixTimestamp)),
    ],
)

all_types_v1 = FeatureService(name="all_types_v1", features=[user_transactions, all_types, merchant_risk])
'''


@dataclass
class Env:
    root: Path
    features: FeaturesConfig
    services: list[str]
    groups: dict[str, list[str]]
    """Users and merchants by kind: known, unknown, partial (one user view only, or a field deleted), stale;
    ``deleted``: the feature whose field was deleted from U0025's hash, and one kept."""
    online: dict[tuple[str, str], OnlineFeatures]
    """(service, reader) → the lookup."""


def _write_sources(root: Path, source_dir: str) -> dict[str, list[str]]:
    """Transactions of U0000–U0039 (20 merchants, Nov 1–3) and all_types rows of U0020–U0059; returns the
    entities by kind."""
    rng = np.random.default_rng(29)
    src = root / source_dir
    src.mkdir(parents=True, exist_ok=True)
    n = 320
    users = [f"U{i:04d}" for i in range(40)]
    stamps = pd.to_datetime(START) + pd.to_timedelta(np.sort(rng.uniform(0, 3 * 86_400, n)), unit="s")
    stamps = stamps.floor("us")
    tx = pd.DataFrame({
        "transaction_id": [f"T{i:05d}" for i in range(n)],
        "user_id": [users[i % 40] if i < 80 else users[int(rng.integers(0, 40))] for i in range(n)],
        "merchant_id": [f"M{int(rng.integers(0, 20)):05d}" for _ in range(n)],
        "event_timestamp": stamps, "created": stamps,
        "amount": np.round(rng.uniform(1, 500, n), 2), "currency": "EUR", "category": "grocery", "country": "DE",
        "device": "ios", "channel": "online", "is_fraud": (rng.uniform(size=n) < 0.1).astype(np.int8)})
    pq.write_table(pa.Table.from_pandas(tx, schema=FRAUD_SCHEMA, preserve_index=False), src / "transactions.parquet")

    typed = [f"U{i:04d}" for i in range(20, 60)]
    k = len(typed)
    at = pd.to_datetime(START) + pd.to_timedelta(rng.uniform(0, 3 * 86_400, k), unit="s").floor("us")
    unix = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=int(s)) for s in rng.integers(0, 10**7, k)]
    f64 = rng.normal(size=k) * 1e3
    f64[3] = np.nan  # NaN and null values: Feast writes an empty value for them
    columns: dict[str, pa.Array] = {
        "user_id": pa.array(typed),
        "event_timestamp": pa.array(at, pa.timestamp("us", tz="UTC")),
        "t_int32": pa.array([int(x) for x in rng.integers(-2**31, 2**31 - 1, k)], pa.int32()),
        "t_int64": pa.array([int(x) for x in rng.integers(-2**62, 2**62, k)], pa.int64()),
        "t_float32": pa.array(rng.normal(size=k).astype(np.float32), pa.float32()),
        "t_float64": pa.array(f64, pa.float64(), from_pandas=False),
        "t_string": pa.array([None if i == 4 else f"s-{i}-ü€" for i in range(k)], pa.string()),
        "t_bool": pa.array([bool(i % 2) for i in range(k)], pa.bool_()),
        "t_bytes": pa.array([bytes([i, 0, 255, 10, 13]) for i in range(k)], pa.binary()),
        "t_unix": pa.array(unix, pa.timestamp("us", tz="UTC")),
        "l_int32": pa.array([[i, -i, 2**31 - 1] for i in range(k)], pa.list_(pa.int32())),
        "l_int64": pa.array([[i * 2**40, -1] for i in range(k)], pa.list_(pa.int64())),
        "l_float32": pa.array([[0.1 * i, -1.5] for i in range(k)], pa.list_(pa.float32())),
        "l_float64": pa.array([[math.pi * i, 1e-300] for i in range(k)], pa.list_(pa.float64())),
        "l_string": pa.array([[f"a{i}", "", "ß"] for i in range(k)], pa.list_(pa.string())),
        "l_bool": pa.array([[True, bool(i % 3)] for i in range(k)], pa.list_(pa.bool_())),
        "l_bytes": pa.array([[b"\x00\x01", bytes([i])] for i in range(k)], pa.list_(pa.binary())),
        "l_unix": pa.array([[unix[i], unix[(i + 1) % k]] for i in range(k)], pa.list_(pa.timestamp("us", tz="UTC"))),
    }
    pq.write_table(pa.table(columns), src / "all_types.parquet")
    last = tx.groupby("user_id")["event_timestamp"].max()
    stale_cut = pd.Timestamp(STALE) - pd.Timedelta(days=7)
    return {
        "known": [f"U{i:04d}" for i in range(20, 40)],  # both user views
        "partial": [f"U{i:04d}" for i in range(0, 20)] + [f"U{i:04d}" for i in range(40, 60)],  # one of them
        "stale": sorted(last[last < stale_cut].index)[:10],  # at STALE; at FRESH: all_types' older half
        "unknown": [f"U-nobody-{i}" for i in range(10)],
        "merchants": [f"M{i:05d}" for i in range(20)],
        "unknown_merchants": ["M-nobody-1", "M-nobody-2"],
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    url = shared_redis_url()
    root = tmp_path_factory.mktemp("online_direct")
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "feature_repo" / "all_types.py").write_text(ALL_TYPES_VIEW)
    features = FeaturesConfig(feature_service="fraud_v1",
                              online_store="redis", redis_url=url, feast_project=f"t_{uuid.uuid4().hex[:10]}",
                              online_ttl_as_of=FRESH, online_parity_sample=0.0)
    groups = _write_sources(root, features.source_dir)
    apply_repo(features, root)
    try:
        materialize(features, root, end=FRESH)
        # A feature added to a view after an entity was last written: its field is absent from that hash. The key
        # and the field as Feast's own helpers make them.
        from feast.infra.online_stores.helpers import _mmh3, _redis_key
        from feast.protos.feast.types.EntityKey_pb2 import EntityKey
        from feast.protos.feast.types.Value_pb2 import Value

        key = _redis_key(features.feast_project,
                         EntityKey(join_keys=["user_id"], entity_values=[Value(string_val="U0025")]))
        client = redis.Redis.from_url(url)
        assert client.hdel(key, _mmh3("user_transactions:user_txn_count_1h")) == 1, "U0025 is not in Redis"
        groups["partial"].append("U0025")
        groups["deleted"] = ["user_txn_count_1h", "user_txn_count_24h"]
        store = open_store(features, root)
        services = sorted(s.name for s in store.list_feature_services())
        online = {(s, r): OnlineFeatures(features.model_copy(update={"feature_service": s, "online_reader": r}), root,
                                         contract=FRAUD_CONTRACT)
                  for s in services for r in ("direct", "feast")}
        yield Env(root, features, services, groups, online)
    finally:
        open_store(features, root).teardown()


def _rows(env: Env, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows: the first ones one of each kind (as many as fit), the rest drawn at random with repeats."""
    g = env.groups
    rng = random.Random(seed)
    kinds = [(rng.choice(g["known"]), rng.choice(g["merchants"])),
             (rng.choice(g["unknown"]), rng.choice(g["merchants"])),
             (rng.choice(g["partial"]), rng.choice(g["unknown_merchants"])),
             (rng.choice(g["stale"]), rng.choice(g["merchants"])),
             ("U0025", rng.choice(g["merchants"]))]
    pool_users = g["known"] + g["unknown"] + g["partial"] + g["stale"]
    pool_merchants = g["merchants"] + g["unknown_merchants"]
    pairs = kinds[:n] + [(rng.choice(pool_users), rng.choice(pool_merchants)) for _ in range(n - len(kinds[:n]))]
    return [{"user_id": u, "merchant_id": m, "amount": round(rng.uniform(1, 900), 2)} for u, m in pairs]


def _batches(env: Env, n: int) -> list[list[dict[str, Any]]]:
    """Batches of ``n`` rows covering every kind of entity (for one row, one batch per kind), and one of entities
    known to both user views only (every field present: the reader's column-at-once decoding)."""
    rng = random.Random(n)
    known = [{"user_id": rng.choice(env.groups["known"]), "merchant_id": rng.choice(env.groups["merchants"]),
              "amount": float(rng.randint(1, 900))} for _ in range(n)]
    if n == 1:
        return [[row] for row in _rows(env, 5, seed=1)] + [known]
    return [_rows(env, n, seed=n), known]


def _request_rows(online: OnlineFeatures, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"user_id": r["user_id"], "merchant_id": r["merchant_id"], **{k: r[k] for k in online.request_fields}}
            for r in rows]


def test_every_feature_service_of_the_repository_is_covered(env: Env) -> None:
    repo_services = {"fraud_v1", "fraud_rt_v1"}  # feature_repo/definitions.py, request_time.py
    assert repo_services | {"all_types_v1"} <= set(env.services), env.services
    assert all(env.online[(s, "direct")].reader == "direct" for s in env.services)
    assert all(env.online[(s, "feast")].reader == "feast" for s in env.services)


@pytest.mark.parametrize("n", SIZES)
def test_the_raw_read_equals_feasts_to_dict_value_by_value_and_type_by_type(env: Env, n: int) -> None:
    store = open_store(env.features, env.root)
    for name in env.services:
        service = store.get_feature_service(name)
        plan = ServicePlan.of(store, service)
        reader = DirectRedisReader(store, plan)
        for batch in _batches(env, n):
            rows = _request_rows(env.online[(name, "feast")], batch)
            response = store.get_online_features(features=service, entity_rows=rows)
            expected = response.to_dict()
            got, stamps = reader.read(rows)
            for od in plan.on_demand:
                got.update(compute_on_demand(plan, od, got, rows))
            compared = [k for k in expected if k not in ("user_id", "merchant_id")]
            assert compared, name
            for feature in compared:
                for i, (mine, theirs) in enumerate(zip(got[feature], expected[feature], strict=True)):
                    assert same(mine, theirs), (name, n, feature, rows[i], mine, theirs)
            vectors = dict(zip(response.proto.metadata.feature_names.val, response.proto.results, strict=True))
            for table in plan.tables:
                served = [f for f in table.features if f in vectors]
                if not served:
                    continue
                feast_ns = [t.seconds * 1_000_000_000 + t.nanos for t in vectors[served[0]].event_timestamps]
                assert stamps[table.view.name] == feast_ns, (name, n, table.view.name)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("as_of", [FRESH, STALE], ids=["fresh", "stale"])
def test_the_lookup_answers_the_same_with_either_reader(env: Env, n: int, as_of: datetime) -> None:
    kinds: dict[str, int] = {"unknown": 0, "expired": 0, "served": 0}
    for name in env.services:
        direct, feast = env.online[(name, "direct")], env.online[(name, "feast")]
        for batch in _batches(env, n):
            mine = direct.get(batch, as_of=as_of)
            theirs = feast.get(batch, as_of=as_of)
            assert differences(mine, theirs) == [], (name, n, as_of, differences(mine, theirs)[:5])
            for row, item in zip(batch, mine, strict=True):
                if item["unknown_user"]:
                    kinds["expired" if row["user_id"] in env.groups["stale"] else "unknown"] += 1
                else:
                    kinds["served"] += 1
    if n > 1 or as_of == STALE:
        assert kinds["unknown"] and kinds["served"], kinds
    if as_of == STALE:
        assert kinds["expired"], kinds


def test_a_dead_redis_raises_feature_store_unavailable(env: Env) -> None:
    dead = env.features.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0",
                                           "feature_service": "fraud_v1"})
    # the registry is read; nothing connects before a lookup
    online = OnlineFeatures(dead, env.root, contract=FRAUD_CONTRACT)
    assert online.reader == "direct"
    t0 = time.perf_counter()
    with pytest.raises(FeatureStoreUnavailableError, match="online store unreachable"):
        online.get([{"user_id": "U0021", "merchant_id": "M00001"}])
    assert time.perf_counter() - t0 < 1.0
    assert online.ping() is False


def test_a_password_protected_redis_is_read_with_the_stores_own_settings(
        env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    password = "p@ss, w=rd # {x}: 1"
    source = redis.Redis.from_url(env.features.redis_url)
    project = env.features.feast_project.encode()
    with RedisServer(tmp_path, password=password) as server:
        target = redis.Redis(port=server.port, password=password)
        for key in source.scan_iter(count=10_000):
            if key.endswith(project):  # every key of this project: its entities' hashes
                target.restore(key, 0, source.dump(key))
        monkeypatch.setenv("MLOPS_TEST_DIRECT_REDIS_PASSWORD", password)
        secret = env.features.model_copy(update={"redis_url": f"redis://127.0.0.1:{server.port}/0",
                                                 "redis_password_env": "MLOPS_TEST_DIRECT_REDIS_PASSWORD",
                                                 "feature_service": "all_types_v1"})
        online = OnlineFeatures(secret, env.root, contract=FRAUD_CONTRACT)
        assert online.reader == "direct"
        rows = _rows(env, 64, seed=7)
        assert differences(online.get(rows), env.online[("all_types_v1", "feast")].get(rows)) == []
        monkeypatch.setenv("MLOPS_TEST_DIRECT_REDIS_PASSWORD", password[:-1])
        # a wrong password is an outage, as with Feast's reader
        wrong = OnlineFeatures(secret, env.root, contract=FRAUD_CONTRACT)
        with pytest.raises(FeatureStoreUnavailableError, match="AuthenticationError"):
            wrong.get(rows)
        with pytest.raises(FeatureStoreUnavailableError, match="AuthenticationError"):
            OnlineFeatures(secret.model_copy(update={"online_reader": "feast"}), env.root,
                           contract=FRAUD_CONTRACT).get(rows)


def test_the_sampled_comparison_counts_a_registry_change_the_reader_did_not_see(env: Env) -> None:
    """The ``merchant`` entity re-applied with ``user_id`` as its join key: Feast, which reads the entities from the
    registry at each lookup, now looks merchant_risk up by the row's user_id and misses; the direct reader, built
    at load, still reads by merchant_id. The background comparison counts and logs the difference; the request
    itself is answered as before."""
    from feast import Entity

    features = env.features.model_copy(update={"feature_service": "fraud_v1", "online_parity_sample": 1.0,
                                               "registry_cache_ttl_s": 1})
    online = OnlineFeatures(features, env.root, contract=FRAUD_CONTRACT)
    rows = [{"user_id": "U0021", "merchant_id": "M00001"}, {"user_id": "U0022", "merchant_id": "M00002"}]
    before = online.get(rows)
    online.parity.wait(30)
    assert online.parity.snapshot() == {"samples": {"compared": 1}, "differences": {}}
    assert not any(r["unknown_merchant"] for r in before)

    store = open_store(features, env.root)
    merchant = store.get_entity("merchant")
    try:
        store.apply([Entity(name="merchant", join_keys=["user_id"], value_type=merchant.value_type)])
        # two more refresh rounds (every registry_cache_ttl_s, off the request path): one begun after the change
        assert online.registry.wait(online.registry.attempts + 2, 30)
        served = online.get(rows)
        online.parity.wait(30)
    finally:
        store.apply([merchant])
    assert served == before
    snap = online.parity.snapshot()
    assert snap["samples"] == {"compared": 2, "differing": 1}, snap
    assert snap["differences"] == {"flag:unknown_merchant": 2, "flag:_unknown_entity": 2,
                                   **{f"value:{n}": 2 for n in ("merchant_fraud_rate_7d", "merchant_txn_count_1d",
                                                                "merchant_amount_mean_7d")}}, snap
    metrics = {(s.name, s.labels.get("outcome") or s.labels["kind"]): s.value
               for family in online.parity.collector(model="fraud").collect() for s in family.samples}
    assert metrics[("mlops_serving_feature_parity_samples_total", "differing")] == 1
    assert metrics[("mlops_serving_feature_parity_differences_total", "flag:unknown_merchant")] == 2


def test_the_all_types_view_holds_every_type_and_kind_of_absence(env: Env) -> None:
    """The comparison above is only as good as the data: every type is present, and so are nulls and absences."""
    online = env.online[("all_types_v1", "feast")]
    store = open_store(env.features, env.root)
    rows = _request_rows(online, [{"user_id": u, "merchant_id": "M00001"} for u in ("U0023", "U0024", "U0025")]
                         + _rows(env, 256, seed=256))
    got = store.get_online_features(features=store.get_feature_service("all_types_v1"), entity_rows=rows).to_dict()
    expected = {"t_int32": int, "t_int64": int, "t_float32": float, "t_float64": float, "t_string": str,
                "t_bool": bool, "t_bytes": bytes, "t_unix": datetime, "l_int32": list, "l_int64": list,
                "l_float32": list, "l_float64": list, "l_string": list, "l_bool": list, "l_bytes": list,
                "l_unix": list}
    for name, kind in expected.items():
        kinds = {type(v) for v in got[name]}
        assert kinds == {kind, type(None)}, (name, kinds)
    assert {type(v[0]) for v in got["l_unix"] if v} == {datetime}
    by_user = {r["user_id"]: i for i, r in enumerate(rows)}
    assert got["t_float64"][by_user["U0023"]] is None  # written as NaN: Feast stores an empty value
    assert got["t_string"][by_user["U0024"]] is None  # written as null
    deleted, kept = env.groups["deleted"]
    assert got[deleted][by_user["U0025"]] is None  # its field deleted from the hash
    assert got[kept][by_user["U0025"]] is not None
    known_without_types = [r for r, v in zip(rows, got["t_int64"], strict=True)
                           if v is None and r["user_id"] in env.groups["partial"]]
    assert known_without_types, "no user of one view only in the batch"


@pytest.mark.parametrize("service", ["fraud_v1", "fraud_rt_v1"])
def test_a_lookup_never_reads_the_registry(env: Env, tmp_path: Path, service: str) -> None:
    """Everything the direct reader needs is taken from the registry at load, and Feast's reader resolves against a
    cache refreshed off the request path: with the registry gone and its cache past its ttl, both still answer (the
    refresh fails in the background and the cached registry is served; Feast's own sync cache raised 'Registry
    not found' inside the lookup)."""
    registry = tmp_path / "registry.db"
    shutil.copy(env.root / env.features.registry, registry)
    features = env.features.model_copy(update={"registry": str(registry), "registry_cache_ttl_s": 1,
                                               "feature_service": service})
    direct = OnlineFeatures(features, env.root, contract=FRAUD_CONTRACT)
    feast = OnlineFeatures(features.model_copy(update={"online_reader": "feast"}), env.root, contract=FRAUD_CONTRACT)
    rows = _rows(env, 9, seed=3)
    expected = direct.get(rows)
    assert differences(expected, feast.get(rows)) == []
    registry.unlink()
    time.sleep(1.1)
    assert feast.registry.wait(feast.registry.attempts + 1, 30)
    assert feast.registry.failures >= 1
    assert direct.get(rows) == expected
    assert differences(feast.get(rows), expected) == []


def test_the_feast_reader_refreshes_the_registry_off_the_request_path(env: Env, tmp_path: Path) -> None:
    """Every read of the registry's backend is recorded with the thread it ran on: past the cache's ttl, lookups on
    this thread read nothing (Feast's ``cache_mode: sync`` re-read it inside the first lookup that found it
    expired), the refresher's thread does, and a change it reads is served."""
    from feast import Entity

    registry = tmp_path / "registry.db"
    shutil.copy(env.root / env.features.registry, registry)
    features = env.features.model_copy(update={"registry": str(registry), "registry_cache_ttl_s": 1,
                                               "feature_service": "fraud_v1", "online_reader": "feast"})
    online = OnlineFeatures(features, env.root, contract=FRAUD_CONTRACT)
    backend = online._store.registry._registry_store  # the file the registry is read from
    read = backend.get_registry_proto
    readers: list[str] = []

    def observed() -> Any:
        readers.append(threading.current_thread().name)
        return read()

    backend.get_registry_proto = observed
    rows = [{"user_id": "U0021", "merchant_id": "M00001"}, {"user_id": "U0022", "merchant_id": "M00002"}]
    before = online.get(rows)
    assert not any(r["unknown_merchant"] for r in before)
    for _ in range(3):
        time.sleep(1.1)  # past registry_cache_ttl_s
        assert online.get(rows) == before
    assert threading.current_thread().name not in readers, readers
    assert online.registry.wait(2, 30)
    assert set(readers) == {"feast-registry-refresh"}, readers

    store = open_store(features, env.root)  # the registry changed under the server: merchant keyed by user_id
    merchant = store.get_entity("merchant")
    store.apply([Entity(name="merchant", join_keys=["user_id"], value_type=merchant.value_type)])
    assert online.registry.wait(online.registry.attempts + 2, 30)
    assert all(r["unknown_merchant"] for r in online.get(rows))
    assert threading.current_thread().name not in readers
