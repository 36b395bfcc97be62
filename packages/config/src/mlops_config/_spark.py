"""Spark settings shared by the engines that run on Spark (Feast's materialization, the drift monitor)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPARK_DEFAULTS: dict[str, str] = {
    # Spark's own 1 GB driver heap ran out at 5 M source rows: a non-Spark source is read through the driver.
    "spark.driver.memory": "4g",
    # Feature udfs shuffle each view by entity into this many pandas groups (Spark's 200 is for large clusters).
    "spark.sql.shuffle.partitions": "8",
    # Day boundaries and timestamps handed to pandas are UTC whatever the machine's zone.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
}
"""The platform's Spark settings; a section's ``spark_conf`` overrides each of them."""


def check_spark_conf(conf: Any, key: str) -> Any:
    """``conf`` with number and boolean values as Spark's strings (``4`` → ``"4"``, ``true`` → ``"true"``: Spark
    reads every setting as a string, and YAML or an ``MLOPS__…`` env override gives numbers), if every key starts
    with ``spark.`` and no value is blank; else a ``ValueError``. Run before the field's own validation, so a
    value of another type (a list, a mapping) is still refused there, by its key."""
    if not isinstance(conf, Mapping):
        return conf
    conf = {k: (str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v)
            for k, v in conf.items()}
    bad = sorted(str(k) for k, v in conf.items()
                 if not str(k).startswith("spark.") or (isinstance(v, str) and not v.strip()))
    if bad:
        raise ValueError(f"{key} has invalid entries {bad}: expected keys starting with 'spark.' and non-empty "
                         "values (e.g. spark.driver.memory: 8g)")
    return conf


def spark_conf(overrides: Mapping[str, str], master: str) -> dict[str, str]:
    """:data:`SPARK_DEFAULTS`, then ``overrides``, then ``spark.master = master``."""
    return {**SPARK_DEFAULTS, **overrides, "spark.master": master}
