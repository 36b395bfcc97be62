"""`mlops data validate --model <m>` validates under the contract that model's file declares: a second use case
added as a config file alone (no file under packages/ changed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from mlops_features.schema import raw_schema
from tests.support.contracts import CHURN

MLOPS = [sys.executable, "-m", "mlops_cli"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    return subprocess.run([*MLOPS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_validate_reads_the_models_declared_contract(config_dir: Path) -> None:
    repo = config_dir.parent
    (config_dir / "models" / "churn.yaml").write_text(
        yaml.safe_dump({"contract": CHURN.model_dump(mode="json")}, sort_keys=False))
    t = pd.Timestamp("2026-11-09 10:00", tz="UTC")
    rows = pd.DataFrame({
        "event_id": ["e0", "e1", "e2"], "customer_id": ["c0", "c1", "c2"],
        "event_timestamp": [t] * 3, "created": [t] * 3, "tenure_months": [3, 500, 7],  # 500: above the declared max
        "monthly_charges": [10.0, 20.0, 30.0], "plan": ["basic", "pro", "gold"],  # gold: not an allowed plan
        "region": ["north", "south", "east"], "churned": [0, 1, 0],
    })
    batch = repo / "data" / "raw" / "churn-1.parquet"
    batch.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(rows, schema=raw_schema(CHURN), preserve_index=False), batch)

    res = run(["data", "validate", "--model", "churn", "--json", "--set", "data.min_batch_rows=1", str(batch)],
              cwd=repo)
    assert res.returncode == 0, res.stderr
    [result] = json.loads(res.stdout)["batches"]
    assert (result["batch_rejected"], result["accepted_rows"], result["quarantined_rows"]) == (False, 1, 2)
    assert result["row_failures"] == {"expect_column_values_to_be_between(tenure_months)": 1,
                                      "expect_column_values_to_be_in_set(plan)": 1}

    # the reference model's contract does not know these columns: the same batch is rejected whole under it
    res = run(["data", "validate", "--model", "fraud", "--json", "--set", "data.min_batch_rows=1", str(batch)],
              cwd=repo)
    assert res.returncode == 0, res.stderr
    [result] = json.loads(res.stdout)["batches"]
    assert result["batch_rejected"] and "missing columns ['transaction_id', 'user_id'" in result["reasons"][0]
