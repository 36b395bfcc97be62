"""The staging topology's platform servers on one machine: each a real server started by the harness.

What a cluster runs in ``infra/platform`` and the monitoring stack, here as local processes on free loopback
ports: ``mlflow server --app-name basic-auth`` on PostgreSQL with proxied artifacts, a dedicated
``redis-server`` (the online store, with a password), the Feast SQL registry in a PostgreSQL database of its
own, Alertmanager, Prometheus with the repo's recording and alerting rules, and node-exporter's textfile
collector exposing what the drift job writes (a cluster's CronJob pushes to a Pushgateway or a textfile
collector; both expose the same series). PostgreSQL itself is the machine's server: the rehearsal creates
fresh databases in it and drops them at the end.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from mlops_core import spark_class, spark_master_args, spark_worker_args, write_auth_config
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.servers import ProcessHarness, ServerSpec, free_port, http_ready, tcp_ready

log = logging.getLogger(__name__)

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
RULES = Path("infra/base/monitoring/prometheus-rules.yaml")
# The env-var names the staging profile reads its secrets from (configs/profiles/staging.yaml).
MLFLOW_USER_ENV, MLFLOW_PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
MLFLOW_AUTH_CACHE_TTL_S = 300
"""How long the rehearsal's MLflow server trusts a verified credential before hashing it again (see
:func:`mlops_core.write_auth_config`)."""
REDIS_PASSWORD_ENV, FEAST_REGISTRY_PASSWORD_ENV = "REDIS_PASSWORD", "FEAST_REGISTRY_PASSWORD"
REDIS_USERNAME_ENV = "REDIS_USERNAME"


@dataclass
class Platform:
    """Where each platform server listens, and the secrets the run generated for them."""

    run_dir: Path
    postgres_url: str
    databases: list[str] = field(default_factory=list)
    mlflow_url: str = ""
    redis_url: str = ""
    spark_master_url: str = ""
    spark_ui_url: str = ""
    feast_registry_url: str = ""
    alertmanager_url: str = ""
    prometheus_url: str = ""
    textfile_dir: Path | None = None
    targets_file: Path | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    """Env var name → value, as a cluster's Secret would project them (never written to a file but the ini)."""
    redis_users: dict[str, str] = field(default_factory=dict)
    """The online store's ACL users (``infra/platform/redis.yaml``) and their generated passwords."""
    namespace: str = ""
    """The environment's namespace (the staging overlay's): ``$(POD_NAMESPACE)`` in the workloads' env."""
    mlflow_admin: tuple[str, str] = ("", "")
    """The tracking server's admin: used only to create the role users (``rehearsal.mlflow_roles``), never in
    :attr:`secrets` nor ``os.environ``, so no workload gets it."""
    mlflow_users: dict[str, str] = field(default_factory=dict)
    """The tracking server's role users (``<namespace>.<model>-<role>``) and their generated passwords."""
    mlflow_envs: dict[str, Any] = field(default_factory=dict)
    """Namespace → :class:`~mlops_pipeline.rehearsal.mlflow_roles.Environment` (its resources and role users)."""


def check_binaries() -> None:
    """Fail early, naming the Debian packages, when the monitoring stack is not installed."""
    missing = [p for p in (PROMETHEUS, ALERTMANAGER, NODE_EXPORTER) if not Path(p).exists()]
    if missing or not shutil.which("redis-server"):
        raise PipelineError(f"the rehearsal needs {missing or ['redis-server']}: install the Debian packages "
                            "prometheus prometheus-alertmanager prometheus-node-exporter redis-server "
                            "(`make rehearse` does, as root)")


# --- PostgreSQL ---------------------------------------------------------------------------------------------


def create_database(admin_url: str, name: str) -> str:
    """Create database ``name`` on the server of ``admin_url``; return the URL of the new database."""
    import psycopg2

    try:
        conn = psycopg2.connect(admin_url, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        raise PipelineError(f"PostgreSQL at {admin_url!r} is not reachable ({exc}); start it (see .ci/run)") from exc
    conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def drop_database(admin_url: str, name: str) -> None:
    """Drop a database this run created (connections the servers left are closed first)."""
    import psycopg2

    conn = psycopg2.connect(admin_url, connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    conn.close()


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` → ``postgresql+psycopg2://`` (a plain URL makes SQLAlchemy 2 look for psycopg 3)."""
    return url.replace("postgresql://", "postgresql+psycopg2://", 1)


# --- servers ------------------------------------------------------------------------------------------------


def launch_mlflow(harness: ProcessHarness, platform: Platform, backend_url: str, auth_url: str) -> str:
    """Start ``mlflow server --app-name basic-auth`` on PostgreSQL, artifacts proxied (``--serve-artifacts``).

    Returns the server's name for :meth:`ProcessHarness.wait_ready`: it migrates two databases and imports
    a lot before it listens (a minute or more on a busy 2-core machine), so the other servers start meanwhile.
    """
    user, password = "mlops-admin", secrets.token_urlsafe(16)
    # default_permission NO_PERMISSIONS: a valid user without a grant reads nothing either; the platform's one
    # writer escapes what MLflow's %-interpolating parser would otherwise misread. The credential cache: without
    # it every request re-hashed the password (scrypt, 0.5-1 s a request on the loaded machine; an alias move is
    # 14-16 requests, so 10-17 s each); one worker, so a password change would reach the cache at once.
    ini = write_auth_config(platform.run_dir / "mlflow" / "basic_auth.ini", database_uri=sqlalchemy_url(auth_url),
                            admin_username=user, admin_password=password, default_permission="NO_PERMISSIONS",
                            auth_cache_ttl_seconds=MLFLOW_AUTH_CACHE_TTL_S)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    harness.launch(ServerSpec(
        "mlflow",
        [mlflow, "server", "--app-name", "basic-auth", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--serve-artifacts",
         "--artifacts-destination", str(platform.run_dir / "mlflow" / "artifacts")],
        ready=http_ready(f"{url}/health"),
        # the store's URI holds the database password: in the env, not on a command line `ps` shows
        env={"MLFLOW_BACKEND_STORE_URI": sqlalchemy_url(backend_url),
             "MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
             "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        ready_timeout_s=480,
    ))
    platform.mlflow_url = url
    platform.mlflow_admin = (user, password)  # not a secret any workload gets: see rehearsal.mlflow_roles
    return "mlflow"


def start_redis(harness: ProcessHarness, platform: Platform, repo_root: Path) -> None:
    """A dedicated ``redis-server`` with the platform's ACL users (``infra/platform/redis.yaml``, see
    :mod:`~mlops_pipeline.rehearsal.workloads`), no persistence (the shared one on 6379 stays untouched)."""
    from mlops_pipeline.rehearsal.workloads import REDIS_MANIFEST, namespace, redis_acl

    port = free_port()
    folder = platform.run_dir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    acl, platform.redis_users = redis_acl(repo_root)
    platform.namespace = namespace(repo_root)
    (folder / "users.acl").write_text(acl)  # hashes only: the passwords stay in this process
    conf = folder / "redis.conf"
    conf.write_text(f"bind 127.0.0.1\nport {port}\naclfile {folder / 'users.acl'}\nsave \"\"\nappendonly no\n"
                    f"dir {folder}\n")
    for path in (conf, folder / "users.acl"):
        path.chmod(0o600)
    harness.start(ServerSpec("redis", [shutil.which("redis-server") or "redis-server", str(conf)],
                             ready=tcp_ready(port), ready_timeout_s=30))
    platform.redis_url = f"redis://127.0.0.1:{port}/0"
    # the loop (materialize, as the CronJob) and the Spark worker write the online store: the environment's writer
    writer = f"{platform.namespace}.fraud-writer"
    if writer not in platform.redis_users:
        raise PipelineError(f"{REDIS_MANIFEST}: no ACL user {writer!r}; it has {sorted(platform.redis_users)}")
    platform.secrets |= {REDIS_PASSWORD_ENV: platform.redis_users[writer], REDIS_USERNAME_ENV: writer}


def launch_spark(harness: ProcessHarness, platform: Platform, *, cores: int = 2, memory: str = "2g") -> str:
    """The Spark standalone cluster of ``infra/base/features/spark-cluster.yaml``: a master and one worker, the
    same ``spark-class`` commands (``mlops_core.spark_cluster``) on loopback ports, the JVMs bound to 127.0.0.1.

    Needs the online store's password (:func:`start_redis` first). Returns the worker's name for
    :meth:`ProcessHarness.wait_ready` (ready once the master lists it alive): two
    JVMs take a while on a busy 2-core machine, so the other servers start meanwhile.
    """
    port, ui = free_port(), free_port()
    folder = platform.run_dir / "spark"
    folder.mkdir(parents=True, exist_ok=True)
    # the JVMs bind and advertise loopback (a pod advertises its IP); executors run this interpreter
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder / "logs"), "PYSPARK_PYTHON": sys.executable}
    # the executors write the online store: the worker gets its password as the Deployment does (secretKeyRef)
    worker_env = {**env, REDIS_PASSWORD_ENV: platform.secrets[REDIS_PASSWORD_ENV],
                  REDIS_USERNAME_ENV: platform.secrets[REDIS_USERNAME_ENV]}
    harness.launch(ServerSpec(
        "spark-master", [spark_class(), *spark_master_args(host="127.0.0.1", port=port, webui_port=ui)],
        ready=tcp_ready(port), env=env, ready_timeout_s=180,
    ))
    platform.spark_master_url = f"spark://127.0.0.1:{port}"
    platform.spark_ui_url = f"http://127.0.0.1:{ui}"
    harness.launch(ServerSpec(
        "spark-worker",
        [spark_class(), *spark_worker_args(platform.spark_master_url, cores=cores, memory=memory,
                                     work_dir=str(folder / "work"), host="127.0.0.1", webui_port=free_port())],
        ready=_spark_workers_alive(platform.spark_ui_url), env=worker_env, ready_timeout_s=240,
    ))
    return "spark-worker"


def _spark_workers_alive(ui_url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return int(httpx.get(f"{ui_url}/json/", timeout=2).json().get("aliveworkers", 0)) >= 1
        except (httpx.HTTPError, ValueError):
            return False

    return check


def spark_applications(platform: Platform) -> list[dict[str, Any]]:
    """The applications the master ran and runs (name, state, cores), from its status page."""
    status = httpx.get(f"{platform.spark_ui_url}/json/", timeout=10).json()
    return [{"name": a["name"], "state": a["state"], "cores": a.get("cores")}
            for a in [*status.get("completedapps", []), *status.get("activeapps", [])]]


def start_node_exporter(harness: ProcessHarness, platform: Platform, textfile_dir: Path) -> int:
    """node-exporter with only its textfile collector: exposes the drift job's ``*.prom`` file."""
    port = free_port()
    textfile_dir.mkdir(parents=True, exist_ok=True)
    harness.start(ServerSpec(
        "drift-exporter",
        [NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfile_dir}", f"--web.listen-address=127.0.0.1:{port}"],
        ready=http_ready(f"http://127.0.0.1:{port}/metrics"), ready_timeout_s=30,
    ))
    platform.textfile_dir = textfile_dir
    return port


def start_alertmanager(harness: ProcessHarness, platform: Platform) -> None:
    """Alertmanager, clustering off; one receiver with no integrations (the API holds what it received)."""
    port = free_port()
    folder = platform.run_dir / "alertmanager"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "alertmanager.yml"
    config.write_text(yaml.safe_dump({
        "route": {"receiver": "platform", "group_by": ["alertname", "model"], "group_wait": "1s",
                  "group_interval": "5s", "repeat_interval": "1h"},
        "receivers": [{"name": "platform"}],
    }))
    url = f"http://127.0.0.1:{port}"
    harness.start(ServerSpec(
        "alertmanager",
        [ALERTMANAGER, f"--config.file={config}", f"--storage.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        ready=http_ready(f"{url}/-/ready"), ready_timeout_s=60,
    ))
    platform.alertmanager_url = url


def prometheus_rules(repo_root: Path) -> dict[str, Any]:
    """The PrometheusRule resource's ``spec`` (its ``groups``): the rules file Prometheus itself reads."""
    doc = yaml.safe_load((repo_root / RULES).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != "PrometheusRule" or "groups" not in doc.get("spec", {}):
        raise PipelineError(f"{str(RULES)!r} is not a PrometheusRule with spec.groups")
    return {"groups": doc["spec"]["groups"]}


def start_prometheus(harness: ProcessHarness, platform: Platform, repo_root: Path, drift_port: int) -> None:
    """Prometheus scraping the serving pods (file service discovery) and the drift exporter, rules loaded.

    Intervals are seconds instead of a cluster's 15-30 s so the loop waits seconds, not minutes; the rules
    and their expressions are the repo's own, unchanged.
    """
    port = free_port()
    folder = platform.run_dir / "prometheus"
    folder.mkdir(parents=True, exist_ok=True)
    rules = folder / "rules.yml"
    rules.write_text(yaml.safe_dump(prometheus_rules(repo_root), sort_keys=False))
    targets = folder / "serving-targets.json"
    targets.write_text("[]\n")
    am = platform.alertmanager_url.removeprefix("http://")
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]},
        "scrape_configs": [
            # stands in for the pod discovery of a cluster: the rehearsal rewrites the file as pods come and go
            {"job_name": "fraud-serving", "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]},
            {"job_name": "mlops-drift", "static_configs": [{"targets": [f"127.0.0.1:{drift_port}"]}]},
        ],
    }, sort_keys=False))
    url = f"http://127.0.0.1:{port}"
    harness.start(ServerSpec(
        "prometheus",
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d"],
        ready=http_ready(f"{url}/-/ready"), ready_timeout_s=90,
    ))
    platform.prometheus_url = url
    platform.targets_file = targets


def write_scrape_targets(platform: Platform, targets: dict[str, dict[str, str]]) -> None:
    """Point Prometheus's file discovery at the running serving processes (``host:port`` → labels)."""
    assert platform.targets_file is not None
    body = [{"targets": [address], "labels": labels} for address, labels in targets.items()]
    tmp = platform.targets_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(platform.targets_file)  # atomic: Prometheus never reads half a file
