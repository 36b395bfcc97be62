"""What the rehearsal's steps share: the demo's context plus the running topology and the config it implies.

The config is the ``staging`` profile, unchanged, with the overrides a cluster would get from its
environment: where each server listens (here: loopback ports picked at start), and what this machine lacks
(no GPU: gloo on 2 CPU processes, float32). :func:`config_env` builds them as ``MLOPS__SECTION__KEY`` env vars,
the way the manifests set them, so the loop (in process) and the serving processes read one config.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlops_config import LoadedConfig, load_config
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.rehearsal.gitops import GitOpsRepo
from mlops_pipeline.rehearsal.serving import ServingPlane
from mlops_pipeline.rehearsal.topology import Platform
from mlops_pipeline.servers import ProcessHarness

PROFILE = "staging"


def config_env(platform: Platform, gitops_remote: Path, *, fast: bool = False) -> dict[str, str]:
    """The env a staging pod would get, pointed at this run's servers (secrets included, by the profile's names).

    ``gitops_remote`` is the bare repository Argo CD would watch: the drift job's rollback commits there, as the
    production profile's ``delivery.gitops_repo`` does.
    """
    run = platform.run_dir
    env = {
        "MLOPS_PROFILE": PROFILE,
        "MLOPS__TRACKING__URI": platform.mlflow_url,
        # artifacts go through the tracking server (--serve-artifacts), as a client without bucket credentials does
        "MLOPS__TRACKING__ARTIFACT_LOCATION": "mlflow-artifacts:///rehearsal",
        "MLOPS__TRACKING__S3_ENDPOINT_URL_ENV": "null",
        "MLOPS__FEATURES__REDIS_URL": platform.redis_url,
        "MLOPS__FEATURES__REGISTRY": platform.feast_registry_url,
        # the generated sample has fixed dates: its views' ttl counts from the local profile's pin, not the wall clock
        "MLOPS__FEATURES__ONLINE_TTL_AS_OF": "2026-11-04T00:00:00Z",
        # the environment's Spark cluster (spark://fraud-spark-master:7077) is this run's master, and its one worker
        # offers 2 cores and 2g: executors sized to fit it, one shuffle partition per core
        "MLOPS__FEATURES__SPARK_MASTER": platform.spark_master_url,
        "MLOPS__FEATURES__SPARK_CONF__SPARK.EXECUTOR.CORES": "2",
        "MLOPS__FEATURES__SPARK_CONF__SPARK.EXECUTOR.MEMORY": "1g",
        "MLOPS__FEATURES__SPARK_CONF__SPARK.SQL.SHUFFLE.PARTITIONS": "2",
        # no GPU here: the same FSDP code on gloo with 2 CPU processes, float32
        "MLOPS__TRAINING__BACKEND": "auto",
        "MLOPS__TRAINING__NPROC": "2",
        # the ReadWriteMany volume every training pod mounts (/mnt/checkpoints in staging) is this run's folder:
        # a run name reused by a later rehearsal must never resume from an earlier one's checkpoint
        "MLOPS__TRAINING__CHECKPOINT__DIR": str(run / "checkpoints"),
        "MLOPS__TRAINING__FSDP__MIXED_PRECISION__PARAM_DTYPE": "float32",
        "MLOPS__TRAINING__FSDP__MIXED_PRECISION__BUFFER_DTYPE": "float32",
        "MLOPS__SERVING__HOST": "127.0.0.1",
        # the bucket's landing prefix and the DVC remote are folders of this run
        "MLOPS__DATA__LANDING_URI": str(run / "landing"),
        "MLOPS__DATA__DVC_REMOTE": str(run / "dvc-remote"),
        # the shared prediction-log sink (an fsspec URI the serving pods, the drift job and the canary analysis all
        # reach: s3:// in the cluster), here a folder every process of this machine shares
        "MLOPS__SERVING__PREDICTION_LOG_URI": str(run / "prediction-log"),
        "MLOPS__SERVING__PREDICTION_LOG_FLUSH_S": "1",
        "MLOPS__MONITORING__WEBHOOK_URL": f"{platform.alertmanager_url}/api/v2/alerts",
        # the canary analysis asks Prometheus (PromQL per version); its window spans the whole canary
        "MLOPS__DELIVERY__PROMETHEUS_URL": platform.prometheus_url,
        "MLOPS__DELIVERY__CANARY_RATE_WINDOW": "30m",
        "MLOPS__DELIVERY__GITOPS_REPO": str(gitops_remote),
        # the retraining pull requests live on the same remote (the pin beside the overlays); the drift job runs
        # the data trigger, and a week of triggers happens in minutes here: no rate limit between them
        "MLOPS__DELIVERY__RETRAIN__ON_DATA": "true",
        "MLOPS__DELIVERY__RETRAIN__MIN_INTERVAL_HOURS": "0",
        "MLOPS__DATA__LABELS_LANDING_URI": str(run / "labels-landing"),
        "MLOPS__MONITORING__METRICS_FILE": str(run / "drift-metrics" / "fraud.prom"),
        # the drift job also replays a sample of what was served against the offline store (training/serving skew)
        "MLOPS__MONITORING__SKEW_SAMPLE_ROWS": "200",
        # the bucket is a folder: storageUri values are file:// URIs KServe's initializer (fetch_model) reads
        "MLOPS__DELIVERY__STORAGE_URI_TEMPLATE": f"file://{run}/bucket/models/{{model}}/v{{version}}/",
        **platform.secrets,
        **signing_env(run),
    }
    # --fast trains as long as the demo does: the first champion gets a sixth of max_steps, and below ~100 steps
    # it does not beat the trivial baseline's CI (measured: 50 steps, F1 0.09, CI lower bound +0.008 < +0.02)
    return env


def signing_env(run: Path) -> dict[str, str]:
    """The model-signing key pair a staging pod gets as mounted secret files (generated once for this run)."""
    from mlops_model import ensure_local_keys

    private, public = ensure_local_keys(run / "signing")
    return {"MLOPS_SIGNING_KEY": str(private), "MLOPS_SIGNING_PUBLIC_KEY": str(public)}


def load_rehearsal_config(repo_root: Path, env: dict[str, str]) -> LoadedConfig:
    """The staging profile plus ``env``'s overrides, from the repo's ``configs/``."""
    return load_config(profile=PROFILE, config_dir=repo_root / "configs", environ=env)


@dataclass
class RehearsalContext(PipelineContext):
    """The demo's context (so its steps and report sections run unchanged) plus the rehearsal's topology."""

    repo_root: Path = Path(".")
    run_dir: Path = Path(".")
    harness: ProcessHarness | None = None
    cleanup: ExitStack | None = None
    """Undone after every server stopped (databases dropped, env restored)."""
    platform: Platform | None = None
    gitops: GitOpsRepo | None = None
    plane: ServingPlane | None = None
    env: dict[str, str] = field(default_factory=dict)
    """The config env (MLOPS_PROFILE, MLOPS__..., secrets) every process of the rehearsal gets."""
    result: dict[str, Any] = field(default_factory=dict)
    """What the closing JSON line reports beyond the steps (alerts_received, rollback_commit, served_at_head)."""

    def move_root(self, root: Path) -> None:
        """Point paths at another checkout (the ingestion workspace, then the runner's clone)."""
        self.loaded = replace(self.loaded, root=root)
        self._validated = None

    @property
    def work_repo(self) -> Path:
        """The ingestion job's folder: its data goes to the DVC remote."""
        return self.run_dir / "ingest"

    @property
    def runner(self) -> Path:
        """The training job's checkout: it gets its data from the DVC remote only."""
        return self.run_dir / "runner"

    @property
    def prod_env(self) -> str:
        return self.cfg.delivery.environments[-1]
