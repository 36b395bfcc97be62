"""The validation gate: every kind of bad batch is caught, nothing is lost, re-validation is idempotent."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlops_config import DataConfig
from mlops_features import generate_transactions, validate_batches
from mlops_features.gate import FAILED_COLUMN
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
NOW = datetime(2026, 11, 10, tzinfo=UTC)
DATA = DataConfig(min_batch_rows=1, max_batch_rows=1_000)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    path = generate_transactions(tmp_path_factory.mktemp("good"), rows=400, days=1, seed=1, users=50, merchants=20)[0]
    return pd.read_parquet(path)


def _write(df: pd.DataFrame, path: Path, schema: pa.Schema | None = FRAUD_SCHEMA) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(df, schema=schema, preserve_index=False), path)
    return path


def _set(column: str, rows: list[int], value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if value is None and df[column].dtype.kind in "iu":
            df[column] = df[column].astype("float64")
        df.loc[rows, column] = value
        return df

    return edit


def _dup(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df.loc[[10, 11], "transaction_id"] = df.loc[9, "transaction_id"]
    return df


def _created_before(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df.loc[[4, 5], "created"] = df.loc[[4, 5], "event_timestamp"] - pd.Timedelta(minutes=1)
    return df


FUTURE = pd.Timestamp("2026-12-24 12:00", tz="UTC")

# name → (edit, transaction rows expected in quarantine (positions in the good batch), expectation named)
ROW_LEVEL = {
    "null user_id": (_set("user_id", [1, 2, 3], None), [1, 2, 3], "expect_column_values_to_not_be_null(user_id)"),
    "null amount": (_set("amount", [7], np.nan), [7], "expect_column_values_to_not_be_null(amount)"),
    "negative amount": (_set("amount", [0, 5], -3.5), [0, 5], "expect_column_values_to_be_between(amount)"),
    "amount above max": (_set("amount", [9], 99_999.0), [9], "expect_column_values_to_be_between(amount)"),
    "unknown category": (_set("category", [20], "weapons"), [20], "expect_column_values_to_be_in_set(category)"),
    "unknown currency": (_set("currency", [21, 22], "XYZ"), [21, 22], "expect_column_values_to_be_in_set(currency)"),
    "label not 0/1": (_set("is_fraud", [30], 2), [30], "expect_column_values_to_be_in_set(is_fraud)"),
    "duplicate transaction_id": (_dup, [9, 10, 11], "expect_column_values_to_be_unique(transaction_id)"),
    "event time in the future": (_set("event_timestamp", [40], FUTURE), [40],
                                 "expect_column_values_to_be_between(event_timestamp)"),
    "created before event": (_created_before, [4, 5],
                             "expect_column_pair_values_a_to_be_greater_than_b(created,event_timestamp)"),
    "null merchant_id and bad device": (lambda df: _set("device", [50], "fax")(_set("merchant_id", [50, 51], None)(df)),
                                        [50, 51], "expect_column_values_to_not_be_null(merchant_id)"),
}


@pytest.mark.parametrize("kind", list(ROW_LEVEL))
def test_row_level_failures_go_to_quarantine_and_nothing_is_lost(tmp_path: Path, good: pd.DataFrame, kind: str) -> None:
    edit, bad_rows, expectation = ROW_LEVEL[kind]
    df = edit(good)
    schema = None if df["is_fraud"].dtype.kind == "f" else FRAUD_SCHEMA
    path = _write(df, tmp_path / "raw" / "batch.parquet", schema=schema)
    result = validate_batches([path], DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT).batches[0]
    assert not result.batch_rejected
    assert result.input_rows == len(good)
    assert result.quarantined_rows == len(bad_rows)
    assert result.accepted_rows + result.quarantined_rows == result.input_rows
    assert expectation in result.row_failures
    quarantined = pd.read_parquet(tmp_path / "data/quarantine/batch.rows.parquet")
    expected_ids = set(df.loc[bad_rows, "transaction_id"].astype(object).where(lambda s: s.notna(), None))
    assert set(quarantined["transaction_id"]) == expected_ids
    assert quarantined[FAILED_COLUMN].str.contains(expectation, regex=False).any()
    accepted = pd.read_parquet(tmp_path / "data/validated/batch.parquet")
    assert len(accepted) == len(good) - len(bad_rows)
    assert not set(accepted["transaction_id"]) & set(good.loc[bad_rows, "transaction_id"])
    report = json.loads((tmp_path / "data/quarantine/batch.report.json").read_text())
    assert report["quarantined_rows"] == len(bad_rows)


def test_a_row_failing_two_expectations_lists_both(tmp_path: Path, good: pd.DataFrame) -> None:
    df = _set("device", [50], "fax")(_set("merchant_id", [50], None)(good))
    path = _write(df, tmp_path / "b.parquet")
    validate_batches([path], DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT)
    row = pd.read_parquet(tmp_path / "data/quarantine/b.rows.parquet").iloc[0]
    assert set(row[FAILED_COLUMN].split(",")) == {
        "expect_column_values_to_be_in_set(device)", "expect_column_values_to_not_be_null(merchant_id)"}


def _bytes(content: bytes) -> Callable[[pd.DataFrame, Path], int]:
    def make(df: pd.DataFrame, path: Path) -> int:
        path.write_bytes(content)
        return 0

    return make


def _truncated(df: pd.DataFrame, path: Path) -> int:
    _write(df, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return 0


def _table(edit: Callable[[pd.DataFrame], pd.DataFrame], schema: pa.Schema | None = None) -> Callable:
    def make(df: pd.DataFrame, path: Path) -> int:
        out = edit(df)
        _write(out, path, schema=schema)
        return len(out)

    return make


NAIVE = pa.schema([f if f.name not in ("event_timestamp", "created") else pa.field(f.name, pa.timestamp("us"))
                   for f in FRAUD_SCHEMA])
BATCH_LEVEL = {
    "empty file": (_bytes(b""), "empty file"),
    "not parquet": (_bytes(b"transaction_id,amount\nT1,3.5\n"), "unreadable parquet"),
    "truncated parquet": (_truncated, "unreadable parquet"),
    "zero rows": (_table(lambda df: df.iloc[:0], FRAUD_SCHEMA), "row count 0"),
    "too many rows": (_table(lambda df: pd.concat([df] * 3, ignore_index=True), FRAUD_SCHEMA), "row count 1200"),
    "missing column": (_table(lambda df: df.drop(columns=["merchant_id"])), "missing columns ['merchant_id']"),
    "extra column": (_table(lambda df: df.assign(cvv="123")), "unexpected ['cvv']"),
    "amount as text": (_table(lambda df: df.assign(amount=df["amount"].astype(str))), "amount: string"),
    "naive timestamps": (_table(lambda df: df.assign(event_timestamp=df["event_timestamp"].dt.tz_localize(None),
                                                     created=df["created"].dt.tz_localize(None)), NAIVE),
                         "event_timestamp: timestamp[us]"),
    "label as text": (_table(lambda df: df.assign(is_fraud=df["is_fraud"].map({0: "no", 1: "yes"}))),
                      "is_fraud: string"),
}


@pytest.mark.parametrize("kind", list(BATCH_LEVEL))
def test_batch_level_failures_reject_the_whole_batch_and_keep_the_file(
    tmp_path: Path, good: pd.DataFrame, kind: str
) -> None:
    make, needle = BATCH_LEVEL[kind]
    path = tmp_path / "raw" / "bad.parquet"
    path.parent.mkdir(parents=True)
    rows = make(good, path)
    result = validate_batches([path], DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT).batches[0]
    assert result.batch_rejected
    assert needle in result.reasons[0], result.reasons
    assert result.input_rows == rows
    assert result.accepted_rows == 0
    assert result.accepted_rows + result.quarantined_rows == result.input_rows
    kept = tmp_path / "data/quarantine/batches/bad.parquet"
    assert kept.read_bytes() == path.read_bytes()
    assert not (tmp_path / "data/validated/bad.parquet").exists()


def test_one_corrupted_batch_among_good_ones(tmp_path: Path) -> None:
    paths = generate_transactions(tmp_path / "raw", rows=900, days=3, seed=2, users=60, merchants=20)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[:100])
    summary = validate_batches(paths, DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT)
    assert [b.batch_rejected for b in summary.batches] == [False, True, False]
    assert summary.accepted_rows == sum(pq.read_metadata(p).num_rows for p in (paths[0], paths[2]))
    assert summary.to_dict()["rejected_batches"] == 1


def test_revalidating_is_idempotent_and_ids_accepted_elsewhere_are_quarantined(
    tmp_path: Path, good: pd.DataFrame
) -> None:
    first = _write(good, tmp_path / "raw" / "a.parquet")
    for _ in range(2):
        result = validate_batches([first], DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT).batches[0]
        assert result.accepted_rows == len(good)
    validated = pd.concat([pd.read_parquet(p) for p in (tmp_path / "data/validated").glob("*.parquet")])
    assert len(validated) == len(good)
    assert validated["transaction_id"].is_unique
    # The same rows arriving again in another batch are not accepted twice.
    resent = _write(good.iloc[:25], tmp_path / "raw" / "b.parquet")
    again = validate_batches([resent], DATA, tmp_path, now=NOW, contract=FRAUD_CONTRACT).batches[0]
    assert (again.accepted_rows, again.quarantined_rows) == (0, 25)
    assert again.row_failures == {"unique_across_batches(transaction_id)": 25}


CORRUPTIONS = {
    "user_id": None, "amount": -1.0, "category": "weapons", "currency": "XYZ", "event_timestamp": FUTURE,
    "device": "fax",
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.tuples(st.integers(0, 399), st.sampled_from(sorted(CORRUPTIONS))), min_size=0, max_size=30))
def test_any_mix_of_bad_rows_loses_nothing(tmp_path_factory: pytest.TempPathFactory, good: pd.DataFrame,
                                           picks: list[tuple[int, str]]) -> None:
    root = tmp_path_factory.mktemp("mix")
    df = good.copy()
    for row, column in picks:
        df.loc[row, column] = CORRUPTIONS[column]
    path = _write(df, root / "raw" / "mix.parquet")
    result = validate_batches([path], DATA, root, now=NOW, contract=FRAUD_CONTRACT).batches[0]
    bad = {good.loc[row, "transaction_id"] for row, _ in picks}
    assert result.accepted_rows + result.quarantined_rows == result.input_rows == len(good)
    assert result.quarantined_rows == len(bad)
    if bad:
        assert set(pd.read_parquet(root / "data/quarantine/mix.rows.parquet")["transaction_id"]) == bad
    assert set(pd.read_parquet(root / "data/validated/mix.parquet")["transaction_id"]) == set(
        good["transaction_id"]) - bad
