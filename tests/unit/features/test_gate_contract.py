"""The data gate follows the contract it is given: a second use case's columns, types and expectations."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlops_config import DataConfig
from mlops_features import validate_batches
from mlops_features.gate import FAILED_COLUMN
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support.contracts import CHURN

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
NOW = datetime(2026, 11, 10, tzinfo=UTC)
DATA = DataConfig(min_batch_rows=1, max_batch_rows=1_000)


def test_the_raw_schema_is_the_contracts_columns_and_types() -> None:
    ts = pa.timestamp("us", tz="UTC")
    assert raw_schema(CHURN) == pa.schema([
        ("event_id", pa.string()), ("customer_id", pa.string()), ("event_timestamp", ts), ("created", ts),
        ("tenure_months", pa.int64()), ("monthly_charges", pa.float64()), ("plan", pa.string()),
        ("region", pa.string()), ("churned", pa.int8()),
    ])


@pytest.fixture
def batch() -> pd.DataFrame:
    n = 12
    t = pd.Timestamp("2026-11-09 10:00", tz="UTC")
    return pd.DataFrame({
        "event_id": [f"e{i}" for i in range(n)],
        "customer_id": [f"c{i % 4}" for i in range(n)],
        "event_timestamp": [t + pd.Timedelta(minutes=i) for i in range(n)],
        "created": [t + pd.Timedelta(minutes=i + 1) for i in range(n)],
        "tenure_months": [1, 5, 120, 0, 44, 7, 8, 9, 10, 11, 12, 13],
        "monthly_charges": [9.5, 20.0, 0.0, 1e6, 33.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0],
        "plan": ["basic", "pro"] * 6,
        "region": ["north", "mars", "south", "anywhere", "x", "y", "z", "w", "v", "u", "t", "s"],  # free text
        "churned": [0, 1] * 6,
    })


def _write(df: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(df, schema=raw_schema(CHURN), preserve_index=False), path)
    return path


def test_a_good_batch_under_the_contract_is_accepted_whole(tmp_path: Path, batch: pd.DataFrame) -> None:
    result = validate_batches([_write(batch, tmp_path / "raw" / "b.parquet")], DATA, tmp_path, now=NOW,
                              contract=CHURN).batches[0]
    assert (result.batch_rejected, result.accepted_rows, result.quarantined_rows) == (False, 12, 0)
    assert pd.read_parquet(tmp_path / "data/validated/b.parquet")["event_id"].tolist() == batch["event_id"].tolist()


def test_rows_off_the_contracts_expectations_are_quarantined_by_name(tmp_path: Path, batch: pd.DataFrame) -> None:
    bad = batch.copy()
    bad.loc[1, "tenure_months"] = 121  # above the declared max
    bad.loc[2, "monthly_charges"] = -0.5  # below the declared min
    bad.loc[3, "plan"] = "gold"  # not an allowed value
    bad.loc[4, "churned"] = 2  # label not 0/1
    bad.loc[6, "event_id"] = "e5"  # record id twice: rows 5 and 6
    bad["customer_id"] = bad["customer_id"].astype(object)
    bad.loc[7, "customer_id"] = None  # not-null
    result = validate_batches([_write(bad, tmp_path / "raw" / "b.parquet")], DATA, tmp_path, now=NOW,
                              contract=CHURN).batches[0]
    assert result.row_failures == {
        "expect_column_values_to_be_between(tenure_months)": 1,
        "expect_column_values_to_be_between(monthly_charges)": 1,
        "expect_column_values_to_be_in_set(plan)": 1,
        "expect_column_values_to_be_in_set(churned)": 1,
        "expect_column_values_to_be_unique(event_id)": 2,
        "expect_column_values_to_not_be_null(customer_id)": 1,
    }
    assert (result.accepted_rows, result.quarantined_rows) == (5, 7)
    quarantined = pd.read_parquet(tmp_path / "data/quarantine/b.rows.parquet")
    assert sorted(quarantined["tenure_months"]) == sorted(bad.loc[1:7, "tenure_months"])
    assert quarantined[FAILED_COLUMN].str.contains("in_set(plan)", regex=False).sum() == 1


def test_a_record_id_accepted_in_another_batch_is_quarantined(tmp_path: Path, batch: pd.DataFrame) -> None:
    validate_batches([_write(batch.iloc[:6], tmp_path / "raw" / "a.parquet")], DATA, tmp_path, now=NOW,
                     contract=CHURN)
    result = validate_batches([_write(batch.iloc[4:], tmp_path / "raw" / "b.parquet")], DATA, tmp_path, now=NOW,
                              contract=CHURN).batches[0]
    assert result.row_failures == {"unique_across_batches(event_id)": 2}


def test_a_batch_of_another_contracts_columns_is_rejected_naming_them(tmp_path: Path) -> None:
    other = FRAUD_SCHEMA.empty_table().to_pandas()
    path = tmp_path / "raw" / "x.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(other, schema=FRAUD_SCHEMA, preserve_index=False), path)
    result = validate_batches([path], DataConfig(min_batch_rows=0, max_batch_rows=10), tmp_path, now=NOW,
                              contract=CHURN).batches[0]
    assert result.batch_rejected
    assert "missing columns ['event_id', 'customer_id', 'tenure_months'" in result.reasons[0]


def test_the_gate_has_no_default_contract(tmp_path: Path) -> None:
    """A caller that forgets its model's contract fails at the call, not silently under fraud's."""
    from mlops_features.gate import build_batch_suite, build_suite
    from mlops_features.landing import ingest_landed

    with pytest.raises(TypeError, match="contract"):
        validate_batches([], DATA, tmp_path, now=NOW)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        build_suite(NOW)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        build_batch_suite(DATA)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        ingest_landed(DATA, tmp_path)  # type: ignore[call-arg]


def test_the_suites_built_from_the_churn_contract_check_churn_columns_only() -> None:
    import great_expectations as gx

    from mlops_features.gate import build_batch_suite, build_suite

    gx.get_context(mode="ephemeral")
    rows = build_suite(NOW, contract=CHURN)
    checked = {(e.configuration.type, e.configuration.kwargs.get("column")) for e in rows.expectations}
    assert ("expect_column_values_to_be_unique", "event_id") in checked
    assert ("expect_column_values_to_be_in_set", "churned") in checked
    assert ("expect_column_values_to_be_in_set", "plan") in checked
    assert not {c for _, c in checked} & {"transaction_id", "is_fraud", "amount", "user_id", "merchant_id"}
    [columns] = [e for e in build_batch_suite(DATA, contract=CHURN).expectations
                 if e.configuration.type == "expect_table_columns_to_match_set"]
    assert sorted(columns.configuration.kwargs["column_set"]) == sorted([
        "event_id", "customer_id", "event_timestamp", "created", "tenure_months", "monthly_charges", "plan", "region",
        "churned"])
