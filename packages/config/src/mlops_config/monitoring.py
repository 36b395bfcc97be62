"""``monitoring``: drift statistics, alert policy and actions."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mlops_config._base import Section
from mlops_config._spark import check_spark_conf

SERVING_COLUMNS = ("request_id", "ts", "model_name", "model_version", "variant", "event_timestamp", "created",
                   "degraded", "latency_ms")
"""Prediction-log columns that are serving bookkeeping or timestamps, never features (with the contract's ids and
label they make ``ignore_columns``'s default when a contract is declared)."""


class MonitoringConfig(Section):
    n_bins: int = Field(default=10, ge=2, le=100)
    """Quantile bins of the reference for numeric PSI."""

    psi_floor: float = Field(default=1e-4, gt=0, lt=0.01)
    """Share an empty bin is floored at in PSI."""

    psi_info: float = Field(default=0.05, ge=0)
    """PSI from which a feature counts as slightly drifted (INFO)."""

    psi_warning: float = Field(default=0.1, ge=0)
    """PSI from which a feature raises WARNING."""

    psi_critical: float = Field(default=0.2, ge=0)
    """PSI above which a key feature raises CRITICAL."""

    key_features: tuple[str, ...] = ()
    """Features whose critical drift (or the prediction score's) triggers rollback; with a ``contract`` declared,
    its ``key_features`` unless set here (none without: only the prediction score's drift)."""

    min_f1: float = Field(default=0.5, ge=0, le=1)
    """Realized F1 (with delayed labels) below this is CRITICAL."""

    ignore_columns: tuple[str, ...] = SERVING_COLUMNS
    """Columns that are ids, timestamps, labels or serving bookkeeping, not features; never compared. With a
    ``contract`` declared, :data:`SERVING_COLUMNS` plus its record id, entity keys and label unless set here;
    without, :data:`SERVING_COLUMNS` (a model's own ids and label are its contract's to name)."""

    window: str = "1h"
    """Default window of the prediction log that a run reads (``30m``, ``1h``, ``7d``)."""

    webhook_url: str | None = None
    """URL that WARNING and CRITICAL alerts are POSTed to."""

    webhook_token_env: str | None = None
    """Name of the env var holding the webhook's bearer token (secret)."""

    webhook_format: Literal["json", "alertmanager"] = "json"
    """Body of an alert: ``json`` (one object, any receiver) or ``alertmanager`` (Alertmanager's
    ``/api/v2/alerts``: a JSON array of ``{labels, annotations, startsAt, endsAt, generatorURL}``)."""

    webhook_https_only: bool = False
    """Refuse a ``webhook_url`` that is not ``https://`` (production: the bearer token never travels in clear)."""

    alert_valid_s: float = Field(default=7200.0, ge=60)
    """A firing alert's ``endsAt`` is this far ahead, so it stays active between hourly runs without a
    re-send; a run at a lower level resolves it at once (``endsAt`` = now)."""

    alert_state_file: str = "monitoring/alerts-{model}.json"
    """Under ``project.state_dir``: the alert firing now (to resolve it later) and the outbox of alerts
    not yet delivered, re-sent first on the next run; ``{model}`` is filled in."""

    auto_rollback: bool = True
    """Roll traffic back to the ``fallback`` model on CRITICAL."""

    rollback_signal: Literal["drift", "estimate"] = "drift"
    """What decides the rollback. ``drift``: any CRITICAL. ``estimate``: the window's CBPE estimated F1 against
    the reference's (``mlops_monitoring.estimated_drop``) decides when it can tell: a drop beyond
    ``max_f1_drop`` rolls back even below the PSI thresholds, an estimate that holds keeps a CRITICAL drift from
    rolling back a model that absorbs the shift; when it cannot tell, drift decides. CRITICAL realized quality
    always rolls back. Trust the estimate only for calibrated models (the calibration gate, docs/monitoring.md)."""

    webhook_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Timeout of one webhook POST; a failed POST is logged and reported, never retried silently."""

    min_rows: int = Field(default=200, ge=1)
    """A window with fewer current rows is refused: PSI on a handful of rows is noise."""

    decision_threshold: float | None = Field(default=None, gt=0, lt=1)
    """Override of the threshold (score at or above it: fraud) of realized and estimated precision/recall/F1.
    ``null``: the served version's own, recorded in its ``model.json`` (0.5 for an export that records none,
    reported as such). A value set here that disagrees with the recorded one is named in the verdict."""

    max_f1_drop: float = Field(default=0.1, ge=0, le=1)
    """Relative drop of realized F1 below the reference (validation) F1 that raises WARNING (0.1 = 10% lower)."""

    max_prior_ratio: float = Field(default=2.0, gt=1)
    """Realized label rate more than this many times above (or below) the reference's raises WARNING."""

    labels_path: str | None = None
    """Delayed labels: parquet/CSV file or folder with the contract's ``record_id`` and ``label`` columns (fraud:
    ``transaction_id``, ``is_fraud``), relative to the repo root."""

    performance_window: str = Field(default="1D", min_length=1)
    """Window of realized and estimated performance (``mlops monitor performance``): a pandas frequency."""

    performance_min_labelled: int = Field(default=50, ge=1)
    """A window with fewer labelled predictions gives an "inconclusive" realized-drop verdict, never a pass."""

    calibration_bins: int = Field(default=10, ge=2, le=100)
    """Equal-width score bins of the expected calibration error (ECE)."""

    estimate_interval: float = Field(default=0.9, gt=0, lt=1)
    """Coverage of the CBPE estimate's interval (the realized spread if labels were drawn from the scores)."""

    performance_metrics_file: str = "monitoring/performance.prom"
    """Prometheus text file of ``mlops monitor performance``, under ``project.reports_dir``."""

    metrics_file: str = "monitoring/metrics.prom"
    """Prometheus text file written each run (node-exporter textfile format), under ``project.reports_dir``."""

    skew_sample_rows: int = Field(default=0, ge=0)
    """Prediction-log rows of the window replayed against the offline store each run (training/serving skew,
    ``mlops_monitoring.skew``); 0 turns the replay off. Its metrics go to ``<metrics_file>-skew.prom``."""

    pushgateway_url: str | None = None
    """Prometheus Pushgateway the drift CronJob pushes its metrics to (``None``: only the file)."""

    engine: Literal["pandas", "duckdb", "spark"] = "duckdb"
    """Where the drift statistics are computed: ``duckdb`` pushes binning, counts and the KS ECDF down to
    DuckDB SQL over the prediction log's parquet parts and the reference (memory bounded by
    ``duckdb_memory_limit``, spilling to disk, not by the window); ``spark`` runs the same aggregates as Spark
    SQL on ``spark_master`` (the cluster profile); ``pandas`` loads the window into memory. All give the same
    statistics (to 1e-9) and verdicts."""

    spark_master: str = Field(default="local[*]", min_length=1)
    """``spark.master`` of the drift queries with ``engine: spark`` (``spark://host:7077``, ``k8s://https://…``)."""

    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Further Spark settings of the drift queries, each over ``mlops_config.SPARK_DEFAULTS``."""

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_keys(cls, conf: Any) -> Any:
        return check_spark_conf(conf, "monitoring.spark_conf")

    duckdb_memory_limit: str = Field(default="1GB", pattern=r"^\d+(\.\d+)?\s*([KMGT]i?B|B)$")
    """DuckDB's ``memory_limit`` for the drift queries (``512MB``, ``4GB``); beyond it DuckDB spills to disk."""

    duckdb_threads: int = Field(default=0, ge=0, le=512)
    """DuckDB worker threads for the drift queries; 0: one per core."""

    duckdb_temp_dir: str | None = None
    """Where DuckDB spills when a query outgrows ``duckdb_memory_limit`` (``None``: a fresh temporary folder)."""

    evidently_html: bool = True
    """Write Evidently's HTML drift report for people next to the JSON report."""

    evidently_max_rows: int = Field(default=50_000, ge=100)
    """Rows per side sampled into the Evidently report (it is slow on large frames; our verdicts use all rows)."""

    @model_validator(mode="after")
    def _https_webhook(self) -> MonitoringConfig:
        if self.webhook_https_only and self.webhook_url and not self.webhook_url.startswith("https://"):
            raise ValueError(
                f"webhook_url {self.webhook_url!r} is not https:// but webhook_https_only is true; "
                "alerts carry a bearer token: use the receiver's https:// URL"
            )
        return self

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> MonitoringConfig:
        if not self.psi_info <= self.psi_warning <= self.psi_critical:
            raise ValueError(
                f"thresholds must satisfy psi_info <= psi_warning <= psi_critical, got "
                f"{self.psi_info!r}, {self.psi_warning!r}, {self.psi_critical!r}"
            )
        return self
