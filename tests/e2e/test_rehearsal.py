"""`mlops pipeline rehearse --fast --json` in a copy of the repo: every step against real servers, then none left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.timeout(2400)]

STEP_NAMES = ["platform", "ingest", "validate", "pin", "features", "tracking", "bootstrap", "train", "register",
              "gates", "staging", "canary-10", "canary-50", "production", "drift", "ingest-drifted", "monitor", "alert",
              "rollback", "labels", "retrain"]


def _processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name ``folder`` (servers of the run, or their children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(folder) in cmd and state != "Z":
            found.append(f"{entry.name}: {cmd[:200]}")
    return found


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory, copy_repo: Any) -> tuple[Path, dict]:
    repo = tmp_path_factory.mktemp("rehearsal") / "repo"
    copy_repo(repo, commit=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    res = subprocess.run([sys.executable, "-m", "mlops_cli", "pipeline", "rehearse", "--fast", "--json"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=2400, check=False)
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, f"stdout must be one JSON line, got {len(lines)}:\n{res.stdout[-2000:]}"
    doc = json.loads(lines[0])
    assert res.returncode == 0, json.dumps([s for s in doc["steps"] if not s["ok"]])[:3000] + res.stderr[-3000:]
    return repo, doc


def _detail(doc: dict, name: str) -> dict:
    step = next(s for s in doc["steps"] if s["name"] == name)
    assert step["ok"] is True, step
    return step["detail"]


def test_every_step_ran_and_passed(rehearsal: tuple[Path, dict]) -> None:
    _, doc = rehearsal
    assert {"steps", "alerts_received", "rollback_commit", "served_at_head", "seconds"} <= set(doc)
    assert [s["name"] for s in doc["steps"]] == STEP_NAMES
    assert all(s["ok"] and s["seconds"] > 0 for s in doc["steps"]), [s["name"] for s in doc["steps"] if not s["ok"]]
    assert doc["seconds"] >= sum(s["seconds"] for s in doc["steps"])


def test_platform_is_real_and_mlflow_refuses_anonymous_requests(rehearsal: tuple[Path, dict]) -> None:
    _, doc = rehearsal
    platform = _detail(doc, "platform")
    assert {"mlflow", "redis", "prometheus", "alertmanager", "drift-exporter"} <= set(platform["servers"])
    tracking = _detail(doc, "tracking")
    assert (tracking["anonymous_status"], tracking["authenticated_status"]) == (401, 200)
    register = _detail(doc, "register")
    assert (register["anonymous_status"], register["wrong_password_status"]) == (401, 401)


def test_each_workload_reads_and_writes_the_online_store_as_its_own_acl_user(rehearsal: tuple[Path, dict]) -> None:
    """Redis runs the platform manifest's ACL: no anonymous access, the reader cannot write, the other environment's
    reader cannot read; the loop writes as the writer, the transformer reads as the reader (its manifest's user)
    and answered every request from the online store, the predictor holds no Redis credential."""
    _, doc = rehearsal
    platform = _detail(doc, "platform")
    acl = platform["redis_acl"]
    envs, roles = ("staging", "production"), ("reader", "writer")
    assert set(acl["users"]) == {f"mlops-{e}.fraud-{r}" for e in envs for r in roles}
    assert acl["anonymous_refused"] and acl["reader_reads"] and acl["reader_write_refused"]
    assert acl["other_env_read_refused"]
    assert platform["redis_users"] == {"loop": "mlops-staging.fraud-writer",
                                       "transformer": "mlops-staging.fraud-reader", "predictor": None}
    # a refused read would be an outage, answered degraded (serving.tabular.redis_outage: degraded): none was
    traffic = _detail(doc, "canary-10")["traffic"]
    assert sum(t["instances"] for t in traffic.values()) > 0, traffic
    assert all(t["degraded"] == 0 for t in traffic.values()), traffic


def test_each_workload_talks_to_mlflow_as_its_own_role_user(rehearsal: tuple[Path, dict]) -> None:
    """The admin created an experiment, a registered model and a user per role in each environment; the probe
    held on the live server (no anonymous access, the reader moves no alias, the monitor writes no run and
    touches no other environment's model); every writing step ran as its role's user, never the admin."""
    _, doc = rehearsal
    tracking = _detail(doc, "tracking")
    envs, roles = ("staging", "production"), ("delivery", "monitor", "reader", "trainer")
    assert tracking["users"] == {f"mlops-{e}": [f"mlops-{e}.fraud-{r}" for r in roles] for e in envs}
    assert (tracking["experiment"], tracking["registered_model"]) == ("mlops-staging.fraud-detection",
                                                                      "mlops-staging.fraud")
    probe = dict(tracking["mlflow_probe"])
    assert probe.pop("users") == [f"mlops-staging.fraud-{r}" for r in roles]
    assert probe == dict.fromkeys(probe, True) and len(probe) == 12
    for step, role in {"train": "trainer", "register": "trainer", "gates": "trainer", "staging": "delivery",
                       "canary-10": "delivery", "canary-50": "delivery", "production": "delivery",
                       "monitor": "monitor"}.items():
        assert _detail(doc, step)["mlflow_user"] == f"mlops-staging.fraud-{role}", step


def test_features_were_materialized_on_the_spark_cluster_the_profile_names(rehearsal: tuple[Path, dict]) -> None:
    """The staging profile's batch_engine: spark ran on the rehearsal's standalone master (the run's loopback
    port standing in for spark://fraud-spark-master:7077), as an application that got executors."""
    _, doc = rehearsal
    assert {"spark-master", "spark-worker"} <= set(_detail(doc, "platform")["servers"])
    features = _detail(doc, "features")
    assert features["batch_engine"] == "spark" and features["spark_master"].startswith("spark://127.0.0.1:")
    apps = features["spark_applications"]
    assert [a["name"] for a in apps] == ["mlops-materialize-fraud_detection_staging"], apps
    assert apps[0]["state"] == "FINISHED" and apps[0]["cores"] == 2


def test_training_used_the_data_version_the_ingestion_pushed(rehearsal: tuple[Path, dict]) -> None:
    _, doc = rehearsal
    pushed = _detail(doc, "validate")
    assert pushed["remote_objects"] >= 1
    assert _detail(doc, "features")["data_version"] == pushed["data_version"]
    assert _detail(doc, "bootstrap")["version"] == "1"
    assert _detail(doc, "train")["version"] == "2"


def test_promotions_and_rollback_are_commits_in_the_remote(rehearsal: tuple[Path, dict]) -> None:
    _, doc = rehearsal
    remote = Path(_detail(doc, "platform")["gitops_remote"])
    commits = [_detail(doc, n)["commit"] for n in ("staging", "canary-10", "canary-50", "production", "rollback")]
    assert commits[-1] == doc["rollback_commit"]
    for sha in commits:
        assert subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=remote, check=False).returncode == 0
    # after the rollback only the merged retraining pull request and the retrained version's staging commit
    after = subprocess.run(["git", "log", "--format=%H", f"{doc['rollback_commit']}..HEAD"], cwd=remote,
                           capture_output=True, text=True, check=True).stdout.split()
    retrain = _detail(doc, "retrain")
    assert after == [retrain["staging_commit"], retrain["merged_sha"]]
    canary = _detail(doc, "canary-50")
    # decided from Prometheus (PromQL per version) and the shared log, looking every 1,000 requests until decided
    assert (canary["decision"], canary["source"]) == ("promote", "prometheus")
    assert [look["decision"] for look in canary["looks"]][-1] == "promote"
    assert all(look["decision"] == "hold" for look in canary["looks"][:-1])


def test_critical_drift_alerted_and_the_fallback_serves_at_head(rehearsal: tuple[Path, dict]) -> None:
    _, doc = rehearsal
    monitor = _detail(doc, "monitor")
    assert monitor["level"] == "CRITICAL"
    # the drift job itself delivered its alert (Alertmanager v2 answered 200) and carried out the rollback
    actions = {a["action"]: a for a in monitor["actions"]}
    assert actions["webhook"]["ok"] and actions["webhook"]["detail"] == "HTTP 200"
    assert actions["rollback"]["ok"] and doc["rollback_commit"][:12] in actions["rollback"]["detail"]
    # and replayed a sample of the served rows against the offline store (skew replay), every mismatch with a cause
    skew = monitor["skew"]
    assert 0 < skew["rows_compared"] <= skew["rows_sampled"] <= 200
    assert 0.0 <= skew["mismatch_rate"] <= 1.0
    assert doc["alerts_received"] >= 1
    assert any(a["alertname"] == "FraudDriftCritical" for a in _detail(doc, "alert")["alerts"])
    rollback = _detail(doc, "rollback")
    assert (rollback["champion_before"], rollback["fallback_before"]) == ("2", "1")
    assert doc["served_at_head"] == rollback["fallback_before"] == "1"


def test_the_loop_closes_labels_a_week_late_and_a_retraining_on_the_pin(rehearsal: tuple[Path, dict]) -> None:
    repo, doc = rehearsal
    pin, drifted, retrain = _detail(doc, "pin"), _detail(doc, "ingest-drifted"), _detail(doc, "retrain")
    assert pin["data_version"] == _detail(doc, "validate")["data_md5"] == _detail(doc, "features")["data_md5"]
    assert doc["retrain_pr"]["status"] == "opened" and doc["retrain_pr"]["reason"] == "drift"
    assert doc["retrain_pr"]["data_version"] == drifted["data_version"] == retrain["data_version"]
    # Prometheus scraped the trigger's counters from the drift job's textfile: the ledger's drift rows, counted here
    (ledger,) = repo.glob(".mlops/rehearsal/*/runner/.mlops/retrain/triggers.jsonl")  # the drift job's checkout
    drift_rows = [row for row in map(json.loads, ledger.read_text().splitlines()) if row["reason"] == "drift"]
    scraped = _detail(doc, "alert")["retrain_triggers"]
    assert [r["status"] for r in drift_rows] == ["opened"] and scraped["opened"] == 1, (drift_rows, scraped)
    assert sum(scraped.values()) == len(drift_rows)
    assert drifted["previous"] == pin["data_version"] and retrain["previous"] == pin["data_version"]
    assert doc["retrained_version"] == retrain["version"] and int(retrain["version"]) > 2
    assert all(retrain["gates"].values())
    labels = _detail(doc, "labels")
    assert labels["labels"]["quarantined_rows"] == 0 and labels["labels"]["accepted_rows"] > 0
    versions = {x["version"] for x in labels["versions"].values()}
    assert {"1", "2"} <= versions  # the champion (after the rollback) and the rolled-back version
    assert all(x["realized_f1"] is not None and x["estimated_f1"] is not None for x in labels["versions"].values())


def test_overlay_at_remote_head_names_the_fallback(rehearsal: tuple[Path, dict], tmp_path: Path) -> None:
    _, doc = rehearsal
    remote = Path(_detail(doc, "platform")["gitops_remote"])
    subprocess.run(["git", "clone", "-q", str(remote), str(tmp_path / "head")], check=True)
    kubectl = str(Path(sys.executable).with_name("kubectl"))
    rendered = subprocess.run([kubectl, "kustomize", "infra/overlays/production"], cwd=tmp_path / "head",
                              capture_output=True, text=True, check=True).stdout
    isvc = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "InferenceService")
    assert isvc["metadata"]["annotations"]["mlops.platform/stable-version"] == "1"
    # a version's storage URI ends in "/" (KServe lists a prefix: ".../v1" also matched v10/)
    assert isvc["spec"]["predictor"]["model"]["storageUri"].endswith("/models/fraud/v1/")
    assert "mlops.platform/canary-version" not in isvc["metadata"]["annotations"]


def test_no_server_process_is_left(rehearsal: tuple[Path, dict]) -> None:
    repo, doc = rehearsal
    assert doc["servers_left"] == []
    assert _processes_under(Path(doc["run_dir"])) == []
    assert _processes_under(repo) == []
