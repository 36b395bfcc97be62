"""The Spark standalone cluster's command lines (what infra/base/features/spark-cluster.yaml and the rehearsal run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlops_core import spark_class, spark_master_args, spark_worker_args


def test_master_and_worker_arguments_are_spark_class_arguments() -> None:
    assert spark_master_args(host="10.0.0.5", port=7077, webui_port=8080) == [
        "org.apache.spark.deploy.master.Master", "--host", "10.0.0.5", "--port", "7077", "--webui-port", "8080"]
    assert spark_worker_args("spark://m:7077", cores=4, memory="12g", work_dir="/tmp/w", host="10.0.0.6",
                             webui_port=8081) == [
        "org.apache.spark.deploy.worker.Worker", "spark://m:7077", "--cores", "4", "--memory", "12g",
        "--work-dir", "/tmp/w", "--host", "10.0.0.6", "--webui-port", "8081"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"master_url": "local[*]"}, r"master_url 'local\[\*\]' is not a standalone master URL: expected spark://"),
    ({"master_url": "spark://nohost"}, r"'spark://nohost' is not a standalone master URL"),
    ({"cores": 0}, r"cores 0 must be at least 1"),
    ({"memory": "12"}, r"memory '12' is not a JVM size"),
    ({"memory": "lots"}, r"memory 'lots' is not a JVM size"),
])
def test_a_bad_worker_setting_is_named(kwargs: dict, message: str) -> None:
    args = {"master_url": "spark://m:7077", "cores": 2, "memory": "2g", "work_dir": "/tmp/w", **kwargs}
    with pytest.raises(ValueError, match=message):
        spark_worker_args(**args)


def test_spark_class_is_pysparks_own_launcher_beside_its_jars() -> None:
    launcher = Path(spark_class())
    assert launcher.parts[-3:] == ("pyspark", "bin", "spark-class") and os.access(launcher, os.X_OK)
    assert any((launcher.parent.parent / "jars").glob("spark-core_*.jar"))  # what it needs SPARK_HOME for
