"""The rehearsal's offline parts: the config it implies, the rules Prometheus gets, the overlay read at HEAD."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from mlops_pipeline.rehearsal.context import config_env, load_rehearsal_config
from mlops_pipeline.rehearsal.gitops import init_gitops, served_at_head
from mlops_pipeline.rehearsal.topology import Platform, launch_mlflow, prometheus_rules
from tests.support import sample_as_of

REPO = Path(__file__).resolve().parents[3]


def _platform(tmp_path: Path) -> Platform:
    return Platform(tmp_path, postgres_url="postgresql://postgres@127.0.0.1:5432/postgres",
                    mlflow_url="http://127.0.0.1:5001", redis_url="redis://127.0.0.1:6400/0",
                    feast_registry_url="postgresql+psycopg2://postgres@127.0.0.1:5432/r_feast",
                    alertmanager_url="http://127.0.0.1:9093", prometheus_url="http://127.0.0.1:9090",
                    spark_master_url="spark://127.0.0.1:7177",
                    secrets={"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p",
                             "REDIS_PASSWORD": "r", "REDIS_USERNAME": "default", "FEAST_REGISTRY_PASSWORD": "f"})


def test_the_staging_profile_pointed_at_the_run_loads_with_every_secret_it_names(tmp_path: Path) -> None:
    env = config_env(_platform(tmp_path), tmp_path / "gitops.git", fast=True)
    cfg = load_rehearsal_config(REPO, env).config
    assert cfg.project.profile == "staging"
    # the staging shape stays: SQL registry, Redis online store, basic-auth credentials by name, Alertmanager
    assert (cfg.features.registry_type, cfg.features.online_store) == ("sql", "redis")
    assert (cfg.tracking.username_env, cfg.tracking.password_env) == ("MLFLOW_TRACKING_USERNAME",
                                                                      "MLFLOW_TRACKING_PASSWORD")
    assert cfg.tracking.uri == "http://127.0.0.1:5001"
    assert cfg.features.online_ttl_as_of == sample_as_of()  # the generated sample's dates, as the local profile pins
    # the profile's Spark engine, on this run's master, executors sized to its one 2-core worker
    assert (cfg.features.batch_engine, cfg.features.spark_master) == ("spark", "spark://127.0.0.1:7177")
    assert cfg.features.spark_conf["spark.executor.cores"] == "2"
    assert cfg.monitoring.webhook_url == "http://127.0.0.1:9093/api/v2/alerts"
    # the canary analysis asks this run's Prometheus; the drift job's rollback commits to this run's GitOps remote
    assert cfg.delivery.prometheus_url == "http://127.0.0.1:9090"
    assert cfg.delivery.gitops_repo == str(tmp_path / "gitops.git")
    assert cfg.training.checkpoint.dir == str(tmp_path / "checkpoints")  # never the machine's /mnt/checkpoints
    assert (cfg.training.backend, cfg.training.nproc) == ("auto", 2)
    assert cfg.delivery.storage_uri_template.format(model="fraud", version=3) == \
        f"file://{tmp_path}/bucket/models/fraud/v3/"
    # the model-signing key pair the staging profile names by env var: both mounted, the private one owner-only
    from mlops_model import model_signer

    keys = model_signer(cfg.provenance, REPO, env).keys
    assert keys.private_key is not None and keys.public_key is not None
    assert keys.private_key.parent == tmp_path / "signing" and keys.public_key.is_file()
    assert keys.private_key.stat().st_mode & 0o077 == 0


def test_a_secret_the_profile_names_but_the_run_lacks_fails_the_load(tmp_path: Path) -> None:
    env = config_env(_platform(tmp_path), tmp_path / "gitops.git", fast=False)
    del env["REDIS_PASSWORD"]
    with pytest.raises(Exception, match="REDIS_PASSWORD"):
        load_rehearsal_config(REPO, env)


def test_prometheus_gets_the_repo_rules_unchanged() -> None:
    rules = prometheus_rules(REPO)
    source = yaml.safe_load((REPO / "infra/base/monitoring/prometheus-rules.yaml").read_text())
    assert rules == {"groups": source["spec"]["groups"]}
    names = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert "FraudDriftCritical" in names


def test_what_serves_is_read_from_the_remote_head_not_the_clone(tmp_path: Path) -> None:
    repo = init_gitops(REPO, tmp_path)
    template = "file:///bucket/models/{model}/v{version}/"
    manifest = repo.clone / "infra/overlays/production/model-fraud.yaml"
    doc = yaml.safe_load(manifest.read_text())
    doc["metadata"]["annotations"] = {"mlops.platform/stable-version": "4", "mlops.platform/canary-version": "5"}
    doc["spec"]["predictor"]["canaryTrafficPercent"] = 10
    doc["spec"]["predictor"]["model"]["storageUri"] = template.format(model="fraud", version=5)
    manifest.write_text(yaml.safe_dump(doc))
    subprocess.run(["git", "commit", "-qam", "canary v5"], cwd=repo.clone, check=True)
    before = served_at_head(repo, "production", "fraud", template)
    assert before.canary_version is None  # committed in the clone, not pushed: the cluster does not see it
    subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/heads/main"], cwd=repo.clone, check=True)
    served = served_at_head(repo, "production", "fraud", template)
    assert (served.stable_version, served.canary_version, served.canary_percent) == (4, 5, 10)
    assert served.stable_uri == "file:///bucket/models/fraud/v4/"
    assert served.canary_uri == "file:///bucket/models/fraud/v5/"
    assert served.commit == repo.head() != before.commit


def test_the_rehearsal_mlflow_caches_verified_credentials_in_its_one_worker(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Without MLflow's credential cache every request re-hashed the password (scrypt): 14-16 requests an alias
    move, 0.5-1 s each on the loaded machine. The cache is safe here because the server runs one worker (a
    password changed through the API leaves that worker's cache at once)."""
    from mlflow.server.auth.config import read_auth_config

    launched = []

    class Harness:
        def launch(self, spec: object) -> None:
            launched.append(spec)

    platform = _platform(tmp_path)
    db = "postgresql://postgres@127.0.0.1:5432/"
    launch_mlflow(Harness(), platform, db + "backend", db + "auth")  # type: ignore[arg-type]
    (spec,) = launched
    argv = list(spec.argv)
    assert argv[argv.index("--workers") + 1] == "1"
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", spec.env["MLFLOW_AUTH_CONFIG_PATH"])
    config = read_auth_config()
    assert config.auth_cache_ttl_seconds > 0
    assert config.default_permission == "NO_PERMISSIONS"  # the cache changes nothing about who may do what


def test_serving_processes_are_held_from_the_signing_keys_private_half_the_profile_names(tmp_path: Path) -> None:
    """The staging profile names the private key's variables (``provenance.private_key_var`` and its password's);
    the rehearsal's serving processes must not inherit them (the ServingRuntime mounts the public key only), while
    the public key stays for the signature check at load."""
    from mlops_pipeline.rehearsal.serving import PRIVATE_SIGNING_ENV

    env = config_env(_platform(tmp_path), tmp_path / "gitops.git", fast=True)
    provenance = load_rehearsal_config(REPO, env).config.provenance
    private = {provenance.private_key_var, provenance.private_key_password_var} - {None}
    assert private and private <= set(PRIVATE_SIGNING_ENV)
    assert provenance.public_key_var not in PRIVATE_SIGNING_ENV and provenance.public_key_var in env
