"""Spark settings shared by the engines that run on Spark (Feast's materialization, the drift monitor)."""

from __future__ import annotations

from collections.abc import Mapping

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


def check_spark_conf(conf: dict[str, str], key: str) -> dict[str, str]:
    """``conf`` if every key starts with ``spark.`` and every value is non-blank; else a ``ValueError``."""
    bad = sorted(k for k in conf if not k.startswith("spark.") or not conf[k].strip())
    if bad:
        raise ValueError(f"{key} has invalid entries {bad}: expected keys starting with 'spark.' and non-empty "
                         "string values (e.g. spark.driver.memory: 8g)")
    return conf


def spark_conf(overrides: Mapping[str, str], master: str) -> dict[str, str]:
    """:data:`SPARK_DEFAULTS`, then ``overrides``, then ``spark.master = master``."""
    return {**SPARK_DEFAULTS, **overrides, "spark.master": master}
