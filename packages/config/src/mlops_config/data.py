"""``data``: raw batches, the validation gate and quarantine."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlops_config._base import Section


class DataConfig(Section):
    raw_dir: str = "data/raw"
    """Folder where raw batches (parquet) land."""

    validated_dir: str = "data/validated"
    """Folder for rows that passed validation; the Feast sources read from here."""

    quarantine_dir: str = "data/quarantine"
    """Folder for rejected rows and batches, each with the failed expectations."""

    landing_uri: str | None = None
    """Where raw batches land on a cluster (fsspec URL, e.g. ``s3://mlops-data/fraud/landing``);
    ``mlops data ingest`` validates the new ones. ``None``: nothing lands (the local profile generates data)."""

    labels_landing_uri: str | None = None
    """Where delayed label batches land on a cluster (fsspec URL, e.g. ``s3://mlops-data/fraud/labels-landing``):
    ``mlops data labels ingest`` without batch arguments (the labels CronJob) gates the ones not gated yet.
    ``None``: label batches are passed as arguments."""

    dvc_remote: str | None = None
    """DVC remote URL the accepted area (``validated_dir``) is pushed to and training pulls from (``s3://…``
    on a cluster, a folder in a rehearsal). ``None``: no remote, so no shared data version (local profile)."""

    rows: int = Field(default=60_000, ge=1)
    """Rows the sample generator writes across all days."""

    days: int = Field(default=3, ge=1, le=366)
    """Days of transactions the sample generator spans (one batch file per day)."""

    users: int = Field(default=2_000, ge=1)
    """Distinct users in the sample data."""

    merchants: int = Field(default=300, ge=1)
    """Distinct merchants in the sample data."""

    fraud_rate: float = Field(default=0.03, gt=0.0, lt=1.0)
    """Approximate share of fraudulent transactions in generated data."""

    drift: Literal["none", "covariate", "prior", "concept", "category"] = "none"
    """Drift mode of the sample generator: numeric shift, base rate, label relationship, or category mix."""

    start_date: str = "2026-11-01"
    """First day (UTC, ISO date) of generated data."""

    min_batch_rows: int = Field(default=1, ge=0)
    """A batch with fewer rows is rejected whole."""

    max_batch_rows: int = Field(default=5_000_000, ge=1)
    """A batch with more rows is rejected whole."""


    @model_validator(mode="after")
    def _bounds_ordered(self) -> DataConfig:
        if self.min_batch_rows > self.max_batch_rows:
            raise ValueError(
                f"min_batch_rows={self.min_batch_rows!r} must not exceed max_batch_rows={self.max_batch_rows!r}"
            )
        return self
