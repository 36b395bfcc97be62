"""Feast access: the repo config from the ``features`` section, the definitions in ``feature_repo/``, apply and
materialize.

The Python API builds its :class:`feast.RepoConfig` from the same dict that :func:`render_feature_store_yaml`
writes to ``feature_repo/feature_store*.yaml`` (one per profile), so the YAML files and the platform agree.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from mlops_config import FeaturesConfig, spark_conf
from mlops_features.errors import FeatureStoreError
from mlops_features.repo import in_repo, load_repo, repo_dir

logger = logging.getLogger(__name__)

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
"""Start of a full materialization window: the online store keeps each entity's latest value, however old."""


REDIS_STORE_TYPE = "mlops_features.online_redis.SecretRedisOnlineStore"
"""Feast online store type for Redis: Feast's store, the password read from ``password_env`` at connect time."""


REGISTRY_STORE_TYPE = "mlops_features.registry_store.AtomicFileRegistryStore"
"""Feast registry store for the file registry: Feast's, each write atomic (temporary file renamed over it)."""


OFFLINE_STORE_TYPES = {"duckdb": "mlops_features.offline_duckdb.UdfDuckDBOfflineStore", "file": "file"}
"""Feast offline store type per ``features.offline_store``: DuckDB with every source column for a view's udf
(see :mod:`mlops_features.offline_duckdb`)."""


SPARK_OFFLINE_STORE_TYPE = "mlops_features.offline_spark.SparkReadOfflineStore"
"""Feast offline store type with ``features.batch_engine: spark``: the DuckDB store, except that the sources the
Spark engine materializes from are read by Spark's executors, not collected on the driver
(see :mod:`mlops_features.offline_spark`)."""


def repo_config_dict(features: FeaturesConfig, root: str | Path, *, relative_to: Path | None = None,
                     environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``feature_store.yaml`` content for this section; paths absolute, or relative to ``relative_to``.

    Secrets never pass through a URL or a text: the registry password goes to the database driver as a
    keyword (``connect_args.password``, so ``@ : / # %`` need no encoding), the Redis password is read by
    :mod:`mlops_features.online_redis` from the env var it names. Without ``environ`` the registry password
    is written as ``${VAR}`` (Feast expands it when it reads the YAML; see :func:`render_feature_store_yaml`);
    with ``environ`` (:func:`open_store`) the value itself is put in the dict, which never becomes YAML.
    """
    root = Path(root)

    def path(p: str) -> str:
        full = root / p
        return os.path.relpath(full, relative_to) if relative_to is not None else str(full.resolve())

    if features.registry_type == "file":
        # Feast's own file store rewrites registry.db in place: a kill mid-write leaves it torn (registry_store.py)
        registry: dict[str, Any] = {"registry_type": "file", "registry_store_type": REGISTRY_STORE_TYPE,
                                    "path": path(features.registry)}
    else:
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if features.registry_password_env:
            kwargs["connect_args"] = {"password": _secret(features.registry_password_env, environ,
                                                          "features.registry_password_env")}
        registry = {"registry_type": "sql", "path": registry_url(features), "sqlalchemy_config_kwargs": kwargs}
    registry["cache_ttl_seconds"] = features.registry_cache_ttl_s
    if features.online_store == "sqlite":
        online: dict[str, Any] = {"type": "sqlite", "path": path(features.online_store_path)}
    else:
        online = {"type": REDIS_STORE_TYPE, "connection_string": redis_connection_string(features)}
        if features.redis_type != "redis":
            online["redis_type"] = features.redis_type
        username = urlparse(features.redis_url).username
        if username:
            online["username"] = unquote(username)
        if features.redis_password_env:
            online["password_env"] = features.redis_password_env
        if features.redis_username_env:
            online["username_env"] = features.redis_username_env
        if features.redis_ca_cert is not None:
            # absolute even in a rendered file: redis-py opens it from the process's working directory
            online["ssl_ca_certs"] = str((root / features.redis_ca_cert).resolve())
    config: dict[str, Any] = {
        "project": features.feast_project,
        "provider": "local",
        "registry": registry,
        "online_store": online,
        "offline_store": {"type": OFFLINE_STORE_TYPES[features.offline_store]},
        # The views' udfs run in Feast's local compute engine on pandas frames (it cannot infer one to materialize).
        "batch_engine": {"type": "local", "backend": "pandas"},
        "entity_key_serialization_version": 3,
    }
    if features.batch_engine == "spark":
        config["batch_engine"] = spark_engine_config(features)
        config["offline_store"] = {"type": SPARK_OFFLINE_STORE_TYPE}
    return config


def spark_engine_config(features: FeaturesConfig) -> dict[str, Any]:
    """Feast's ``batch_engine`` block for its Spark compute engine (``features.batch_engine: spark``):
    ``mlops_config.SPARK_DEFAULTS``, then ``features.spark_conf``, then ``spark.master = features.spark_master``."""
    return {"type": "spark.engine", "spark_conf": spark_conf(features.spark_conf, features.spark_master),
            "partitions": features.spark_partitions}


def _secret(var: str, environ: Mapping[str, str] | None, key: str) -> str:
    if environ is None:
        return f"${{{var}}}"
    if var not in environ:
        raise FeatureStoreError(f"{key} names {var!r}, which is not set in the environment; export the secret there")
    return environ[var]


def registry_url(features: FeaturesConfig) -> str:
    """``features.registry`` checked to carry no password (that belongs in ``registry_password_env``)."""
    parsed = urlparse(features.registry)
    if parsed.password is not None:
        raise FeatureStoreError(
            f"features.registry holds a password for user {parsed.username!r}: remove it from the URL and name "
            "the env var that holds it in features.registry_password_env"
        )
    return features.registry


def redis_connection_string(features: FeaturesConfig) -> str:
    """Feast's ``host:port,db=N,...`` form of ``features.redis_url`` (keys become redis-py kwargs; no password:
    Feast splits this string on ``,`` and ``=``, so the password travels apart, see ``online_redis``)."""
    parsed = urlparse(features.redis_url)
    if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
        raise FeatureStoreError(f"features.redis_url={features.redis_url!r} is invalid: expected redis://host:port/db")
    if parsed.password is not None:
        raise FeatureStoreError("features.redis_url holds a password: remove it and name its env var in "
                                "features.redis_password_env")
    db = parsed.path.strip("/") or "0"
    timeout = features.redis_timeout_s
    parts = [f"{parsed.hostname}:{parsed.port or 6379}"]
    if features.redis_type == "redis_cluster":
        # redis-py's cluster client refuses db and retry (it selects no db and retries at the cluster level)
        if db != "0":
            raise FeatureStoreError(f"features.redis_url={features.redis_url!r} names db {db}: a Redis Cluster has "
                                    "only db 0")
        parts += [f"socket_connect_timeout={timeout}", f"socket_timeout={timeout}"]
    else:
        # retry=null: redis-py otherwise retries a refused connection with backoff for ~3 s; serving has its own
        # policy.
        parts += [f"db={db}", f"socket_connect_timeout={timeout}", f"socket_timeout={timeout}", "retry=null"]
    if parsed.scheme == "rediss":
        parts.append("ssl=true")
    return ",".join(parts)


def render_feature_store_yaml(features: FeaturesConfig, root: str | Path, profile: str) -> str:
    """The text of ``feature_repo/feature_store[.<profile>].yaml`` for a profile's ``features`` section.

    Feast substitutes ``${VAR}`` in the file's *text* before parsing it, so a secret reference is written as a
    literal block scalar with a fixed indentation (``|2-``): whatever the value holds (``#``, ``: ``, quotes,
    braces, leading spaces) stays the string's content instead of becoming YAML syntax.
    """
    repo = Path(root) / features.repo_path
    body = yaml.safe_dump(repo_config_dict(features, root, relative_to=repo), sort_keys=False)
    body = re.sub(r"^( *)(\w+): (\$\{\w+\})$", r"\1\2: |2-\n\1  \3", body, flags=re.MULTILINE)
    return f"# Generated by `mlops features render` from configs/ (profile {profile}); do not edit by hand.\n{body}"


def open_store(features: FeaturesConfig, root: str | Path, *, registry_refresh: str = "request") -> Any:
    """A :class:`feast.FeatureStore` for this section (folders for the local stores are created).

    ``registry_refresh``: ``request`` (Feast's default: a call that finds the registry cache older than
    ``registry_cache_ttl_s`` re-reads it first) or ``background`` (the cache never expires by itself; the caller
    refreshes it, :class:`mlops_features.registry_refresh.RegistryRefresher`).

    Paths are written relative to the repository, as in the rendered ``feature_store.yaml``: the ``feast`` CLI
    run there and the platform then describe the same infrastructure (``feast plan`` shows no change).
    """
    from feast import FeatureStore, RepoConfig

    from mlops_core import filter_known_warnings

    filter_known_warnings()  # after Feast's import, whose own "once" filters would otherwise come first
    repo = repo_dir(features, root)
    raw = repo_config_dict(features, root, relative_to=repo, environ=os.environ)  # secrets never through YAML
    if registry_refresh == "background":  # 0: never expires; thread: no per-call stat of the file, no sync refresh
        raw["registry"] |= {"cache_ttl_seconds": 0, "cache_mode": "thread"}
    elif registry_refresh != "request":
        raise ValueError(f"registry_refresh={registry_refresh!r}: expected 'request' or 'background'")
    for key in ("registry", "online_store"):
        if raw[key].get("registry_type", raw[key].get("type")) in ("file", "sqlite"):
            (repo / raw[key]["path"]).parent.mkdir(parents=True, exist_ok=True)
    if raw.get("batch_engine", {}).get("type") == "spark.engine":  # Spark's Python workers run this interpreter
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    store = FeatureStore(config=RepoConfig(repo_path=repo, **raw), repo_path=str(repo))
    if registry_refresh == "background":
        _drop_dead_exit_handler(store.registry)
    return store


def _drop_dead_exit_handler(registry: Any) -> None:
    """Unregister the exit handler Feast's caching (SQL) registry adds with ``cache_mode: thread``: it cancels the
    refresh thread, which ``cache_ttl_seconds: 0`` never starts, so at exit it raised AttributeError ("Exception
    ignored in atexit callback … no attribute 'registry_refresh_thread'") in every process that opened one."""
    handler = getattr(registry, "_exit_handler", None)  # the file registry has none
    if handler is not None and registry.cache_mode == "thread" and not hasattr(registry, "registry_refresh_thread"):
        atexit.unregister(handler)


def apply_repo(features: FeaturesConfig, root: str | Path) -> dict[str, list[str]]:
    """``feast apply`` on the repository: register its objects, delete what it no longer defines, create tables.

    The objects come from Feast's own ``parse_repo`` of ``features.repo_path`` and go through Feast's own
    apply (``apply_total_with_repo_instance``), so a plain ``feast plan`` in that folder afterwards proposes
    no change.

    Returns:
        Names of what was applied, per kind.

    Raises:
        FeatureStoreError: a definition fails to import, or has a problem :mod:`mlops_features.checks` finds
            (each naming its file and object); nothing is applied then.
    """
    from feast.repo_operations import apply_total_with_repo_instance

    from mlops_features.checks import check_definitions

    repo = load_repo(features, root)
    check_definitions(repo, repo_dir(features, root))
    store = open_store(features, root)
    with contextlib.redirect_stdout(sys.stderr):  # Feast prints its diff; stdout is the CLI's JSON
        apply_total_with_repo_instance(store, features.feast_project, store.registry, repo,
                                       skip_source_validation=True)
    return {"entities": sorted(e.name for e in repo.entities if not e.name.startswith("__")),
            "feature_views": sorted(v.name for v in [*repo.feature_views, *repo.on_demand_feature_views]),
            "feature_services": sorted(s.name for s in repo.feature_services)}


def materialize(
    features: FeaturesConfig,
    root: str | Path,
    *,
    incremental: bool = False,
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, Any]:
    """Load the latest feature values into the online store (``feast materialize[-incremental]``).

    Args:
        features: The ``features`` section.
        root: Repo root the section's paths are relative to.
        incremental: Only from each view's last materialization on (the first run covers one TTL back).
        start: Window start for a full run (and for views never materialized); default: all history.
        end: Window end; default: now (UTC).

    Returns:
        ``{"start", "end", "incremental", "seconds", "views"}``.
    """
    end = end or datetime.now(UTC)
    store = open_store(features, root)
    if features.batch_engine == "spark":
        from mlops_features.offline_spark import start_spark_session

        start_spark_session(features)
    views = store.list_feature_views()
    if not views:
        raise FeatureStoreError(f"no feature views in project {features.feast_project!r}: run `mlops features apply`")
    names = [v.name for v in views]
    t0 = time.perf_counter()
    window_start = start or EPOCH
    # Feast prints progress to stdout; keep stdout for the CLI's JSON.
    with contextlib.redirect_stdout(sys.stderr), in_repo(features, root):
        _run_materialize(store, views, window_start, end, incremental)
    seconds = time.perf_counter() - t0
    logger.info("materialized %s in %.2f s", names, seconds)
    return {"start": window_start, "end": end, "incremental": incremental, "seconds": seconds, "views": names}


def _run_materialize(store: Any, views: list[Any], start: datetime, end: datetime, incremental: bool) -> None:
    """One view at a time (what Feast's own loop does), so that a long run shows which view it is on and how many
    are left (:class:`mlops_core.Progress`: a bar on a terminal, a line per view elsewhere)."""
    from mlops_core import Progress

    # Incremental: Feast starts a never-materialized view one TTL before `end`; older data would never reach the
    # store. A view computed by a udf reads its whole source every time: its windows need the history before the
    # last run, and Feast hands the udf only the rows inside [start, end]. Those run as a full window.
    whole = {v.name for v in views if not incremental or not v.materialization_intervals
             or getattr(v, "feature_transformation", None) is not None}
    if not incremental:  # the views Feast's own full run takes (feature_views=None): online, enabled
        views = [v for v in views if v.online and getattr(v, "enabled", True)]
        views += [o for o in store.list_on_demand_feature_views()
                  if getattr(o, "write_to_online_store", False) and getattr(o, "enabled", True)]
        whole = {v.name for v in views}
    with Progress(len(views), "view") as progress:
        for done, view in enumerate(views, start=1):
            if view.name in whole:
                store.materialize(start_date=start, end_date=end, feature_views=[view.name])
            else:
                store.materialize_incremental(end_date=end, feature_views=[view.name])
            progress.update(done, view.name)
