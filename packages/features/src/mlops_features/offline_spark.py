"""The offline store of ``features.batch_engine: spark``: Spark's executors read the feature sources.

Feast 0.67's Spark compute engine reads a view's source through the repo's offline store
(``SparkReadNode`` → ``pull_all_from_table_or_query``): a :class:`feast.infra.offline_stores.contrib.
spark_offline_store.spark.SparkRetrievalJob` becomes a Spark DataFrame as it is, anything else is collected on
the driver (``to_arrow()`` → ``createDataFrame``), which ran the 4 GB driver out of heap at 5 M source rows.
This store answers those two pulls with Feast's own Spark offline store over a :class:`SparkSource` on the
same parquet as the repository's ``FileSource`` (path resolved like Feast's file stores, ``s3://`` read as
``s3a://``), so the executors read it; a ``SparkSource`` declared in the repository is read as it is. Every
other call (point-in-time joins for training sets, ...) is the DuckDB store's
(:class:`mlops_features.offline_duckdb.UdfDuckDBOfflineStore`), so ``feature_repo/`` stays one standard Feast
repository for both engines.

Used as ``type: mlops_features.offline_spark.SparkReadOfflineStore`` (rendered with the Spark engine).
"""

from __future__ import annotations

import logging
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from feast.infra.offline_stores.contrib.spark_offline_store.spark import SparkOfflineStore, SparkOfflineStoreConfig
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.infra.offline_stores.file_source import FileSource, ParquetFormat

from mlops_config import FeaturesConfig, spark_conf
from mlops_features.errors import FeatureStoreError
from mlops_features.offline_duckdb import UdfDuckDBOfflineStore, UdfDuckDBOfflineStoreConfig, every_column

STORE_TYPE = "mlops_features.offline_spark.SparkReadOfflineStore"
log = logging.getLogger(__name__)


def start_spark_session(features: FeaturesConfig) -> Any:
    """The Spark session Feast's Spark engine will use, started with the section's settings.

    Feast 0.67's engine hands its whole ``batch_engine`` block (``type``, ``spark_conf``, ``partitions``) to
    ``SparkConf`` as if it were Spark's settings ("Ignoring non-Spark config property: spark_conf"), so none of
    them applied: ``spark_master`` fell back to ``local[*]`` and the driver to Spark's 1 GB. It takes an active
    session as it is, so this starts that session first, with ``mlops_config.SPARK_DEFAULTS``, then
    ``features.spark_conf``, then ``spark.master = features.spark_master``. An active session on another master
    is stopped first: a materialization configured for a cluster never runs somewhere else.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    conf = spark_conf(features.spark_conf, features.spark_master)
    active = SparkSession.getActiveSession()
    if active is not None and active.conf.get("spark.master") != conf["spark.master"]:
        log.info("stopping the Spark session on %s: this materialization runs on %s",
                 active.conf.get("spark.master"), conf["spark.master"])
        active.stop()
    app = f"mlops-materialize-{features.feast_project}"
    # a JVM this process already started keeps the first context's spark.app.name as a system property, and a new
    # context takes it over the builder's appName (a drift engine's session stopped earlier named every later one).
    # Only then: setting it would otherwise launch the JVM here, before spark.driver.memory could size its heap
    if SparkContext._gateway is not None:
        SparkContext.setSystemProperty("spark.app.name", app)
    builder = SparkSession.builder.appName(app)
    return builder.config(conf=SparkConf().setAll(list(conf.items()))).getOrCreate()


class SparkReadOfflineStoreConfig(UdfDuckDBOfflineStoreConfig):
    """The DuckDB store's config under this class's type (the Spark session is the engine's)."""

    type: Literal["mlops_features.offline_spark.SparkReadOfflineStore"] = STORE_TYPE  # type: ignore[assignment]
    """Offline store type selector (this class's path)."""


def spark_source(source: Any, repo_path: Path | str | None) -> SparkSource:
    """A :class:`SparkSource` over the parquet a :class:`FileSource` names (same name, timestamps, mapping).

    Raises:
        FeatureStoreError: the source is neither a parquet ``FileSource`` nor a ``SparkSource``.
    """
    if isinstance(source, SparkSource):
        return source
    fmt = getattr(source, "file_format", None)
    if not isinstance(source, FileSource) or not (
            isinstance(fmt, ParquetFormat) or (fmt is None and str(source.path).endswith(".parquet"))):
        kind = type(fmt).__name__ if isinstance(source, FileSource) else type(source).__name__
        raise FeatureStoreError(
            f"source {source.name!r} ({kind}) cannot be read by Spark's executors: with features.batch_engine: "
            "spark a feature view's source must be a parquet FileSource or a SparkSource")
    uri = FileSource.get_uri_for_file_path(repo_path, source.path)
    if "://" not in uri:
        uri = str(Path(uri).resolve())
    elif uri.startswith("s3://"):
        uri = "s3a://" + uri.removeprefix("s3://")  # Hadoop's S3 connector
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The spark data source API is an experimental",
                                category=RuntimeWarning)
        return SparkSource(name=source.name, path=uri, file_format="parquet", timestamp_field=source.timestamp_field,
                           created_timestamp_column=source.created_timestamp_column,
                           field_mapping=dict(source.field_mapping), date_partition_column=source.date_partition_column)


def _spark_config(config: Any) -> Any:
    """``config`` with Feast's Spark offline store config (the engine's ``spark_conf``) as its offline store."""
    spark = config.model_copy()
    spark._offline_store = SparkOfflineStoreConfig(spark_conf=getattr(config.batch_engine, "spark_conf", None))
    return spark


class SparkReadOfflineStore(UdfDuckDBOfflineStore):
    """:class:`UdfDuckDBOfflineStore` whose source pulls (what the compute engine materializes from) are Spark
    DataFrames read by the executors."""

    @staticmethod
    def pull_all_from_table_or_query(
        config: Any,
        data_source: Any,
        join_key_columns: list[str],
        feature_name_columns: list[str],
        timestamp_field: str,
        created_timestamp_column: str | None = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
    ) -> Any:
        source = spark_source(data_source, config.repo_path)  # every source column (a udf's input) if none named
        feature_name_columns = every_column(config, data_source, feature_name_columns,
                                            {*join_key_columns, timestamp_field, created_timestamp_column})
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The spark offline store is an experimental",
                                    category=RuntimeWarning)
            return SparkOfflineStore.pull_all_from_table_or_query(
                _spark_config(config), source, join_key_columns, feature_name_columns, timestamp_field,
                created_timestamp_column, start_date, end_date)

    @staticmethod
    def pull_latest_from_table_or_query(
        config: Any,
        data_source: Any,
        join_key_columns: list[str],
        feature_name_columns: list[str],
        timestamp_field: str,
        created_timestamp_column: str | None,
        start_date: datetime,
        end_date: datetime,
    ) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The spark offline store is an experimental",
                                    category=RuntimeWarning)
            return SparkOfflineStore.pull_latest_from_table_or_query(
                _spark_config(config), spark_source(data_source, config.repo_path), join_key_columns,
                feature_name_columns, timestamp_field, created_timestamp_column, start_date, end_date)
