"""From nothing to a feature store ready for training and serving, in one call (the local profile's path).

``prepare_local_data`` = generate → validate → ingest → apply → backfill → materialize. Training then calls
:func:`mlops_features.training_set`; serving opens :class:`mlops_features.OnlineFeatures`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mlops_config import ContractConfig, DataConfig, FeaturesConfig
from mlops_core import hash_files
from mlops_features.aggregates import ingest
from mlops_features.backfill import backfill
from mlops_features.errors import DataError
from mlops_features.gate import ValidationSummary, validate_batches
from mlops_features.sample import generate_transactions
from mlops_features.store import apply_repo, materialize

logger = logging.getLogger(__name__)


@dataclass
class PreparedData:
    """What :func:`prepare_local_data` did."""

    raw_paths: list[Path]
    validation: ValidationSummary
    ingested_rows: dict[str, int]
    data_version: str
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "raw_paths": [str(p) for p in self.raw_paths],
            "validation": self.validation.to_dict(),
            "ingested_rows": self.ingested_rows,
            "data_version": self.data_version,
            "seconds": self.seconds,
        }


def data_version(data: DataConfig, root: str | Path) -> str:
    """SHA-256 of the validated area: the data version recorded on training runs."""
    folder = Path(root) / data.validated_dir
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        raise DataError(f"no validated data in {str(folder)!r} to version: run `mlops data validate` first")
    return hash_files(sorted(folder.glob("*.parquet")))


def refresh_online(
    features: FeaturesConfig,
    data: DataConfig,
    root: str | Path,
    *,
    incremental: bool = False,
    end: datetime | None = None,
    ingest_first: bool = True,
    contract: ContractConfig,
) -> dict[str, Any]:
    """``mlops features materialize``: ingest, backfill the offline tables, then load the online store.

    Args:
        features: The ``features`` section.
        data: The ``data`` section (where the validated area is).
        root: Repo root the sections' paths are relative to.
        incremental: See :func:`mlops_features.materialize`.
        end: See :func:`mlops_features.materialize`.
        ingest_first: Lay the validated area down as the raw source before computing (default).
        contract: The model's contract (its record id orders the raw source's ties).
    """
    root = Path(root)
    rows = (ingest(root / data.validated_dir, root / features.source_dir, record_id=contract.record_id)
            if ingest_first else None)
    backfilled = backfill(features, root)
    return {**materialize(features, root, incremental=incremental, end=end), "ingested_rows": rows,
            "backfilled_rows": backfilled}


def build_features(features: FeaturesConfig, data: DataConfig, root: str | Path, *,
                   contract: ContractConfig) -> dict[str, Any]:
    """Ingest the validated area (ties ordered by ``contract``'s record id), apply the repo, backfill its offline
    tables and materialize (the DVC stage)."""
    root = Path(root)
    t0 = time.perf_counter()
    rows = ingest(root / data.validated_dir, root / features.source_dir, record_id=contract.record_id)
    t1 = time.perf_counter()
    applied = apply_repo(features, root)
    t2 = time.perf_counter()
    backfilled = backfill(features, root)
    t3 = time.perf_counter()
    done = materialize(features, root)
    t4 = time.perf_counter()
    return {"ingested_rows": {**rows, **backfilled}, "applied": applied, "materialized": done,
            "seconds": {"ingest": t1 - t0, "apply": t2 - t1, "backfill": t3 - t2, "materialize": t4 - t3}}


def prepare_local_data(
    data: DataConfig, features: FeaturesConfig, root: str | Path, *, contract: ContractConfig, seed: int = 42,
    drift: str | None = None,
) -> PreparedData:
    """Generate sample data from the ``data`` section, validate it, build the features, load the online store.

    Args:
        data: The ``data`` section (size, days, folders, bounds).
        features: The ``features`` section (Feast stores, TTL).
        root: Repo root the sections' paths are relative to (tests pass a temp folder).
        contract: The model's contract the gate validates against and whose record id orders ties (the generated
            rows are the reference fraud model's: pass its contract, ``configs/models/fraud.yaml``).
        seed: Generator seed (``project.seed``).
        drift: Drift mode; default ``data.drift``.

    Returns:
        Paths, the validation summary, ingested rows, the data version and per-step seconds.
    """
    root = Path(root)
    t0 = time.perf_counter()
    raw = generate_transactions(
        root / data.raw_dir, rows=data.rows, days=data.days, seed=seed, drift=drift or data.drift,
        start_date=data.start_date, users=data.users, merchants=data.merchants, fraud_rate=data.fraud_rate,
    )
    t1 = time.perf_counter()
    summary = validate_batches(raw, data, root, contract=contract)
    if summary.accepted_rows == 0:
        raise DataError(f"the gate accepted no rows of {[p.name for p in raw]}: see {data.quarantine_dir}/")
    t2 = time.perf_counter()
    built = build_features(features, data, root, contract=contract)
    seconds = {"generate": t1 - t0, "validate": t2 - t1, **built["seconds"]}
    version = data_version(data, root)
    logger.info("prepared local data %s in %.1f s", version[:12], sum(seconds.values()))
    return PreparedData(raw, summary, built["ingested_rows"], version, seconds)
