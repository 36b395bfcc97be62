"""The fixed holdout: the newest labelled transactions, fingerprinted so a report says exactly what it scored."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_evaluation.errors import EvaluationError

if TYPE_CHECKING:
    import pandas as pd

    from mlops_config import ContractConfig, DataConfig, FeaturesConfig

__all__ = ["Holdout", "load_holdout"]
TIME = "event_timestamp"


@dataclass(frozen=True)
class Holdout:
    """Holdout rows (raw columns as ``training_set`` returns them) and their fingerprint."""

    frame: pd.DataFrame
    fingerprint: str
    label: str
    """The label column (the model contract's)."""

    def describe(self) -> dict[str, Any]:
        """Rows, positives, time range and fingerprint, for the report."""
        ts = self.frame[TIME] if TIME in self.frame.columns else None
        return {"rows": len(self.frame), "positives": int(self.frame[self.label].sum()),
                "fingerprint": self.fingerprint,
                "from": str(ts.min()) if ts is not None else None, "to": str(ts.max()) if ts is not None else None}


def fingerprint(df: pd.DataFrame) -> str:
    """SHA-256 over column names and every value of the rows in order (pandas' stable row hashes)."""
    import pandas as pd

    digest = hashlib.sha256("|".join(map(str, df.columns)).encode())
    digest.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def split_holdout(df: pd.DataFrame, fraction: float, *, label: str, record_id: str) -> Holdout:
    """The newest ``fraction`` of rows by event time (ties by ``record_id``), labelled by ``label``, cut by
    :func:`mlops_features.split_off_holdout`. Not fitted on, but not unseen either (issue #30): tabular training
    validates on its own newest slice of the same set, which with the default fractions is these rows."""
    from mlops_features import split_off_holdout

    if label not in df.columns:
        raise EvaluationError(f"the training set has no label column {label!r} (the contract's); columns: "
                              f"{sorted(df.columns)!r}")
    if not 0 < fraction < 1:
        raise EvaluationError(f"holdout fraction {fraction!r} must be between 0 and 1 (exclusive)")
    _, frame = split_off_holdout(df, fraction, record_id=record_id)
    if frame.empty or frame[label].nunique() < 2:
        raise EvaluationError(
            f"the holdout has {len(frame)} rows and labels {sorted(frame[label].unique().tolist())!r}; "
            "expected both classes: generate more data (data.rows) or raise evaluation.tabular.holdout_fraction"
        )
    return Holdout(frame, fingerprint(frame), label)


def load_holdout(features: FeaturesConfig, data: DataConfig, root: Path, fraction: float, *,
                 contract: ContractConfig) -> Holdout:
    """Build the FeatureService training set (point-in-time) under ``contract`` and keep its newest ``fraction`` as
    holdout."""
    from mlops_features import training_set

    return split_holdout(training_set(features, data, root, contract=contract), fraction, label=contract.label,
                         record_id=contract.record_id)
