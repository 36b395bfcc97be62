"""Feast's DuckDB offline store, handing a BatchFeatureView's ``udf`` every column of its source.

Feast 0.67's compute engine reads a pandas/python-mode view's source with an *empty* feature-column list,
meaning "all columns" (``feast.infra.compute_engines.feature_builder.get_column_info``), but the ibis/DuckDB
reader selects exactly ``join keys + features + timestamps``: the ``udf`` then sees no ``amount``. This store
reads every source column in that case and is otherwise Feast's ``duckdb`` store unchanged.

Used as ``type: mlops_features.offline_duckdb.UdfDuckDBOfflineStore`` (Feast finds a custom store by class path
and its config as ``<class>Config`` in the same module), so ``feast materialize`` by hand behaves the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from feast.infra.offline_stores.duckdb import DuckDBOfflineStore, DuckDBOfflineStoreConfig

STORE_TYPE = "mlops_features.offline_duckdb.UdfDuckDBOfflineStore"


class UdfDuckDBOfflineStoreConfig(DuckDBOfflineStoreConfig):
    """Feast's DuckDB offline store config under this class's type."""

    type: Literal["mlops_features.offline_duckdb.UdfDuckDBOfflineStore"] = STORE_TYPE  # type: ignore[assignment]
    """Offline store type selector (this class's path)."""


def every_column(config: Any, data_source: Any, feature_name_columns: list[str], named: set[str | None]
                 ) -> list[str]:
    """``feature_name_columns``, or when it is empty every column of ``data_source`` but the ``named`` ones (the
    keys and timestamps): what a udf's input needs from a full pull."""
    if feature_name_columns:
        return feature_name_columns
    return [c for c, _ in data_source.get_table_column_names_and_types(config) if c not in named]


class UdfDuckDBOfflineStore(DuckDBOfflineStore):
    """:class:`DuckDBOfflineStore` whose full pull returns every column when no feature column is named."""

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
        feature_name_columns = every_column(config, data_source, feature_name_columns,
                                            {*join_key_columns, timestamp_field, created_timestamp_column})
        return DuckDBOfflineStore.pull_all_from_table_or_query(
            config, data_source, join_key_columns, feature_name_columns, timestamp_field,
            created_timestamp_column, start_date, end_date)
