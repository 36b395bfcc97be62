"""feature_repo/feature_store*.yaml are fresh renders of each profile's config, and Feast accepts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import FeaturesConfig, load_config
from mlops_features import FeatureStoreError, render_feature_store_yaml
from mlops_features.store import REDIS_STORE_TYPE, redis_connection_string, repo_config_dict

PROFILES = {"local": "feature_store.yaml", "staging": "feature_store.staging.yaml",
            "production": "feature_store.production.yaml"}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_committed_yaml_is_the_render_of_the_profile(repo_root: Path, profile: str) -> None:
    loaded = load_config(profile=profile, check_secrets=False)
    text = render_feature_store_yaml(loaded.config.features, loaded.root, profile)
    committed = (repo_root / "feature_repo" / PROFILES[profile]).read_text()
    assert committed == text, f"run `mlops features render` to refresh feature_repo/{PROFILES[profile]}"


SPECIAL = "p@ss:w/rd#,%{}' \"x: y"  # URL, YAML and Feast connection-string syntax, quotes, a ': '


@pytest.mark.parametrize("profile", list(PROFILES))
def test_feast_parses_each_yaml(repo_root: Path, profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from feast.repo_config import load_repo_config

    monkeypatch.setenv("REDIS_PASSWORD", "r-secret")
    monkeypatch.setenv("FEAST_REGISTRY_PASSWORD", SPECIAL)
    cfg = load_repo_config(repo_root / "feature_repo", repo_root / "feature_repo" / PROFILES[profile])
    # each cluster environment has a Feast project of its own (its keys in Redis, its registry rows)
    assert cfg.project == ("fraud_detection" if profile == "local" else f"fraud_detection_{profile}")
    if profile == "local":
        # Feast's DuckDB store, handing a BatchFeatureView's udf every source column (see offline_duckdb)
        assert cfg.offline_store.type == "mlops_features.offline_duckdb.UdfDuckDBOfflineStore"
        assert cfg.batch_engine_config == {"type": "local", "backend": "pandas"}
    else:
        # the cluster profiles: Feast's Spark engine on the environment's standalone cluster, the sources read
        # by its executors (offline_spark), training sets still joined by the DuckDB store
        assert cfg.offline_store.type == "mlops_features.offline_spark.SparkReadOfflineStore"
        assert cfg.batch_engine_config["type"] == "spark.engine"
        assert cfg.batch_engine_config["spark_conf"]["spark.master"] == "spark://fraud-spark-master:7077"
    if profile == "local":
        assert cfg.online_store.type == "sqlite"
        assert Path(cfg.online_store.path) == Path("../.mlops/feast/online.db")
    else:
        # The Redis password is read from the env var the store names, never from a string Feast splits.
        assert cfg.online_store.type == REDIS_STORE_TYPE and cfg.online_store.password_env == "REDIS_PASSWORD"
        assert cfg.online_store.username_env == "REDIS_USERNAME"  # the environment's ACL user, by role
        assert "password" not in cfg.online_store.connection_string
        assert cfg.registry.registry_type == "sql"
        # Feast expanded ${FEAST_REGISTRY_PASSWORD} into the YAML text: the value survived it byte for byte.
        assert cfg.registry.sqlalchemy_config_kwargs["connect_args"]["password"] == SPECIAL
        assert "@" not in cfg.registry.path.split("@", 1)[1]


def test_secrets_never_appear_in_the_rendered_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", "r-secret")
    monkeypatch.setenv("REG_PW", "p-secret")
    cfg = FeaturesConfig(online_store="redis", redis_password_env="REDIS_PASSWORD", registry_type="sql",
                         registry="postgresql+psycopg2://feast@db:5432/reg", registry_password_env="REG_PW")
    text = render_feature_store_yaml(cfg, "/repo", "x")
    assert "r-secret" not in text and "p-secret" not in text
    assert "password_env: REDIS_PASSWORD" in text and "password: |2-\n" in text and "${REG_PW}" in text
    assert "password" not in redis_connection_string(cfg)


def test_platform_config_carries_exact_secret_values_and_names_a_missing_one() -> None:
    cfg = FeaturesConfig(online_store="redis", redis_password_env="R", registry_type="sql",
                         registry="postgresql+psycopg2://feast@db:5432/reg", registry_password_env="P")
    raw = repo_config_dict(cfg, "/repo", environ={"P": SPECIAL, "R": SPECIAL})
    assert raw["registry"]["sqlalchemy_config_kwargs"]["connect_args"]["password"] == SPECIAL
    assert raw["registry"]["path"] == "postgresql+psycopg2://feast@db:5432/reg"
    with pytest.raises(FeatureStoreError, match="registry_password_env names 'P'"):
        repo_config_dict(cfg, "/repo", environ={})


@pytest.mark.parametrize(("field", "url"), [("registry", "postgresql+psycopg2://u:pw@db/reg"),
                                             ("redis_url", "redis://:pw@127.0.0.1:6379/0")])
def test_a_password_inside_a_url_is_refused(field: str, url: str) -> None:
    cfg = FeaturesConfig(online_store="redis", registry_type="sql", **{field: url})
    with pytest.raises(FeatureStoreError, match=f"features.{field} holds a password"):
        repo_config_dict(cfg, "/repo")


def test_redis_store_type_is_the_class_path() -> None:
    from mlops_features.online_redis import STORE_TYPE, SecretRedisOnlineStore

    assert REDIS_STORE_TYPE == STORE_TYPE == f"{SecretRedisOnlineStore.__module__}.{SecretRedisOnlineStore.__name__}"


def test_local_paths_are_absolute_under_the_root(tmp_path: Path) -> None:
    raw = repo_config_dict(FeaturesConfig(), tmp_path)
    assert raw["registry"]["path"] == str(tmp_path / ".mlops/feast/registry.db")
    assert raw["online_store"]["path"] == str(tmp_path / ".mlops/feast/online.db")


def test_tls_acl_user_and_cluster_reach_feasts_redis_store_config(tmp_path: Path) -> None:
    """What Feast's ``RedisOnlineStoreConfig`` and redis-py get for ``rediss://user@…`` with a CA file, as one
    server and as a cluster (whose client refuses ``db`` and ``retry``; redis-py's cluster.py)."""
    from feast import RepoConfig
    from feast.infra.online_stores.redis import RedisOnlineStore

    base = dict(online_store="redis", redis_url="rediss://svc%2Dreader@10.0.0.7:6380/0", redis_ca_cert="tls/ca.pem")
    one = repo_config_dict(FeaturesConfig(**base), tmp_path)["online_store"]
    assert one["connection_string"].split(",")[0] == "10.0.0.7:6380"
    assert {"db=0", "ssl=true", "retry=null"} <= set(one["connection_string"].split(","))
    assert one["username"] == "svc-reader" and "redis_type" not in one
    assert one["ssl_ca_certs"] == str(tmp_path / "tls" / "ca.pem")
    cluster = repo_config_dict(FeaturesConfig(**base, redis_type="redis_cluster"), tmp_path, relative_to=tmp_path)
    online = cluster["online_store"]
    assert online["redis_type"] == "redis_cluster" and online["ssl_ca_certs"] == str(tmp_path / "tls" / "ca.pem")
    parts = online["connection_string"].split(",")
    assert "ssl=true" in parts and not any(p.startswith(("db=", "retry=")) for p in parts)
    config = RepoConfig(repo_path=tmp_path, **cluster)
    assert config.online_store.redis_type.value == "redis_cluster" and config.online_store.username == "svc-reader"
    _nodes, kwargs = RedisOnlineStore._parse_connection_string(online["connection_string"])
    assert kwargs["ssl"] is True and not {"db", "retry"} & set(kwargs)
    with pytest.raises(FeatureStoreError, match="a Redis Cluster has only db 0"):
        repo_config_dict(FeaturesConfig(**{**base, "redis_url": "rediss://10.0.0.7:6380/2"},
                                        redis_type="redis_cluster"), tmp_path)


@pytest.mark.parametrize("url", ["http://x:6379", "redis://", "127.0.0.1:6379"])
def test_bad_redis_url_is_named(url: str) -> None:
    with pytest.raises(FeatureStoreError, match=r"features\.redis_url="):
        redis_connection_string(FeaturesConfig(online_store="redis", redis_url=url))


def test_batch_engine_spark_renders_feasts_spark_compute_engine(tmp_path: Path) -> None:
    from pydantic import ValidationError

    local = repo_config_dict(FeaturesConfig(), tmp_path)
    assert local["batch_engine"] == {"type": "local", "backend": "pandas"}  # local: Feast's pandas engine
    spark = repo_config_dict(FeaturesConfig(batch_engine="spark", spark_master="spark://spark:7077",
                                            spark_partitions=8,
                                            spark_conf={"spark.master": "ignored", "spark.driver.memory": "4g"}),
                             tmp_path)
    assert spark["batch_engine"] == {"type": "spark.engine", "partitions": 8,
                                     "spark_conf": {"spark.master": "spark://spark:7077", "spark.driver.memory": "4g",
                                                    "spark.sql.shuffle.partitions": "8",
                                                    "spark.sql.session.timeZone": "UTC",
                                                    "spark.sql.execution.arrow.pyspark.enabled": "true",
                                                    "spark.ui.enabled": "false"}}
    tuned = repo_config_dict(FeaturesConfig(batch_engine="spark", spark_conf={
        "spark.driver.memory": "12g", "spark.sql.shuffle.partitions": "64", "spark.executor.instances": "4"}), tmp_path)
    conf = tuned["batch_engine"]["spark_conf"]  # the section's values win over the defaults, the rest stay
    assert (conf["spark.driver.memory"], conf["spark.sql.shuffle.partitions"]) == ("12g", "64")
    assert (conf["spark.executor.instances"], conf["spark.master"], conf["spark.sql.session.timeZone"]) == \
        ("4", "local[*]", "UTC")
    with pytest.raises(ValidationError, match=r"spark_conf has invalid entries \['driver.memory'\]"):
        FeaturesConfig(spark_conf={"driver.memory": "8g"})
    with pytest.raises(ValidationError, match=r"invalid entries \['spark.executor.memory'\]"):
        FeaturesConfig(spark_conf={"spark.executor.memory": " "})
    from feast.infra.compute_engines.spark.compute import SparkComputeEngineConfig

    SparkComputeEngineConfig(**spark["batch_engine"])  # what Feast parses it into
    with pytest.raises(ValidationError, match="batch_engine"):
        FeaturesConfig(batch_engine="flink")


def test_batch_engine_spark_renders_the_store_whose_source_reads_run_on_spark(tmp_path: Path) -> None:
    """With the Spark engine the offline store is the DuckDB store whose source pulls are Spark's (executors read
    the parquet, nothing is collected on the driver); the local engine keeps the plain DuckDB store."""
    from feast import RepoConfig
    from pydantic import ValidationError

    from mlops_features.offline_duckdb import UdfDuckDBOfflineStoreConfig
    from mlops_features.offline_spark import SparkReadOfflineStoreConfig

    local = repo_config_dict(FeaturesConfig(), tmp_path)
    assert local["offline_store"] == {"type": "mlops_features.offline_duckdb.UdfDuckDBOfflineStore"}
    spark = repo_config_dict(FeaturesConfig(batch_engine="spark"), tmp_path)
    assert spark["offline_store"] == {"type": "mlops_features.offline_spark.SparkReadOfflineStore"}
    parsed = RepoConfig(repo_path=tmp_path, **spark).offline_store  # Feast finds <class>Config beside the store
    assert type(parsed) is SparkReadOfflineStoreConfig and isinstance(parsed, UdfDuckDBOfflineStoreConfig)
    with pytest.raises(ValidationError, match=r"batch_engine 'spark' needs offline_store 'duckdb', got offline_store "
                                              r"'file'"):
        FeaturesConfig(batch_engine="spark", offline_store="file")


def test_spark_source_is_the_file_sources_parquet(tmp_path: Path) -> None:
    from feast import FileSource
    from feast.data_format import DeltaFormat
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

    from mlops_features.offline_spark import spark_source

    repo = tmp_path / "feature_repo"
    file = FileSource(name="transactions", path="../data/features/transactions.parquet",
                      timestamp_field="event_timestamp", created_timestamp_column="created",
                      field_mapping={"amt": "amount"})
    got = spark_source(file, repo)
    assert (got.name, got.path, got.file_format) == \
        ("transactions", str(tmp_path / "data/features/transactions.parquet"), "parquet")
    assert (got.timestamp_field, got.created_timestamp_column, got.field_mapping) == \
        ("event_timestamp", "created", {"amt": "amount"})
    s3 = spark_source(FileSource(name="t", path="s3://bucket/tx.parquet", timestamp_field="ts"), repo)
    assert s3.path == "s3a://bucket/tx.parquet"  # Hadoop's connector
    declared = SparkSource(name="t", path="/data/tx", file_format="parquet", timestamp_field="ts")
    assert spark_source(declared, repo) is declared
    with pytest.raises(FeatureStoreError, match=r"source 'delta' \(DeltaFormat\) cannot be read by Spark's executors"):
        spark_source(FileSource(name="delta", path="/data/tx", file_format=DeltaFormat(), timestamp_field="ts"), repo)


@pytest.mark.parametrize("value", ["yesterday", "2026-11-04 25:00", "2026-13-40T00:00:00Z"])
@pytest.mark.parametrize("layer", ["--set", "env"])
def test_an_unparseable_online_ttl_as_of_names_the_value_and_the_layer(value: str, layer: str) -> None:
    from mlops_config import ConfigError

    overrides = [f"features.online_ttl_as_of={value}"] if layer == "--set" else []
    environ = {} if layer == "--set" else {"MLOPS__FEATURES__ONLINE_TTL_AS_OF": value}
    with pytest.raises(ConfigError) as err:
        load_config(profile="local", overrides=overrides, environ=environ, check_secrets=False)
    message = str(err.value)
    origin = "--set" if layer == "--set" else "env:MLOPS__FEATURES__ONLINE_TTL_AS_OF"
    assert message.startswith(origin) and "online_ttl_as_of" in message.lower() and repr(value) in message, message
    assert "ISO 8601" in message and "2026-11-04T00:00:00Z" in message, message


def test_an_invalid_time_in_a_config_file_is_a_config_error(tmp_path: Path, repo_root: Path) -> None:
    import shutil

    from mlops_config import ConfigError

    shutil.copytree(repo_root / "configs", tmp_path / "configs")
    local = tmp_path / "configs/profiles/local.yaml"
    local.write_text(local.read_text().replace('online_ttl_as_of: "2026-11-04T00:00:00Z"',
                                               "online_ttl_as_of: 2026-13-40T00:00:00Z"))
    with pytest.raises(ConfigError, match=r"local\.yaml: .*month must be in 1\.\.12.*ISO 8601"):
        load_config(profile="local", config_dir=tmp_path / "configs", environ={}, check_secrets=False)


def test_online_ttl_as_of_is_pinned_in_local_and_the_wall_clock_elsewhere() -> None:
    from datetime import UTC, datetime

    local = load_config(profile="local", environ={}, check_secrets=False).config
    # the sample's last event is before start_date + days (one batch per UTC day): the pin is that day's 00:00
    end = datetime.fromisoformat(local.data.start_date).replace(tzinfo=UTC).timestamp() + local.data.days * 86_400
    assert local.features.online_ttl_as_of == datetime.fromtimestamp(end, UTC)
    for profile in ("staging", "production"):
        assert load_config(profile=profile, environ={}, check_secrets=False).config.features.online_ttl_as_of is None
    naive = load_config(profile="local", overrides=["features.online_ttl_as_of=2026-11-04T06:00:00"], environ={},
                        check_secrets=False).config.features.online_ttl_as_of
    assert naive == datetime(2026, 11, 4, 6, tzinfo=UTC)  # no zone: UTC
