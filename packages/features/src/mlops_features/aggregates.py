"""The ingestion step: the validated transactions as the Feast repository's raw source.

How features are computed is the repository's business (``feature_repo/``: each view's ``udf``); the
platform only lays the validated area down as one table, ``<features.source_dir>/transactions.parquet``,
that the repository's ``transactions`` FileSource reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from mlops_features.errors import DataError
from mlops_features.holdout_cut import order_keys

logger = logging.getLogger(__name__)

TRANSACTIONS_FILE = "transactions.parquet"
"""The raw table in ``features.source_dir`` (the repository's FileSource reads it)."""


def read_validated(validated_dir: str | Path, *, record_id: str) -> pd.DataFrame:
    """All accepted rows under ``validated_dir`` as one DataFrame, sorted by event time, ties by ``record_id`` (the
    contract's; fraud's is ``transaction_id``)."""
    files = sorted(Path(validated_dir).glob("*.parquet"))
    if not files:
        raise DataError(
            f"no validated batches in {str(validated_dir)!r}: run `mlops data generate` and `mlops data validate` first"
        )
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return df.sort_values(list(order_keys(record_id)), kind="stable").reset_index(drop=True)


def ingest(validated_dir: str | Path, source_dir: str | Path, *, record_id: str) -> dict[str, int]:
    """Write the validated area as the raw source table, ordered by :func:`read_validated` (ties by ``record_id``);
    returns ``{"transactions": rows}``."""
    tx = read_validated(validated_dir, record_id=record_id)
    out = Path(source_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{TRANSACTIONS_FILE}.tmp"
    tx.to_parquet(tmp, index=False)
    tmp.replace(out / TRANSACTIONS_FILE)
    logger.info("ingested %d transactions into %s", len(tx), out)
    return {"transactions": len(tx)}
