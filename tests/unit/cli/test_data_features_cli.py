"""`mlops data` and `mlops features` as a user runs them on the local profile, from a clean copy of the repo.

generate → validate (one corrupted batch) → features apply → materialize (ingests first) → get, in real
subprocesses with real exit codes; everything lands under the temp repo, never the developer's .mlops/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MLOPS = [sys.executable, "-m", "mlops_cli"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    return subprocess.run([*MLOPS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_generate_validate_apply_materialize_get(config_dir: Path, repo_root: Path) -> None:
    repo = config_dir.parent
    shutil.copytree(repo_root / "feature_repo", repo / "feature_repo")
    small = ["--set", "data.users=200", "--set", "data.merchants=30"]

    res = run(["data", "generate", "--rows", "3000", "--days", "3", "--seed", "9", "--json", *small], cwd=repo)
    assert res.returncode == 0, res.stderr
    batches = [Path(p) for p in json.loads(res.stdout)["batches"]]
    assert [p.parent for p in batches] == [repo / "data/raw"] * 3
    good_rows = sum(pq.read_metadata(p).num_rows for p in batches[::2])
    batches[1].write_bytes(batches[1].read_bytes()[:200])  # a truncated upload

    res = run(["data", "validate", "--json"], cwd=repo)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [b["batch_rejected"] for b in doc["batches"]] == [False, True, False]
    # progress off a terminal: a plain line per batch on stderr (stdout is the JSON), the last with nothing left
    progress = [line for line in res.stderr.splitlines() if line.startswith("batch ")]
    assert [line.split()[1] for line in progress] == ["1/3", "2/3", "3/3"], res.stderr
    assert progress[-1].startswith(f"batch 3/3 {batches[2].name}: ") and progress[-1].endswith(" eta 0s")
    assert doc["accepted_rows"] == good_rows
    for b in doc["batches"]:
        assert b["accepted_rows"] + b["quarantined_rows"] == b["input_rows"]
        assert set(b) >= {"input_rows", "accepted_rows", "quarantined_rows", "batch_rejected", "reasons"}
    assert (repo / "data/quarantine/batches" / batches[1].name).is_file()

    res = run(["features", "apply", "--json"], cwd=repo)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["feature_services"] == ["fraud_rt_v1", "fraud_v1"]  # both declared in feature_repo/
    res = run(["features", "materialize", "--json"], cwd=repo)
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert done["ingested_rows"]["transactions"] == good_rows
    assert done["backfilled_rows"]["user_transactions"] == good_rows
    assert sorted(done["views"]) == ["merchant_risk", "user_transactions"]
    views = [line.split() for line in res.stderr.splitlines() if line.startswith("view ")]
    assert [(v[1], v[2]) for v in views] in ([("1/2", "merchant_risk"), ("2/2", "user_transactions")],
                                            [("1/2", "user_transactions"), ("2/2", "merchant_risk")]), res.stderr
    assert views[-1][-2:] == ["eta", "0s"]
    assert (repo / ".mlops/feast/online.db").is_file() and (repo / ".mlops/feast/registry.db").is_file()

    users = pd.read_parquet(repo / "data/features/user_transactions.parquet")
    last = users.sort_values("event_timestamp").iloc[-1]
    res = run(["features", "get", "--entity", f"user_id={last.user_id}", "--entity", "merchant_id=M00003",
               "--json"], cwd=repo)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["features"]
    assert got["unknown_user"] is False
    assert got["user_txn_count_24h"] == last.user_txn_count_24h
    assert got["user_amount_zscore"] == pytest.approx(last.user_amount_zscore)


def test_bad_input_exits_2_with_one_line(config_dir: Path) -> None:
    res = run(["data", "generate", "--drift", "seasonal", "--rows", "100", "--days", "1"], cwd=config_dir.parent)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: drift='seasonal' is unknown: expected one of ['none', 'covariate', 'prior', 'concept', 'category']"]
    res = run(["data", "validate"], cwd=config_dir.parent)
    assert res.returncode == 2
    assert "run `mlops data generate` first" in res.stderr
    res = run(["features", "get", "-e", "user_id=U1", "-e", "merchant_id=M1", "-e", "card=4111"], cwd=config_dir.parent)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: --entity 'card=4111': unknown key 'card'; "
                                  "expected one of ['user_id', 'merchant_id']")
