"""``features``: the Feast repository and its stores."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mlops_config._base import Section
from mlops_config._spark import check_spark_conf
from mlops_config.errors import ConfigError


class FeaturesConfig(Section):
    repo_path: str = "feature_repo"
    """Folder of the Feast repository (features as code)."""

    feature_service: str | None = None
    """FeatureService the model trains and serves with (one of ``repo_path``'s definitions); recorded on every model
    version. No default: a model that reads features names its service in a file (``configs/base.yaml`` names the
    reference model's), and :meth:`require_feature_service` fails, saying so, where none is named."""

    offline_store: Literal["file", "duckdb"] = "duckdb"
    """Feast offline store type for point-in-time joins."""

    online_store: Literal["sqlite", "redis"] = "sqlite"
    """Feast online store type."""

    online_store_path: str = ".mlops/feast/online.db"
    """SQLite online store file (``online_store: sqlite``)."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis connection (``online_store: redis``), as ``redis://[user@]host:port/db``; ``rediss://`` for TLS. The
    user is a Redis ACL user (none: ``default``); no password here (``redis_password_env``). With
    ``redis_type: redis_cluster`` the host is one startup node (the client discovers the others) and db is 0."""

    redis_type: Literal["redis", "redis_cluster"] = "redis"
    """Feast's ``redis_type``: ``redis`` (one server, or a primary behind one address) or ``redis_cluster`` (a Redis
    Cluster: each entity's hash lives on the node of its key's slot; both readers route by slot)."""

    redis_ca_cert: str | None = None
    """PEM file of the certificate authorities a ``rediss://`` Redis's certificate is verified against (absolute,
    or relative to the repo root); ``None``: the system's trust store."""

    redis_password_env: str | None = None
    """Name of the env var holding the Redis password (secret)."""

    redis_username_env: str | None = None
    """Name of the env var holding the Redis ACL user (one per environment and role, e.g. a workload's
    ``<namespace>.fraud-reader``); ``None``: the ``default`` user."""

    registry: str = ".mlops/feast/registry.db"
    """Feast registry: a file path, or a SQL URL (``postgresql+psycopg2://...``) with ``registry_type: sql``."""

    registry_type: Literal["file", "sql"] = "file"
    """Feast registry kind."""

    registry_password_env: str | None = None
    """Name of the env var holding the SQL registry's password (secret)."""

    source_dir: str = "data/features"
    """Folder the ingestion step writes the feature tables to; the Feast sources read from here."""

    feast_project: str = Field(default="mlops", pattern=r"^[A-Za-z0-9_]+$")
    """Feast project name (letters, digits, underscores); namespaces registry entries and online keys. Unset in
    every layer: ``project.name`` with its dashes as underscores."""

    redis_timeout_s: float = Field(default=0.5, gt=0, le=30)
    """Connect and read timeout (seconds) of the Redis online store: a down Redis fails fast, not hangs."""

    stream_key: str = Field(default="mlops:transactions", min_length=1)
    """Redis Stream of new transactions the stream updater (``mlops features stream``) consumes (same Redis as the
    online store); each entry's field ``tx`` is the transaction as JSON."""

    freshness_slo_s: int = Field(default=1800, gt=0)
    """Freshness objective per feature view: seconds since the newest event its online values reflect (the
    15-minute materialization schedule plus its run time); the ``FeatureViewStale`` alert fires past it."""

    registry_cache_ttl_s: int = Field(default=60, ge=0)
    """Seconds the Feast registry is cached in memory before it is read again (0: never expires). The online lookup
    (serving) re-reads it at this interval on a background thread, never inside a request; other commands the way
    Feast does (the first call past the ttl re-reads it)."""

    online_reader: Literal["direct", "feast"] = "direct"
    """How the online lookup (serving) reads the FeatureService. ``direct``: the platform's reader of Feast's Redis
    layout (``mlops_features.online_direct``): one pipelined round trip per batch, values decoded straight from
    Feast's ``ValueProto`` bytes, built once from the registry at load (no registry refresh inside a request);
    its answers equal Feast's ``get_online_features`` value by value and type by type (docs/serving.md). Used only
    with ``online_store: redis``: SQLite, and any store or definition the direct reader does not cover (it says
    which at load), keep Feast's reader regardless. ``feast``: always Feast's ``get_online_features`` (the switch
    back)."""

    online_parity_sample: float = Field(default=0.001, ge=0.0, le=1.0)
    """Fraction of the direct reader's lookups re-read through Feast on a background thread, off the request path,
    and compared value by value (counted and logged once per kind of difference); 0: off. Ignored when the
    lookup reads through Feast."""

    online_ttl_as_of: datetime | None = None
    """The instant the online lookup measures each feature view's ``ttl`` back from, as the offline point-in-time
    join does from a label's time: a view's online value stamped before ``as_of - ttl`` is expired and served as
    its default, the entity flagged unknown. ``None`` (production): the request's wall-clock time. A pinned ISO
    8601 time (``2026-11-04T00:00:00Z``; no zone: UTC) serves fixed synthetic data as if just after its end:
    the ``local`` profile pins the day after the sample's last event, else every value would be expired."""

    batch_engine: Literal["local", "spark"] = "local"
    """Feast's materialization engine: ``local`` (in this process) or ``spark`` (Feast's Spark compute engine
    on ``spark_master``: ``local[*]`` on one machine, ``spark://host:7077`` or ``k8s://https://…`` for a
    cluster; Spark's executors read the parquet sources, training sets stay on DuckDB, so it needs
    ``offline_store: duckdb``). Both write the same online values; Spark needs a JVM (``make java``) and
    ``pyspark``."""

    spark_master: str = Field(default="local[*]", min_length=1)
    """``spark.master`` of the Spark engine (``batch_engine: spark``)."""

    spark_partitions: int = Field(default=0, ge=0)
    """Partitions the Spark engine repartitions each view to before writing the online store (0: as read);
    each partition writes in parallel."""

    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Further Spark settings for the engine (``spark.driver.memory``, ``spark.executor.instances``, …), each
    over the platform's defaults (``spark.driver.memory: 4g``, ``spark.sql.shuffle.partitions: 8``,
    ``spark.sql.session.timeZone: UTC``, Arrow on, UI off; ``mlops_config.SPARK_DEFAULTS``);
    ``spark_master`` wins over a ``spark.master`` here."""

    def require_feature_service(self) -> str:
        """``feature_service``, or a :class:`ConfigError` saying where to name it when no layer does."""
        if not self.feature_service:
            raise ConfigError(
                f"features.feature_service is not set (got {self.feature_service!r}); expected the name of the "
                f"FeatureService the model trains and serves with, one defined in {self.repo_path}/: set "
                "features.feature_service in configs/base.yaml or configs/models/<model>.yaml")
        return self.feature_service

    @model_validator(mode="after")
    def _spark_reads_beside_duckdb(self) -> FeaturesConfig:
        if self.batch_engine == "spark" and self.offline_store != "duckdb":
            raise ValueError(
                f"batch_engine 'spark' needs offline_store 'duckdb', got offline_store {self.offline_store!r}: the "
                "Spark engine's executors read the sources and the training sets are joined by the DuckDB store")
        return self

    @field_validator("online_ttl_as_of", mode="before")
    @classmethod
    def _iso_time(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"online_ttl_as_of {value!r} is not an ISO 8601 time: expected e.g. "
                                 "'2026-11-04T00:00:00Z', or null for the request's wall-clock time") from None
        elif isinstance(value, date) and not isinstance(value, datetime):
            value = datetime(value.year, value.month, value.day)
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_keys(cls, conf: Any) -> Any:
        return check_spark_conf(conf, "features.spark_conf")
