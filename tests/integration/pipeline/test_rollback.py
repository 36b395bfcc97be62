"""A CRITICAL rollback reaches what the cluster serves: one commit on the overlay, then alias and ledger.

Real parts: a bare git repository stands in for the GitOps remote Argo CD syncs from, MLflow's registry on
SQLite holds v2 (champion) and v1 (fallback), and `mlops monitor run` runs through the CLI. What the
"cluster" would serve is read from the remote's HEAD, never from the working copies the code used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from mlops_config import DeliveryConfig, TrackingConfig
from mlops_delivery import ModelManifest, serve_fallback
from mlops_monitoring import RollbackDecision
from mlops_pipeline import roll_back_to_fallback
from tests.support.barrier import release_when_ready

pytestmark = pytest.mark.integration

OVERLAY = "infra/overlays/production/model-fraud.yaml"
WORKER = Path(__file__).with_name("rollback_worker.py")
TRACKING = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts")
DECISION = RollbackDecision("fraud", "2", "1", "drift monitor CRITICAL: amount PSI 0.9", "CRITICAL")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def _served_at_head(remote: Path) -> dict:
    doc = yaml.safe_load(git(remote, "show", f"main:{OVERLAY}"))
    return {"stable": doc["metadata"]["annotations"]["mlops.platform/stable-version"],
            "uri": doc["spec"]["predictor"]["model"]["storageUri"]}


def _rollback_commits(remote: Path) -> list[str]:
    return git(remote, "log", "--format=%H", "--grep=^Mlops-Rollback:", "main").split()


@pytest.fixture
def remote(tmp_path: Path, repo_root: Path) -> Path:
    """A bare GitOps remote whose production overlay serves v2 with v1 as the previous version."""
    remote = tmp_path / "gitops.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    shutil.copytree(repo_root / "infra", seed / "infra")
    git(seed, "init", "-q", "-b", "main")
    manifest = ModelManifest(seed / OVERLAY, "production", "fraud")
    for v in (1, 2):
        manifest.set_stable(v, f"s3://mlops-artifacts/models/fraud/v{v}")
    (seed / OVERLAY).write_text(manifest.dump())
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "production serves v2")
    git(seed, "push", "-q", str(remote), "main")
    return remote


@pytest.fixture(scope="module")
def registry_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry (MLflow on SQLite) with v2 champion and v1 fallback, promoted through the lifecycle so the
    ledger explains them; built once, copied into each test's root."""
    from mlops_core import lifecycle, mlflow_client

    root = tmp_path_factory.mktemp("registry")
    client = mlflow_client(TRACKING, root)
    client.create_registered_model("fraud")
    for _ in range(2):
        run = client.create_run("0")
        mv = client.create_model_version("fraud", f"runs:/{run.info.run_id}/model", run.info.run_id)
        for to in ("candidate", "staging", "canary", "champion"):
            lifecycle.promote(TRACKING, root, "fraud", mv.version, to, reason="setup", actor="test", required_gates={})
    assert lifecycle.aliases(TRACKING, root, "fraud") == {"champion": "2", "fallback": "1"}
    return root


@pytest.fixture
def registry(registry_template: Path):
    """Copy the template registry into ``root`` (call it with the test's repository root)."""

    def copy(root: Path) -> Path:
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(registry_template / "mlflow.db", root / "mlflow.db")
        return root

    return copy


def _ledger_rollbacks(root: Path) -> list:
    from mlops_core import lifecycle

    return [e for e in lifecycle.history(TRACKING, root, "fraud") if e.action == "rollback"]


def _three_agree(root: Path, remote: Path) -> None:
    from mlops_core import lifecycle

    head = git(remote, "rev-parse", "main")
    assert _served_at_head(remote) == {"stable": "1", "uri": "s3://mlops-artifacts/models/fraud/v1/"}
    assert lifecycle.aliases(TRACKING, root, "fraud") == {"champion": "1"}
    [entry] = _ledger_rollbacks(root)
    assert (entry.version, entry.extra["replaced"], entry.extra["gitops_commit"]) == ("1", "2", head)
    assert entry.extra["storage_uri"] == "s3://mlops-artifacts/models/fraud/v1/"
    assert _rollback_commits(remote) == [head]


def _rows(tmp: Path, seed: int, drift: str, n: int) -> pd.DataFrame:
    from mlops_features.sample import generate_transactions

    paths = generate_transactions(tmp / f"{drift}-{seed}", rows=n, days=1, seed=seed, drift=drift)
    df = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    return df.assign(score=1 / (1 + np.exp(-(0.8 * (np.log(df["amount"].to_numpy()) - 4.0) - 3.0))))


def test_monitor_run_critical_commits_the_fallback_to_the_overlay_then_moves_alias_and_ledger(
        tmp_path: Path, config_dir: Path, remote: Path, registry, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlops_cli.app import app

    root = registry(config_dir.parent)
    monkeypatch.chdir(root)
    _rows(tmp_path, 1, "none", 20_000).to_parquet(tmp_path / "ref.parquet")
    _rows(tmp_path, 5, "covariate", 3000).to_parquet(tmp_path / "cur.parquet")
    before = git(remote, "rev-parse", "main")
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    result = CliRunner().invoke(app, [
        "monitor", "run", "--current", str(tmp_path / "cur.parquet"), "--reference", str(tmp_path / "ref.parquet"),
        "--no-html", "--json", "--set", f"tracking.uri={TRACKING.uri}", "--set",
        f"tracking.artifact_location={TRACKING.artifact_location}", "--set", f"delivery.gitops_repo={remote}"], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["level"] == "CRITICAL"
    assert doc["decision"]["from_version"] == "2" and doc["decision"]["to_version"] == "1"
    rollback = next(a for a in doc["actions"] if a["action"] == "rollback")
    assert rollback["ok"], rollback
    assert git(remote, "rev-parse", "main") != before
    _three_agree(root, remote)


def test_a_rerun_completes_what_a_crash_left_and_never_commits_twice(tmp_path: Path, remote: Path, registry) -> None:
    root = registry(tmp_path / "repo")
    delivery = DeliveryConfig(gitops_repo=str(remote), git_branch="main")
    # the process died after the push, before the alias moved
    first = serve_fallback(delivery, "fraud", from_version=2, to_version=1, reason="crash test")
    assert first.created and _served_at_head(remote)["stable"] == "1"
    assert [e.version for e in _ledger_rollbacks(root)] == []
    done = roll_back_to_fallback(DECISION, delivery, TRACKING, root)
    assert done.commit == first.commit and not done.commit_created
    _three_agree(root, remote)
    again = roll_back_to_fallback(DECISION, delivery, TRACKING, root)  # a plain re-run: nothing new anywhere
    assert (again.commit, again.ledger_seq) == (done.commit, done.ledger_seq)
    _three_agree(root, remote)


def test_an_overlay_moved_by_someone_else_is_not_overwritten(tmp_path: Path, remote: Path, registry) -> None:
    from mlops_delivery import PromotionRefusedError

    root = registry(tmp_path / "repo")
    work = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    manifest = ModelManifest(work / OVERLAY, "production", "fraud")
    manifest.set_stable(3, "s3://mlops-artifacts/models/fraud/v3")
    (work / OVERLAY).write_text(manifest.dump())
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "v3 promoted")
    git(work, "push", "-q", "origin", "main")
    with pytest.raises(PromotionRefusedError, match="serves fraud v3, neither the drifted v2 nor the fallback v1"):
        roll_back_to_fallback(DECISION, DeliveryConfig(gitops_repo=str(remote)), TRACKING, root)
    assert _served_at_head(remote)["stable"] == "3"
    assert _ledger_rollbacks(root) == []


def test_pull_request_mode_puts_the_fallback_on_a_branch_and_leaves_main_alone(
        tmp_path: Path, remote: Path, github_pulls: list) -> None:
    """``delivery.commit_mode: pull_request`` holds for the drift rollback too (it went straight to main before
    the one overlay writer: this test fails on that code, main served v1); a re-run finds the branch, pushes
    nothing and opens no second pull request."""
    delivery = DeliveryConfig(gitops_repo=str(remote), commit_mode="pull_request")
    main = git(remote, "rev-parse", "main")
    done = serve_fallback(delivery, "fraud", from_version=2, to_version=1, reason="drift monitor CRITICAL")
    assert git(remote, "rev-parse", "main") == main and _served_at_head(remote)["stable"] == "2"
    assert done.branch == "gitops/fraud-production-v1" and done.created
    assert done.pull_request == "https://github.example/o/r/pull/1"
    assert git(remote, "rev-parse", f"refs/heads/{done.branch}") == done.commit
    assert git(remote, "rev-parse", f"{done.commit}~1") == main
    on_branch = yaml.safe_load(git(remote, "show", f"{done.commit}:{OVERLAY}"))
    assert on_branch["metadata"]["annotations"]["mlops.platform/stable-version"] == "1"
    (call,) = github_pulls
    assert call["body"]["head"] == done.branch and call["body"]["base"] == "main"
    assert call["body"]["title"] == "gitops: rollback fraud in production: v2 -> v1"
    again = serve_fallback(delivery, "fraud", from_version=2, to_version=1, reason="drift monitor CRITICAL")
    assert (again.commit, again.branch, again.created) == (done.commit, done.branch, False)
    assert len(github_pulls) == 1 and git(remote, "rev-parse", "main") == main


@pytest.mark.slow
def test_two_monitors_firing_at_once_make_one_commit_and_one_ledger_entry(tmp_path: Path, remote: Path,
                                                                          registry) -> None:
    root = registry(tmp_path / "repo")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    outs = [tmp_path / f"worker-{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(root), str(remote), str(barrier), str(out)], cwd=root)
             for out in outs]
    release_when_ready(barrier, procs)  # both import (slow on a loaded machine), then start together
    for p in procs:
        assert p.wait(timeout=180) == 0
    results = [json.loads(o.read_text()) for o in outs]
    assert all(r["ok"] for r in results), results
    assert results[0]["commit"] == results[1]["commit"]
    assert results[0]["ledger_seq"] == results[1]["ledger_seq"]
    assert sorted(r["commit_created"] for r in results) == [False, True]  # one pushed, the other found it
    _three_agree(root, remote)
