"""What only a running cluster would show, checked on the rendered manifests and workflows: MLflow requires a
login, training keeps checkpoints on a volume every node mounts, data reaches training through the ingestion
job and DVC (never the generator), and the train workflow refuses a throw-away profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlops_config import load_config
from mlops_core.tracking_server import server_args

from .conftest import REPO


def _profile(env: str) -> Any:
    return load_config(profile=env, config_dir=REPO / "configs", environ={}, check_secrets=False).config


def _volume_of(pod: dict[str, Any], container: dict[str, Any], mount_path: str) -> dict[str, Any]:
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    assert mount_path in mounts, f"{container['name']} does not mount {mount_path}: {sorted(mounts)}"
    return next(v for v in pod["volumes"] if v["name"] == mounts[mount_path])


def test_mlflow_server_requires_authentication(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deploy = next(d for d in rendered["platform"] if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow")
    pod = deploy["spec"]["template"]["spec"]
    c = pod["containers"][0]
    # The same flags as mlops_core.tracking_server (what the rehearsal starts), with the cluster's values.
    wanted = server_args(artifacts_destination="s3://mlops-artifacts", host="0.0.0.0", port=5000, workers=2)
    flags = {a.split("=", 1)[0] for a in c["args"][1:]}
    assert flags == {a.split("=", 1)[0] for a in wanted}
    assert "--app-name=basic-auth" in c["args"] and "--serve-artifacts" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    # the store's URI (with the database password, URL-encoded where the Secret is made) from the env, not argv
    assert not [a for a in c["args"] if "postgres" in a], c["args"]
    assert env["MLFLOW_BACKEND_STORE_URI"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-db",
                                                                           "key": "backend-store-uri"}
    path = env["MLFLOW_AUTH_CONFIG_PATH"]["value"]
    volume = _volume_of(pod, c, str(Path(path).parent))
    assert volume["secret"]["secretName"] == "mlflow-auth"  # admin credentials + auth DB URI: a Secret
    for var in ("MLFLOW_FLASK_SERVER_SECRET_KEY", "MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        assert env[var]["valueFrom"]["secretKeyRef"]["name"] == "mlflow-auth", var
    init = next(d for d in rendered["platform"] if d["kind"] == "ConfigMap" and d["metadata"]["name"] ==
                "postgres-initdb")
    assert "CREATE DATABASE mlflow_auth" in "".join(init["data"].values())
    for env_name in ("staging", "production"):
        tracking = _profile(env_name).tracking
        assert tracking.username_env == "MLFLOW_TRACKING_USERNAME"
        assert tracking.password_env == "MLFLOW_TRACKING_PASSWORD"


def test_every_training_node_mounts_the_shared_checkpoint_store(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for env in ("staging", "production"):
        ckpt = _profile(env).training.checkpoint.dir
        assert Path(ckpt).is_absolute(), f"{env}: checkpoint.dir {ckpt!r} is relative to a per-pod folder"
        job = next(d for d in rendered[env] if d["kind"] == "PyTorchJob")
        claims = set()
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            pod = spec["template"]["spec"]
            volume = _volume_of(pod, pod["containers"][0], ckpt)
            assert "emptyDir" not in volume, f"{env}: {ckpt} is a per-pod emptyDir"
            claims.add(volume["persistentVolumeClaim"]["claimName"])
        assert len(claims) == 1, f"{env}: the nodes mount different claims {claims}"
        pvc = next(d for d in rendered[env] if d["kind"] == "PersistentVolumeClaim"
                   and d["metadata"]["name"] in claims)
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_cluster_data_path_is_ingestion_and_dvc_never_the_generator(rendered: dict[str, list[dict[str, Any]]]
                                                                    ) -> None:
    for env in ("staging", "production"):
        data = _profile(env).data
        assert data.landing_uri and data.dvc_remote, f"{env}: no landing area or DVC remote"
        job = next(d for d in rendered[env] if d["kind"] == "CronJob" and d["metadata"]["name"] == "fraud-ingest")
        c = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] == ["mlops", "data", "ingest"]
    train = yaml.safe_load((REPO / ".github/workflows/train.yml").read_text())
    assert "'local'" not in str(train["env"]["MLOPS_PROFILE"]), "train.yml falls back to the local profile"
    runs = [s.get("run", "") for s in train["jobs"]["train"]["steps"]]
    guard = next(i for i, r in enumerate(runs) if "mlops config require-shared" in r)
    pull = next(i for i, r in enumerate(runs) if "mlops data pull" in r)
    fit = next(i for i, r in enumerate(runs) if "mlops train run" in r)
    assert guard < pull < fit
    assert not any("repro" in r or "data generate" in r for r in runs), "train.yml still runs the generator"


def test_online_store_freshness_is_scheduled_with_the_platforms_materialize(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The CronJob pulls the accepted area and runs `mlops features materialize --incremental` (an existing
    command and option), more often than the freshness SLO, one run at a time."""
    import typer

    from mlops_cli.app import app as mlops_app

    materialize = typer.main.get_command(mlops_app).commands["features"].commands["materialize"]  # type: ignore[attr-defined]
    assert "--incremental" in {o for p in materialize.params for o in p.opts}
    for env in ("staging", "production"):
        job = next(d for d in rendered[env] if d["kind"] == "CronJob" and d["metadata"]["name"] == "fraud-materialize")
        c = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] == ["sh", "-c", "mlops data pull && mlops features materialize --incremental --json"]
        minutes = [int(m) for m in job["spec"]["schedule"].split()[0].split(",")]
        gaps = [(b - a) % 60 for a, b in zip(minutes, [*minutes[1:], minutes[0]], strict=True)]
        assert max(gaps) * 60 < _profile(env).features.freshness_slo_s
        assert job["spec"]["concurrencyPolicy"] == "Forbid"


def test_the_spark_engine_runs_on_the_environments_spark_cluster(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The cluster profiles' `batch_engine: spark` names the master Service of the rendered Spark cluster; master
    and workers run the platform's spark-class commands (mlops_core.spark_cluster, what the rehearsal starts) in
    the image of the materialization job (its driver), and the executors read the sources where the job lays them
    down: one ReadWriteMany claim at the same path on both sides."""
    from urllib.parse import urlsplit

    from mlops_core import spark_master_args, spark_worker_args

    def deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
        return next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)

    for env in ("staging", "production"):
        docs, features = rendered[env], _profile(env).features
        assert features.batch_engine == "spark"
        master_url = urlsplit(features.spark_master)
        service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == master_url.hostname)
        port = next(p for p in service["spec"]["ports"] if p["port"] == master_url.port)
        master = deployment(docs, "fraud-spark-master")
        assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
        m = master["spec"]["template"]["spec"]["containers"][0]
        assert m["command"][0].endswith("/site-packages/pyspark/bin/spark-class")
        container_ports = {p["name"]: p["containerPort"] for p in m["ports"]}
        assert m["args"] == spark_master_args(host="$(POD_IP)", port=container_ports[port["targetPort"]],
                                              webui_port=container_ports["ui"])
        worker = deployment(docs, "fraud-spark-worker")
        pod = worker["spec"]["template"]["spec"]
        w = pod["containers"][0]
        args = w["args"]
        cores, memory = int(args[args.index("--cores") + 1]), args[args.index("--memory") + 1]
        assert args == spark_worker_args(features.spark_master, cores=cores, memory=memory, work_dir="/tmp/spark-work",
                                         host="$(POD_IP)", webui_port=8081)
        # one executor per worker fits what the worker offers
        assert int(features.spark_conf["spark.executor.cores"]) <= cores
        assert int(features.spark_conf["spark.executor.memory"].removesuffix("g")) < int(memory.removesuffix("g"))
        cron = next(d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] == "fraud-materialize")
        job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        driver = job_pod["containers"][0]
        assert w["image"] == m["image"] == driver["image"]
        assert {e["name"]: e.get("valueFrom") for e in driver["env"]}["SPARK_LOCAL_IP"] == \
            {"fieldRef": {"fieldPath": "status.podIP"}}
        # the executors write the online store: its password reaches them by the name the profile gives, the same
        # key as the driver's (each workload reads it from its own Secret: tests/gitops/test_secret_access.py)
        worker_env = {e["name"]: e.get("valueFrom", {}) for e in w["env"]}
        driver_env = {e["name"]: e.get("valueFrom", {}) for e in driver["env"]}
        assert worker_env[features.redis_password_env]["secretKeyRef"]["key"] == \
            driver_env[features.redis_password_env]["secretKeyRef"]["key"] == features.redis_password_env
        # spark.authenticate: the master, the workers and the driver hold the cluster's secret
        for env_of in ({e["name"]: e.get("valueFrom", {}) for e in m["env"]}, worker_env):
            assert env_of["_SPARK_AUTH_SECRET"]["secretKeyRef"]["key"] == "spark-auth-secret"
        assert driver_env["SPARK_AUTH_SECRET"]["secretKeyRef"]["key"] == "spark-auth-secret"
        sources = str(Path("/app") / _profile(env).features.source_dir)  # the job's WORKDIR is /app
        mount = next(v["mountPath"] for v in driver["volumeMounts"] if sources.startswith(v["mountPath"] + "/"))
        claim = _volume_of(job_pod, driver, mount)["persistentVolumeClaim"]["claimName"]
        assert _volume_of(pod, w, mount)["persistentVolumeClaim"]["claimName"] == claim
        pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == claim)
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_stream_updater_runs_the_platforms_commands_with_the_cronjobs_image_and_env(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The stream Deployment: every `mlops` step of its command is an existing command with those options, the
    image and the env sources are the materialization CronJob's (the release pins that image; the ConfigMap names
    the profile whose features.stream_key it consumes), and the metrics port it serves is the one scraped."""
    import shlex

    import typer

    from mlops_cli.app import app as mlops_app

    cli = typer.main.get_command(mlops_app)
    for env in ("staging", "production"):
        dep = next(d for d in rendered[env]
                   if d["kind"] == "Deployment" and d["metadata"]["name"] == "fraud-feature-stream")
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["command"][:2] == ["sh", "-c"]
        steps = [shlex.split(s.strip().removeprefix("exec ")) for s in c["command"][2].split("&&")]
        assert [s[:3] for s in steps] == [["mlops", "data", "pull"], ["mlops", "features", "ingest"],
                                          ["mlops", "features", "stream"]]
        for step in steps:
            command = cli.commands[step[1]].commands[step[2]]  # type: ignore[attr-defined]
            opts = {o for p in command.params for o in p.opts}
            given = [a for a in step[3:] if a.startswith("--")]
            assert set(given) <= opts, f"{env}: `{' '.join(step[:3])}` has no option(s) {set(given) - opts}"
        stream = steps[-1]
        port = int(stream[stream.index("--metrics-port") + 1])
        assert stream[stream.index("--consumer") + 1] == "$POD_NAME"
        assert any(e["name"] == "POD_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
                   for e in c["env"])
        assert [p["containerPort"] for p in c["ports"]] == [port]
        assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert dep["spec"]["replicas"] == 1
        cron = next(d for d in rendered[env] if d["kind"] == "CronJob" and d["metadata"]["name"] == "fraud-materialize")
        job = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == job["image"] and c["envFrom"] == job["envFrom"]
        config_map = next(d for d in rendered[env] if d["kind"] == "ConfigMap"
                          and d["metadata"]["name"] == c["envFrom"][0]["configMapRef"]["name"])
        assert config_map["data"]["MLOPS_PROFILE"] == env
        assert _profile(env).features.online_store == "redis" and _profile(env).features.stream_key
        accounts = {d["metadata"]["name"] for d in rendered[env] if d["kind"] == "ServiceAccount"}
        assert pod["serviceAccountName"] in accounts


def _cronjob(docs: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    job = next(d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] == name)
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return job, pod


def test_the_labels_job_runs_the_labels_gate_on_what_the_platform_provides(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """`mlops data labels ingest` with no batch arguments (an existing command whose batches are optional) reads
    the profile's labels landing area and writes beside the prediction log, both shared object storage; it runs
    from the monitor image (whose Dockerfile installs every package), its profile from the overlay's ConfigMap,
    its only writable path /tmp (where it copies the batches), its own ServiceAccount and NetworkPolicy."""
    import tempfile

    import typer

    from mlops_cli.app import app as mlops_app

    ingest = typer.main.get_command(mlops_app).commands["data"].commands["labels"].commands["ingest"]  # type: ignore[attr-defined]
    batches = next(p for p in ingest.params if p.name == "batches")
    assert not batches.required, "the CronJob passes no batches: they must be optional"
    dockerfile = (REPO / "services" / "monitor" / "Dockerfile").read_text()
    assert "packages/*/" in dockerfile and "COPY configs/ /app/configs/" in dockerfile
    for env in ("staging", "production"):
        docs, profile = rendered[env], _profile(env)
        assert profile.data.labels_landing_uri and profile.data.labels_landing_uri.startswith("s3://"), env
        assert profile.serving.prediction_log_uri.startswith("s3://"), env  # the label store sits beside it
        job, pod = _cronjob(docs, "fraud-labels")
        assert job["spec"]["concurrencyPolicy"] == "Forbid"
        (c,) = pod["containers"]
        assert c["command"][:4] == ["mlops", "data", "labels", "ingest"]
        assert set(c["command"][4:]) <= {o for p in ingest.params for o in p.opts}
        assert c["image"].split("@")[0].split(":")[0] == "ghcr.io/mlops-platform/monitor"
        (source,) = c["envFrom"]
        cm_name = source["configMapRef"]["name"]
        cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name)
        assert cm["data"]["MLOPS_PROFILE"] == env
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert [m["mountPath"] for m in c["volumeMounts"]] == [tempfile.gettempdir()]
        assert "emptyDir" in _volume_of(pod, c, tempfile.gettempdir())
        account = pod["serviceAccountName"]
        assert account == "fraud-labels" and any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account
                                                 for d in docs)
        labels = job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        assert any(d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
                   and d["metadata"]["name"] == "fraud-labels" for d in docs)


def test_the_drift_jobs_retraining_pull_request_targets_the_gitops_repository(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Where the profile opens retraining pull requests on GitHub, the drift job names the repository the API
    needs (`GITHUB_REPOSITORY`) as the one its rollback pushes to, and holds the token the profile names."""
    from urllib.parse import urlsplit

    for env in ("staging", "production"):
        delivery = _profile(env).delivery
        repo = delivery.retrain.repo or delivery.gitops_repo
        if not (delivery.retrain.enabled and repo and delivery.retrain.backend == "github"):
            continue  # no pull request from this environment: a trigger reports `disabled`
        _, pod = _cronjob(rendered[env], "fraud-drift")
        (c,) = pod["containers"]
        variables = {e["name"]: e for e in c["env"]}
        assert variables["GITHUB_REPOSITORY"]["value"] == urlsplit(repo).path.strip("/").removesuffix(".git")
        assert "secretKeyRef" in variables[delivery.github_token_var]["valueFrom"]
