"""How the platform runs its Spark standalone cluster: the master's and the workers' command lines, one definition.

The cluster profiles' Spark engines (``features.batch_engine: spark``, ``monitoring.engine: spark``) connect to
``spark://<master>:7077``. ``infra/base/features/spark-cluster.yaml`` runs the master and the workers from the
platform's own image (pyspark's ``spark-class``, the JVM from Debian's ``default-jre-headless``); the rehearsal
starts the same commands on loopback ports (``tests/gitops`` checks that the manifest agrees). A standalone
cluster needs no operator and no cluster role: the drivers are the CronJobs' own processes, the executors run on
the workers, and both sides run the same image, so the Python that runs a feature view's udf is the driver's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_PORT = 7077
MASTER_UI_PORT = 8080


def spark_master_args(*, host: str, port: int = MASTER_PORT, webui_port: int = MASTER_UI_PORT) -> list[str]:
    """``spark-class`` arguments of the master: the class, where it listens and its status page (``/json/``)."""
    return [MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(webui_port)]


def spark_worker_args(master_url: str, *, cores: int, memory: str, work_dir: str, host: str | None = None,
                      webui_port: int | None = None) -> list[str]:
    """``spark-class`` arguments of a worker: the master it joins, what it offers executors, where they run.

    Raises:
        ValueError: ``master_url`` is not ``spark://host:port``, ``cores`` < 1, or ``memory`` is not like ``4g``.
    """
    if not master_url.startswith("spark://") or ":" not in master_url.removeprefix("spark://"):
        raise ValueError(f"master_url {master_url!r} is not a standalone master URL: expected spark://host:port")
    if cores < 1:
        raise ValueError(f"cores {cores} must be at least 1")
    if not memory[:-1].isdigit() or memory[-1].lower() not in "mg":
        raise ValueError(f"memory {memory!r} is not a JVM size: expected a number and m or g, e.g. 4g")
    args = [WORKER_CLASS, master_url, "--cores", str(cores), "--memory", memory, "--work-dir", work_dir]
    if host is not None:
        args += ["--host", host]
    if webui_port is not None:
        args += ["--webui-port", str(webui_port)]
    return args


def spark_class() -> str:
    """pyspark's own ``bin/spark-class`` (the copy pip puts on ``PATH`` cannot find the jars without ``SPARK_HOME``).

    Raises:
        RuntimeError: pyspark is not installed.
    """
    spec = importlib.util.find_spec("pyspark")  # its location only: importing pyspark starts nothing but is slow
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed: the Spark cluster runs pyspark's spark-class "
                           "(requirements.lock pins it)")
    return str(Path(spec.origin).parent / "bin" / "spark-class")
