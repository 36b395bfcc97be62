"""The retraining triggers against a real bare git remote (the rehearsal's backend): drift, performance, data.

Each test has a bare remote whose ``main`` pins data version ``V0`` and a DVC folder remote where ingestion's own
``publish_pointer`` published ``V1``; the config is the repo's ``local`` profile pointed at both with ``--set``
overrides. The drifted window is the sample generator's ``covariate`` drift scored by a fixed stand-in model,
compared with a profile of undrifted rows (as the monitor's own tests build it). Every assertion on the pull
request reads the remote back with plain git, never the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_config import LoadedConfig, load_config
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_monitoring import MonitorRun, RetrainFailedError, run_monitor
from mlops_pipeline import retrain_requester

pytestmark = pytest.mark.integration

V0, V1 = "0" * 31 + "a.dir", "1" * 31 + "b.dir"
PIN = "configs/models/fraud.data_version"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NUMERIC = ["amount"]
CATEGORICAL = ["currency", "category", "country", "device", "channel"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def _score(df: pd.DataFrame) -> np.ndarray:
    """A fixed stand-in model: riskier with larger amounts and at night."""
    z = 0.8 * (np.log(df["amount"].to_numpy()) - 4.0) + 1.0 * (df["event_timestamp"].dt.hour < 5).to_numpy()
    return np.asarray(1 / (1 + np.exp(-(z - 3.0))))


def _rows(tmp: Path, seed: int, drift: str, n: int) -> pd.DataFrame:
    from mlops_features import generate_transactions

    paths = generate_transactions(tmp / f"{drift}-{seed}", rows=n, days=1, seed=seed, drift=drift)
    df = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    return df.assign(score=_score(df))


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference profile (undrifted rows) and a covariate-drifted window, written once."""
    from mlops_core.profile import build_reference_profile

    tmp = tmp_path_factory.mktemp("windows")
    train = _rows(tmp, 1, "none", 8_000)
    (tmp / "profile.json").write_text(json.dumps(
        build_reference_profile(train, NUMERIC, CATEGORICAL, scores="score", labels="is_fraud")))
    _rows(tmp, 5, "covariate", 2_000).to_parquet(tmp / "drifted.parquet")
    return {"profile": tmp / "profile.json", "drifted": tmp / "drifted.parquet"}


@pytest.fixture
def world(tmp_path: Path, config_dir: Path) -> dict[str, Any]:
    """A bare remote whose main pins V0, a DVC folder remote where ingestion published V1, the repo's configs."""
    from mlops_config import DataConfig
    from mlops_features.landing import publish_pointer

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    (work / "configs" / "models").mkdir(parents=True)
    (work / PIN).write_text(V0 + "\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    dvc = tmp_path / "dvc"
    pointer = tmp_path / "accepted.dvc"
    pointer.write_text(f"outs:\n- md5: {V1}\n  nfiles: 3\n  path: accepted\n")
    publish_pointer(DataConfig(dvc_remote=str(dvc)), tmp_path, pointer)
    return {"remote": remote, "dvc": dvc, "config_dir": config_dir, "root": config_dir.parent,
            "main0": git(remote, "rev-parse", "main")}


def loaded(world: dict[str, Any], *sets: str) -> LoadedConfig:
    """The local profile pointed at the world's remotes (the rate limit at its 24 h default), plus ``sets``."""
    return load_config(profile="local", config_dir=world["config_dir"], environ={}, check_secrets=False, overrides=[
        f"delivery.retrain.repo={world['remote']}", f"data.dvc_remote={world['dvc']}", "monitoring.webhook_url=null",
        "monitoring.auto_rollback=false", *sets])


def monitor(world: dict[str, Any], windows: dict[str, Path], cfg: LoadedConfig, at: datetime, **kw: Any) -> Any:
    c = cfg.config
    return run_monitor(MonitorRun(c.monitoring, c.serving, c.tracking, c.project, cfg.root, "fraud",
                                  current=windows["drifted"], reference=windows["profile"], html=False, now=at,
                                  retrain=retrain_requester(cfg), **kw, contract=FRAUD_CONTRACT))


def retrain_action(result: Any) -> Any:
    found = [a for a in result.actions if a.action == "retrain"]
    assert len(found) == 1, [a.action for a in result.actions]
    return found[0]


def record(remote: Path) -> dict[str, Any]:
    return json.loads(git(remote, "show", "refs/retrain-prs/fraud:record.json"))


def refs(remote: Path) -> str:
    return git(remote, "for-each-ref", "--format=%(refname) %(objectname)")


def counters(cfg: LoadedConfig, reason: str = "drift") -> dict[str, float]:
    """``outcome -> count`` of one reason in the triggers' Prometheus file, read with prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    from mlops_pipeline.triggers import retrain_metrics_path

    text = retrain_metrics_path(cfg).read_text()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    mine = {"model": "fraud", "reason": reason}
    return {s.labels["outcome"]: s.value for s in samples
            if s.name == "mlops_retrain_triggers_total" and all(s.labels[k] == v for k, v in mine.items())}


def ledger(world: dict[str, Any]) -> list[dict[str, Any]]:
    path = world["root"] / ".mlops" / "retrain" / "triggers.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- drift: `mlops monitor run` ----------------------------------------------------------------------------------


def test_critical_drift_opens_the_pr_with_its_evidence_then_updates_then_is_rate_limited(
        world: dict[str, Any], windows: dict[str, Path]) -> None:
    remote, cfg = world["remote"], loaded(world)
    first = monitor(world, windows, cfg, T0)
    assert (first.level, first.report.level) == ("CRITICAL", "CRITICAL"), first.reasons
    action = retrain_action(first)
    assert action.ok and (action.extra["status"], action.extra["reason"]) == ("opened", "drift"), action.detail
    assert [a.action for a in first.actions][-1] == "retrain"  # after the alert and the rollback decision
    head = git(remote, "rev-parse", "refs/heads/retrain/fraud")
    assert action.extra["head_sha"] == head and git(remote, "show", f"{head}:{PIN}") == V1  # the newest published
    assert git(remote, "rev-parse", "main") == world["main0"]  # never merged: auto_merge is off
    rec = record(remote)
    assert (rec["state"], rec["reason"], rec["data_version"], rec["previous"]) == ("open", "drift", V1, V0)
    evidence = rec["evidence"]
    psi = {name: col.psi for name, col in first.report.columns.items()}
    assert evidence["level"] == evidence["drift_level"] == "CRITICAL"
    assert evidence["max_psi"] == pytest.approx(max(psi.values()))
    assert evidence["max_psi"] > cfg.config.monitoring.psi_critical
    assert "amount" in evidence["drifted"]
    assert evidence["columns"]["amount"]["psi"] == pytest.approx(psi["amount"])
    assert evidence["report"] == first.outputs["json"]
    assert f"| max_psi | {evidence['max_psi']} |" in rec["body"]
    # the run's own report carries the outcome, the JSON document and the file alike
    written = json.loads(Path(first.outputs["json"]).read_text())
    assert next(a for a in written["actions"] if a["action"] == "retrain")["extra"]["status"] == "opened"
    first.check()  # nothing failed

    second = monitor(world, windows, cfg, T0 + timedelta(hours=25))  # past the 24 h limit: the same PR, updated
    assert retrain_action(second).extra["status"] == "updated"
    head2 = git(remote, "rev-parse", "refs/heads/retrain/fraud")
    assert head2 != head and git(remote, "rev-parse", f"{head2}^") == world["main0"]
    rec = record(remote)
    assert (rec["updates"], rec["opened_at"], rec["requested_at"]) == (1, "2026-03-02T09:00:00Z",
                                                                       "2026-03-03T10:00:00Z")
    branches = git(remote, "for-each-ref", "--format=%(refname)", "refs/heads/").splitlines()
    assert branches == ["refs/heads/main", "refs/heads/retrain/fraud"]  # one pull request per model

    before = refs(remote)
    third = monitor(world, windows, cfg, T0 + timedelta(hours=26))  # an hour later: inside the rate limit
    limited = retrain_action(third)
    assert limited.ok and limited.extra["status"] == "rate-limited" and limited.extra["pushed"] is False
    assert "2026-03-04T10:00:00Z" in limited.detail  # the next trigger allowed: the last push + 24 h
    assert refs(remote) == before
    third.check()  # rate-limited is policy, not a failure
    assert [x["status"] for x in ledger(world)] == ["opened", "updated", "rate-limited"]
    assert counters(cfg) == {"opened": 1, "updated": 1, "rate-limited": 1, "up_to_date": 0, "disabled": 0,
                             "failed": 0}


def test_a_disabled_trigger_pushes_nothing_and_says_which_switch(world: dict[str, Any],
                                                                 windows: dict[str, Path]) -> None:
    remote = world["remote"]
    for switch in ("delivery.retrain.on_drift=false", "delivery.retrain.enabled=false"):
        result = monitor(world, windows, loaded(world, switch), T0)
        action = retrain_action(result)
        assert result.level == "CRITICAL" and action.ok and action.extra["status"] == "disabled"
        assert switch.removesuffix("=false") + " is false" in action.detail
        result.check()
    # a profile that cannot hold the pull request: no repository (local, staging), no published data versions
    for unset, why in (("delivery.retrain.repo", "no repository"), ("data.dvc_remote", "no published data version")):
        action = retrain_action(monitor(world, windows, loaded(world, f"{unset}=null"), T0))
        assert action.extra["status"] == "disabled" and why in action.detail
    assert git(remote, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert [x["status"] for x in ledger(world)] == ["disabled"] * 4


def test_dry_run_asks_nothing(world: dict[str, Any], windows: dict[str, Path]) -> None:
    result = monitor(world, windows, loaded(world), T0, dry_run=True)
    action = retrain_action(result)
    assert action.extra["status"] == "dry-run" and "would request a retraining, reason drift" in action.detail
    assert git(world["remote"], "for-each-ref", "--format=%(refname)") == "refs/heads/main"


def test_a_failed_request_leaves_the_rollback_done_and_fails_the_run(world: dict[str, Any], windows: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """The registry is real (MLflow on SQLite, champion v2, fallback v1); the repository does not exist."""
    from mlops_core import lifecycle, mlflow_client
    from mlops_core.tracking import ensure_experiment
    from mlops_pipeline import fallback_executor

    cfg = loaded(world, "monitoring.auto_rollback=true", f"delivery.retrain.repo={tmp_path / 'missing.git'}")
    tracking, root = cfg.config.tracking, cfg.root
    client = mlflow_client(tracking, root)
    experiment = ensure_experiment(tracking, root)
    client.create_registered_model("fraud")
    for _ in range(2):
        run = client.create_run(experiment)
        mv = client.create_model_version("fraud", f"{run.info.artifact_uri}/model", run.info.run_id)
        for to in ("candidate", "staging", "canary", "champion"):
            lifecycle.promote(tracking, root, "fraud", mv.version, to, reason="setup", actor="test", required_gates={})
    result = monitor(world, windows, cfg, T0, execute=fallback_executor(cfg.config.delivery, tracking, root))
    rollback, action = next(a for a in result.actions if a.action == "rollback"), retrain_action(result)
    assert rollback.ok, rollback.detail
    assert lifecycle.aliases(tracking, root, "fraud")["champion"] == "1"  # the rollback stands
    assert not action.ok and action.extra["status"] == "failed" and "cannot clone" in action.detail
    written = json.loads(Path(result.outputs["json"]).read_text())
    assert written["level"] == "CRITICAL"
    with pytest.raises(RetrainFailedError, match=r"verdict and rollback done\): the retraining pull request was not "
                                                 r"opened: GitError: cannot clone"):
        result.check()
    assert ledger(world)[-1]["status"] == "failed"
    assert counters(cfg)["failed"] == 1 and counters(cfg)["opened"] == 0


def test_cli_monitor_run_reports_the_outcome_and_exits_non_zero_on_failure(world: dict[str, Any],
                                                                          windows: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mlops_cli.app import app

    env = {**os.environ, "MLOPS_CONFIG_DIR": str(world["config_dir"]), "MLOPS_PROFILE": "local"}
    args = ["monitor", "run", "--current", str(windows["drifted"]), "--reference", str(windows["profile"]),
            "--no-html", "--set", f"data.dvc_remote={world['dvc']}", "--set", "monitoring.auto_rollback=false",
            "--set", "monitoring.webhook_url=null"]
    ok = CliRunner().invoke(app, [*args, "--json", "--set", f"delivery.retrain.repo={world['remote']}"], env=env)
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.stdout)
    assert doc["level"] == "CRITICAL"
    assert [a["extra"]["status"] for a in doc["actions"] if a["action"] == "retrain"] == ["opened"]
    assert git(world["remote"], "show", f"refs/heads/retrain/fraud:{PIN}") == V1
    text = CliRunner().invoke(app, [*args, "--set", f"delivery.retrain.repo={world['remote']}"], env=env)
    assert text.exit_code == 0 and "retrain: ok — rate-limited: retrain/fraud" in text.stdout
    bad = CliRunner().invoke(app, [*args, "--json", "--set", f"delivery.retrain.repo={tmp_path / 'nope.git'}"],
                             env=env)
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["level"] == "CRITICAL"  # the verdict is printed in full first
    assert "the retraining pull request was not opened" in bad.stderr


def test_cli_retrain_request_by_hand_is_counted_in_the_triggers_metrics(world: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    """`mlops retrain request` appends to the same ledger as the monitor's triggers, so its outcome is in the
    Prometheus counters the drift job's textfile exposes (it used to reach them only at the next monitor run)."""
    from typer.testing import CliRunner

    from mlops_cli.app import app

    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps({"summary": "asked by hand after a data fix", "figures": {}, "links": {}}))
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(world["config_dir"]), "MLOPS_PROFILE": "local"}
    args = ["retrain", "request", "--model", "fraud", "--reason", "data", "--evidence", str(evidence), "--json",
            "--set", f"data.dvc_remote={world['dvc']}", "--set", f"delivery.retrain.repo={world['remote']}"]
    first = CliRunner().invoke(app, args, env=env)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["status"] == "opened"
    again = CliRunner().invoke(app, args, env=env)
    assert again.exit_code == 0, again.output
    cfg = loaded(world)
    statuses = [row["status"] for row in ledger(world) if row["reason"] == "data"]
    assert statuses == ["opened", json.loads(again.stdout)["status"]]
    got = counters(cfg, "data")
    assert got["opened"] == 1 and sum(got.values()) == 2, got  # what the ledger holds, counted by hand above


# --- performance: `mlops monitor performance` ----------------------------------------------------------------------

DAY1 = datetime(2026, 11, 1, tzinfo=UTC)


def _served(uri: str, days: dict[str, int], *, labelled: bool, flipped: str | None = None, seed: int = 3
            ) -> pd.DataFrame:
    """Predictions of each version on its day (``{version: day offset}``), calibrated scores; with ``labelled``
    every one gets a label drawn from its score (from 1 - score for ``flipped``: a concept shift), arriving two
    days later, through the labels gate."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlops_features import label_schema
    from mlops_monitoring import ingest_label_batches
    from mlops_serving import write_prediction_log

    rng = np.random.default_rng(seed)
    frames = []
    for version, day in days.items():
        n = 600
        ts = [DAY1 + timedelta(days=day, seconds=120 * i) for i in range(n)]
        frames.append(pd.DataFrame({"request_id": [f"r{version}-{i}" for i in range(n)], "ts": ts,
                                    "model_name": "fraud", "model_version": version,
                                    "transaction_id": [f"t{version}-{i}" for i in range(n)],
                                    "score": rng.beta(0.8, 2.0, n)}))
    log = pd.concat(frames, ignore_index=True)
    write_prediction_log(uri, "fraud", log)
    p = np.where(log["model_version"] == flipped, 1 - log["score"], log["score"])
    log["label"] = (rng.random(len(log)) < p).astype(int)
    if labelled:
        rid = "transaction_id"  # fraud's contract record_id
        log["label_time"] = log["ts"] + timedelta(days=2)
        batch = Path(uri).parent / "labels.parquet"
        pq.write_table(pa.Table.from_pandas(log[[rid, "label", "label_time"]], schema=label_schema(rid),
                                            preserve_index=False), batch)
        summary = ingest_label_batches([batch], uri, "fraud", record_id=rid, now=DAY1 + timedelta(days=30))
        assert summary.quarantined_rows == 0
    return log


def test_a_realized_drop_of_the_served_version_opens_the_pr(world: dict[str, Any], tmp_path: Path) -> None:
    from sklearn.metrics import f1_score

    from mlops_pipeline import run_performance

    uri = str(tmp_path / "log" / "predictions")
    log = _served(uri, {"1": 0, "2": 1}, labelled=True)
    served = log[log["model_version"] == "2"]
    f1 = f1_score(served["label"], served["score"] >= 0.5)
    cfg = loaded(world, f"serving.prediction_log_uri={uri}")
    # version 2 (served in the latest window) at 2/3 of the reference: a 33 % drop, beyond the 10 % policy
    run = run_performance(cfg, reference_f1=f1 * 1.5, now=T0)
    assert run.retrain is not None and (run.retrain.status, run.retrain.reason) == ("opened", "performance")
    rec = record(world["remote"])
    ev = rec["evidence"]
    assert (rec["reason"], rec["data_version"], ev["signal"], ev["version"]) == ("performance", V1, "realized", "2")
    assert ev["realized_f1"] == pytest.approx(f1)
    assert ev["realized_drop"] == pytest.approx(1 / 3)
    assert ev["reference_f1"] == pytest.approx(f1 * 1.5) and ev["labelled"] == 600
    doc = run.to_dict()
    assert doc["retrain"]["status"] == "opened" and "evidence" not in doc["retrain"]
    assert Path(doc["metrics"]).is_file()
    run.check()


def test_only_the_served_versions_drop_counts(world: dict[str, Any], tmp_path: Path) -> None:
    from sklearn.metrics import f1_score

    from mlops_pipeline import run_performance

    uri = str(tmp_path / "log" / "predictions")
    log = _served(uri, {"1": 0, "2": 1}, labelled=True, flipped="1")  # version 1 met a concept shift
    old, new = (log[log["model_version"] == v] for v in ("1", "2"))
    f1_old, f1_new = f1_score(old["label"], old["score"] >= 0.5), f1_score(new["label"], new["score"] >= 0.5)
    # a reference that version 1 (replaced) misses by > 10 % and version 2 (served now) does not
    reference = f1_new / 0.95
    assert 1 - f1_old / reference > 0.1 >= 1 - f1_new / reference
    run = run_performance(loaded(world, f"serving.prediction_log_uri={uri}"), reference_f1=reference, now=T0)
    assert run.report.verdicts["1"]["verdict"] == "drop" and run.report.verdicts["2"]["verdict"] == "ok"
    assert run.retrain is None and run.to_dict()["retrain"] is None
    assert git(world["remote"], "for-each-ref", "--format=%(refname)") == "refs/heads/main"


def test_an_estimated_drop_asks_only_when_configured(world: dict[str, Any], tmp_path: Path) -> None:
    from mlops_pipeline import run_performance

    uri = str(tmp_path / "log" / "predictions")
    _served(uri, {"2": 0}, labelled=False)  # no label has arrived: realized is inconclusive, the estimate is not
    off = run_performance(loaded(world, f"serving.prediction_log_uri={uri}"), reference_f1=0.99, now=T0)
    assert off.report.verdicts["2"]["verdict"] == "inconclusive"
    assert off.retrain is not None and off.retrain.status == "disabled"
    assert "delivery.retrain.on_estimated_performance is false" in off.retrain.detail
    on = run_performance(loaded(world, f"serving.prediction_log_uri={uri}",
                                "delivery.retrain.on_estimated_performance=true"), reference_f1=0.99, now=T0)
    assert on.retrain is not None and on.retrain.status == "opened"
    ev = record(world["remote"])["evidence"]
    est = on.report.windows[-1].estimated["f1"]
    assert (ev["signal"], ev["realized_drop"]) == ("estimated", None)
    assert ev["estimated_drop"] == pytest.approx(1 - est / 0.99) and ev["estimated_drop"] > 0.1


def test_cli_monitor_performance_prints_the_outcome(world: dict[str, Any], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mlops_cli.app import app

    uri = str(tmp_path / "log" / "predictions")
    _served(uri, {"2": 0}, labelled=True)
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(world["config_dir"]), "MLOPS_PROFILE": "local"}
    sets = ["--set", f"serving.prediction_log_uri={uri}", "--set", f"data.dvc_remote={world['dvc']}"]
    ok = CliRunner().invoke(app, ["monitor", "performance", "--reference-f1", "0.99", "--json", *sets, "--set",
                                  f"delivery.retrain.repo={world['remote']}"], env=env)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["retrain"]["status"] == "opened"
    bad = CliRunner().invoke(app, ["monitor", "performance", "--reference-f1", "0.99", *sets, "--set",
                                   f"delivery.retrain.repo={tmp_path / 'nope.git'}"], env=env)
    assert bad.exit_code == 1
    assert "retrain fraud (performance): failed" in bad.stdout and "version 2: drop" in bad.stdout
    assert "performance dropped beyond the policy; the retraining pull request for 'fraud' was not opened" in bad.stderr


# --- data, where git is: the drift job's data check ----------------------------------------------------------------


def test_the_drift_jobs_data_check_pins_the_newest_version_once(world: dict[str, Any]) -> None:
    from mlops_pipeline import run_data_trigger

    remote = world["remote"]
    assert run_data_trigger(loaded(world), now=T0) is None  # on_data off: nothing asked, nothing recorded
    cfg = loaded(world, "delivery.retrain.on_data=true", "delivery.retrain.min_interval_hours=0")
    first = run_data_trigger(cfg, now=T0)
    assert first is not None and (first.status, first.reason, first.data_version) == ("opened", "data", V1)
    head = git(remote, "rev-parse", "refs/heads/retrain/fraud")
    assert git(remote, "show", f"{head}:{PIN}") == V1 and record(remote)["previous"] == V0
    again = run_data_trigger(cfg, now=T0 + timedelta(hours=1))  # the next hourly run: the branch already pins V1
    assert again is not None and again.status == "up_to_date" and "already pins" in again.detail
    assert git(remote, "rev-parse", "refs/heads/retrain/fraud") == head and record(remote)["updates"] == 0
    assert [x["status"] for x in ledger(world)] == ["opened", "up_to_date"]
    assert counters(cfg, "data") == {"opened": 1, "updated": 0, "rate-limited": 0, "up_to_date": 1, "disabled": 0,
                                     "failed": 0}


# --- data: `mlops data ingest` -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a dozen real dvc processes; far longer when the cores are shared
def test_a_new_accepted_version_pins_itself_when_on_data(world: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    from mlops_features import generate_transactions
    from mlops_pipeline import run_ingest

    landing, dvc = tmp_path / "landing", tmp_path / "dvc-real"
    landing.mkdir()
    days = generate_transactions(tmp_path / "gen", rows=600, days=2, seed=7)
    shutil.copy(days[0], landing / days[0].name)
    sets = (f"data.landing_uri={landing.as_uri()}", f"data.dvc_remote={dvc}")
    first = run_ingest(loaded(world, *sets, "delivery.retrain.on_data=true"), now=T0)
    assert first.report.new_version and first.report.previous_md5 is None
    md5 = first.report.data_md5
    assert first.retrain is not None and (first.retrain.status, first.retrain.data_version) == ("opened", md5)
    remote = world["remote"]
    assert git(remote, "show", f"refs/heads/retrain/fraud:{PIN}") == md5  # the version ingestion just published
    assert (dvc / "pointers" / f"{str(md5).removesuffix('.dir')}.dvc").is_file()
    rec = record(remote)
    assert (rec["reason"], rec["data_version"], rec["previous"]) == ("data", md5, V0)
    assert (rec["evidence"]["data_md5"], rec["evidence"]["batches"]) == (md5, [days[0].name])
    assert rec["evidence"]["accepted_rows"] == first.report.validation.accepted_rows  # type: ignore[union-attr]

    again = run_ingest(loaded(world, *sets, "delivery.retrain.on_data=true"), now=T0 + timedelta(days=2))
    assert (again.report.data_md5, again.report.new_version, again.retrain) == (md5, False, None)  # nothing new

    shutil.copy(days[1], landing / days[1].name)
    before = refs(remote)
    default = run_ingest(loaded(world, *sets), now=T0 + timedelta(days=3))  # on_data is off by default
    assert default.report.new_version and default.report.previous_md5 == md5 != default.report.data_md5
    assert default.retrain is not None and default.retrain.status == "disabled"
    assert default.to_dict()["retrain"]["detail"] == "data trigger off: delivery.retrain.on_data is false"
    assert refs(remote) == before
