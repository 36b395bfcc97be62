"""The labels gate: delayed ground truth validated like the raw batches and stored beside the prediction log.

A label batch is parquet with exactly the model contract's ``record_id`` column (string: ``transaction_id`` for
fraud), ``label`` (0/1) and ``label_time`` (UTC) (:func:`label_schema`); the stored labels keep those columns. The
label column keeps its generic name whatever the contract calls it: a batch carries one label, and what it means is
the contract's. For each batch:

1. Batch checks (shared with the transactions gate): the file exists, is non-empty readable parquet, has
   exactly the label columns with compatible Arrow types. A failure rejects the whole batch: its bytes are kept
   under ``quarantine/batches/`` and every readable row counts as quarantined.
2. Row checks, each a named reason: nulls; a label not in {0, 1}; an id with conflicting labels (inside the
   batch, or against a label stored from another batch: every row of that id is held, since which one is true
   cannot be told); a duplicate of a row already accepted (same id, same label; the first copy wins); an id
   the prediction log never served; a label dated before its prediction or in the future.

Layout, on the same store as the prediction log (a folder or ``s3://…``; features sit below serving, so the
caller resolves the URI and passes the served ids in)::

    <uri>/labels/model=<model>/label_date=<YYYY-MM-DD>/part-<batch>.parquet
    <uri>/labels/quarantine/model=<model>/<batch>.rows.parquet | <batch>.report.json | batches/<file>

Parts are named after their batch, so re-ingesting a batch replaces its own rows and never duplicates them.
Accepted + quarantined == input, always.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_features.errors import DataError
from mlops_features.gate import FAILED_COLUMN, BatchResult, ValidationSummary, _compatible, _read_batch, _stem

logger = logging.getLogger(__name__)

def label_schema(record_id: str) -> pa.Schema:
    """Columns of a label batch and of the stored labels: ``record_id`` (the contract's), ``label``, ``label_time``."""
    return pa.schema([
        pa.field(record_id, pa.string()),
        pa.field("label", pa.int64()),
        pa.field("label_time", pa.timestamp("us", tz="UTC")),
    ])


def label_reasons(record_id: str) -> tuple[str, ...]:
    """Row-level reasons a label is quarantined (the ``failed_expectations`` of its row), in the order they are
    checked; an id the log never served is ``unknown_<record_id>``."""
    return ("not_null", "label_in_set", "conflicting_label", "duplicate_label", f"unknown_{record_id}",
            "label_before_prediction", "label_time_in_future")


def labels_root(uri: str) -> str:
    """The labels folder of a prediction-log store URI (``<uri>/labels``)."""
    return f"{uri.rstrip('/')}/labels"


def ingest_labels(
    paths: Iterable[str | Path], store_uri: str, model: str, predictions: pd.DataFrame, *, record_id: str,
    now: datetime | None = None,
) -> ValidationSummary:
    """Validate label batches against what was served and store the accepted rows by label date.

    Args:
        paths: Label batches (parquet).
        store_uri: The prediction log's store, resolved (a folder or an fsspec URI).
        model: The served model the labels belong to.
        predictions: The served rows: ``record_id`` and ``ts`` (the prediction's time).
        record_id: The model contract's record id column (``contract.record_id``): batches, the stored labels and
            ``predictions`` are keyed by it.
        now: Upper bound for label times; default: the current UTC time.

    Raises:
        DataError: ``predictions`` lacks a column.
    """
    absent = [c for c in (record_id, "ts") if c not in predictions.columns]
    if absent:
        raise DataError(f"predictions lack columns {absent!r} (the contract's record_id {record_id!r} and the "
                        f"prediction time); they have {sorted(map(str, predictions.columns))!r}")
    store = _LabelStore(store_uri, model, record_id)
    served = (pd.to_datetime(predictions["ts"], utc=True).groupby(predictions[record_id].astype(str)).min()
              if len(predictions) else pd.Series(dtype="datetime64[ns, UTC]"))
    now_ts = pd.Timestamp(now or datetime.now(UTC))
    results = []
    for path in map(Path, paths):
        result = _ingest_one(path, store, served, now_ts)
        report = f"{store.quarantine}/{_stem(path)}.report.json"
        result.report_path = report
        store.write_bytes(report, (json.dumps(asdict(result), indent=2) + "\n").encode())
        assert result.accepted_rows + result.quarantined_rows == result.input_rows, "labels gate lost rows"
        logger.info("%s: %d labels in, %d accepted, %d quarantined", path.name, result.input_rows,
                    result.accepted_rows, result.quarantined_rows)
        results.append(result)
    return ValidationSummary(results)


def fetch_landed_labels(landing_uri: str, store_uri: str, model: str, dest: Path, *, record_id: str
                        ) -> tuple[list[Path], list[str]]:
    """Copy the label batches under ``landing_uri`` (any fsspec URL) that the store has not gated yet into ``dest``.

    A batch counts as gated when the store holds its report (``quarantine/…/<batch>.report.json``, written for
    every batch, accepted or not), so the labels CronJob takes each landed batch once.

    Returns:
        ``(local copies of the new batches, landed batches skipped)``.

    Raises:
        DataError: the landing folder does not exist.
    """
    from fsspec.core import url_to_fs

    fs, base = url_to_fs(landing_uri[len("file://"):] if landing_uri.startswith("file://") else landing_uri)
    if not fs.exists(base):
        raise DataError(f"labels landing area {landing_uri!r} (data.labels_landing_uri) does not exist; expected a "
                        f"folder of label batches (parquet: {record_id}, label, label_time)")
    store = _LabelStore(store_uri, model, record_id)
    dest.mkdir(parents=True, exist_ok=True)
    new, skipped = [], []
    for path in sorted(p for p in fs.find(base) if str(p).endswith(".parquet")):
        name = Path(str(path)).name
        if store.fs.exists(f"{store.quarantine}/{_stem(Path(name))}.report.json"):
            skipped.append(str(path))
            continue
        fs.get_file(path, str(dest / name))
        new.append(dest / name)
    return new, skipped


def read_labels(store_uri: str, model: str, *, record_id: str) -> pd.DataFrame:
    """Every accepted label of ``model`` (``record_id``, ``label``, ``label_time``), oldest first.

    Raises:
        DataError: a stored part lacks the ``record_id`` column (written under another contract).
    """
    return _LabelStore(store_uri, model, record_id).read()


def _ingest_one(path: Path, store: _LabelStore, served: pd.Series, now: pd.Timestamp) -> BatchResult:
    name = _stem(path)
    table, rows, problem = _read_batch(path)
    schema = store.schema
    if table is not None:
        missing = [c for c in schema.names if c not in table.column_names]
        extra = [c for c in table.column_names if c not in schema.names]
        wrong = [f"{f.name}: {table.schema.field(f.name).type} (expected {f.type})"
                 for f in schema if not missing and not _compatible(table.schema.field(f.name).type, f.type)]
        if missing or extra:
            problem = (f"schema mismatch in {path.name!r}: missing columns {missing!r}, unexpected {extra!r}; "
                       f"expected exactly {schema.names!r} (the contract's record_id {store.record_id!r})")
        elif wrong:
            problem = f"wrong column types in {path.name!r}: {'; '.join(wrong)}"
    if problem is not None or table is None:
        kept = f"{store.quarantine}/batches/{path.name}"
        if path.is_file():
            store.write_bytes(kept, path.read_bytes())
        store.remove_batch(name)
        return BatchResult(batch=name, input_rows=rows, accepted_rows=0, quarantined_rows=rows, batch_rejected=True,
                           reasons=[problem or "unreadable"], quarantine_path=kept if path.is_file() else None)
    df = table.select(schema.names).cast(schema).to_pandas().reset_index(drop=True)
    per_row = _row_failures(df, store.read(exclude_batch=name), served, now, store.record_id)
    bad = df.index.isin(list(per_row))
    accepted, rejected = df[~bad], df[bad].copy()
    counts: dict[str, int] = {}
    for reasons in per_row.values():
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
    result = BatchResult(batch=name, input_rows=len(df), accepted_rows=len(accepted), quarantined_rows=len(rejected),
                         batch_rejected=False, row_failures=dict(sorted(counts.items())),
                         reasons=[f"{k}: {v} rows" for k, v in sorted(counts.items())])
    store.remove_batch(name)
    if len(accepted):
        accepted = accepted.astype({"label": "int64"})
        dates = accepted["label_time"].dt.strftime("%Y-%m-%d")
        for date, part in accepted.groupby(dates, sort=True):
            store.write_table(f"{store.model_dir}/label_date={date}/part-{name}.parquet", part)
        result.validated_path = store.model_dir
    quarantined = f"{store.quarantine}/{name}.rows.parquet"
    if len(rejected):
        rejected[FAILED_COLUMN] = [",".join(per_row[i]) for i in rejected.index]
        store.write_table(quarantined, rejected, typed=False)
        result.quarantine_path = quarantined
    else:
        store.remove(quarantined)
    return result


def _row_failures(df: pd.DataFrame, stored: pd.DataFrame, served: pd.Series, now: pd.Timestamp, record_id: str
                  ) -> dict[int, list[str]]:
    """Row index → the reasons it is quarantined (in :func:`label_reasons` order)."""
    fails: dict[str, pd.Series] = {}
    ids = df[record_id]
    fails["not_null"] = df[[record_id, "label", "label_time"]].isna().any(axis=1)
    fails["label_in_set"] = df["label"].notna() & ~df["label"].isin([0, 1])
    usable = ~fails["not_null"] & ~fails["label_in_set"]
    # conflicting: more than one distinct label for the id, within the batch or against a stored one
    pool = pd.concat([df.loc[usable, [record_id, "label"]], stored[[record_id, "label"]]])
    distinct = pool.groupby(record_id)["label"].nunique()
    fails["conflicting_label"] = usable & ids.isin(distinct.index[distinct > 1])
    # duplicate: the same (id, label) seen before in this batch or already stored
    repeated = df.duplicated(subset=[record_id, "label"], keep="first")
    fails["duplicate_label"] = usable & ~fails["conflicting_label"] & (repeated | ids.isin(stored[record_id]))
    fails[f"unknown_{record_id}"] = ids.notna() & ~ids.isin(served.index)
    first_served = ids.map(served)
    fails["label_before_prediction"] = df["label_time"].notna() & first_served.notna() & (
        df["label_time"] < first_served)
    fails["label_time_in_future"] = df["label_time"].notna() & (df["label_time"] > now)
    out: dict[int, list[str]] = {}
    for reason in label_reasons(record_id):
        for i in df.index[fails[reason].fillna(False).to_numpy(dtype=bool)]:
            out.setdefault(int(i), []).append(reason)
    return out


class _LabelStore:
    """The label parts and quarantine of one model on an fsspec filesystem, keyed by the contract's ``record_id``."""

    def __init__(self, uri: str, model: str, record_id: str) -> None:
        from fsspec.core import url_to_fs

        try:
            fs, base = url_to_fs(uri[len("file://"):] if uri.startswith("file://") else uri)
        except (ImportError, ValueError) as exc:
            raise DataError(f"label store {uri!r} cannot be opened: {exc}") from None
        self.fs = fs
        self.record_id = record_id
        self.schema = label_schema(record_id)
        root = labels_root(base)
        self.model_dir = f"{root}/model={model}"
        self.quarantine = f"{root}/quarantine/model={model}"
        self.local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))

    def parts(self) -> list[str]:
        self.fs.invalidate_cache(self.model_dir)
        return sorted(self.fs.glob(f"{self.model_dir}/label_date=*/part-*.parquet"))

    def read(self, exclude_batch: str | None = None) -> pd.DataFrame:
        skip = f"part-{exclude_batch}.parquet"
        parts = [p for p in self.parts() if exclude_batch is None or not p.endswith("/" + skip)]
        if not parts:
            return self.schema.empty_table().to_pandas()
        for p in parts:
            names = pq.read_schema(p, filesystem=self.fs).names
            if self.record_id not in names:
                raise DataError(f"stored labels {p!r} have columns {names!r}, not the contract's record_id "
                                f"{self.record_id!r}: written under another contract; gate them again under this one")
        tables = [pq.read_table(p, filesystem=self.fs, schema=self.schema) for p in parts]
        frame = pa.concat_tables(tables).to_pandas()
        return frame.sort_values("label_time", kind="stable").reset_index(drop=True)

    def remove_batch(self, name: str) -> None:
        for p in self.parts():
            if p.endswith(f"/part-{name}.parquet"):
                self.remove(p)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path)

    def write_table(self, path: str, frame: pd.DataFrame, *, typed: bool = True) -> None:
        table = pa.Table.from_pandas(frame, schema=self.schema if typed else None, preserve_index=False)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(path, sink.getvalue().to_pybytes())

    def write_bytes(self, path: str, data: bytes) -> None:
        if not self.local:
            self.fs.pipe_file(path, data)  # one PUT: the object appears whole
            return
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # readers never see half a file


def summary_rows(summary: ValidationSummary) -> list[dict[str, Any]]:
    """One row per batch for a table: batch, input, accepted, quarantined, reasons."""
    return [{"batch": b.batch, "input": b.input_rows, "accepted": b.accepted_rows,
             "quarantined": b.quarantined_rows, "reasons": "; ".join(b.reasons)} for b in summary.batches]
