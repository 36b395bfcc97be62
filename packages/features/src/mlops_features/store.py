"""Feast access: the repo config from the ``features`` section, the definitions in ``feature_repo/``, apply and
materialize.

The Python API builds its :class:`feast.RepoConfig` from the same dict that :func:`render_feature_store_yaml`
writes to ``feature_repo/feature_store*.yaml`` (one per profile), so the YAML files and the platform agree.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

import yaml

from mlops_config import FeaturesConfig
from mlops_features.errors import FeatureStoreError

logger = logging.getLogger(__name__)

DEFINITIONS_FILE = "definitions.py"
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
"""Start of a full materialization window: the online store keeps each entity's latest value, however old."""


REDIS_STORE_TYPE = "mlops_features.online_redis.SecretRedisOnlineStore"
"""Feast online store type for Redis: Feast's store, the password read from ``password_env`` at connect time."""


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
        registry: dict[str, Any] = {"registry_type": "file", "path": path(features.registry)}
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
        if features.redis_password_env:
            online["password_env"] = features.redis_password_env
    config: dict[str, Any] = {
        "project": features.feast_project,
        "provider": "local",
        "registry": registry,
        "online_store": online,
        "offline_store": {"type": features.offline_store},
        "entity_key_serialization_version": 3,
    }
    if features.batch_engine == "spark":
        config["batch_engine"] = spark_engine_config(features)
    return config


def spark_engine_config(features: FeaturesConfig) -> dict[str, Any]:
    """Feast's ``batch_engine`` block for its Spark compute engine (``features.batch_engine: spark``)."""
    return {"type": "spark.engine", "spark_conf": {**features.spark_conf, "spark.master": features.spark_master},
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
    # retry=null: redis-py otherwise retries a refused connection with backoff for ~3 s; serving has its own policy.
    parts = [f"{parsed.hostname}:{parsed.port or 6379}", f"db={db}", f"socket_connect_timeout={timeout}",
             f"socket_timeout={timeout}", "retry=null"]
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


def load_definitions(features: FeaturesConfig, root: str | Path) -> ModuleType:
    """Import ``<repo_path>/definitions.py`` by path (it is not on ``sys.path``)."""
    file = Path(root) / features.repo_path / DEFINITIONS_FILE
    if not file.is_file():
        raise FeatureStoreError(f"feature definitions not found at {str(file)!r}: expected the Feast repo there")
    spec = importlib.util.spec_from_file_location("mlops_feature_repo_definitions", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def feast_objects(features: FeaturesConfig, root: str | Path) -> list[Any]:
    """Every Feast object the repository defines, with sources under ``features.source_dir``."""
    module = load_definitions(features, root)
    return list(module.build(Path(root, features.source_dir).resolve(), timedelta(days=features.ttl_days)))


def feature_defaults(features: FeaturesConfig, root: str | Path) -> dict[str, float]:
    """Per-feature values used for unknown entities, from the repository's ``FEATURE_DEFAULTS``."""
    return dict(load_definitions(features, root).FEATURE_DEFAULTS)


def open_store(features: FeaturesConfig, root: str | Path) -> Any:
    """A :class:`feast.FeatureStore` for this section (folders for the local stores are created)."""
    from feast import FeatureStore, RepoConfig

    raw = repo_config_dict(features, root, environ=os.environ)  # secrets as values, never through YAML text
    for key in ("registry", "online_store"):
        if raw[key].get("registry_type", raw[key].get("type")) in ("file", "sqlite"):
            Path(raw[key]["path"]).parent.mkdir(parents=True, exist_ok=True)
    if "batch_engine" in raw:  # Spark's Python workers must run this interpreter (feast, our online store class)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    repo = Path(root) / features.repo_path
    return FeatureStore(config=RepoConfig(repo_path=repo, **raw), repo_path=str(repo))


def apply_repo(features: FeaturesConfig, root: str | Path) -> dict[str, list[str]]:
    """Register the repository's objects in the registry and create the online tables (``feast apply``).

    Returns:
        Names of what was applied, per kind.
    """
    from feast import Entity, FeatureService, FeatureView

    objects = feast_objects(features, root)
    store = open_store(features, root)
    store.apply(objects)
    kinds: dict[str, type[Any]] = {"entities": Entity, "feature_views": FeatureView, "feature_services": FeatureService}
    return {k: sorted(o.name for o in objects if isinstance(o, cls)) for k, cls in kinds.items()}


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
    views = store.list_feature_views()
    if not views:
        raise FeatureStoreError(f"no feature views in project {features.feast_project!r}: run `mlops features apply`")
    names = [v.name for v in views]
    t0 = time.perf_counter()
    window_start = start or EPOCH
    # Feast prints progress to stdout; keep stdout for the CLI's JSON.
    with contextlib.redirect_stdout(sys.stderr):
        _run_materialize(store, views, window_start, end, incremental)
    seconds = time.perf_counter() - t0
    logger.info("materialized %s in %.2f s", names, seconds)
    return {"start": window_start, "end": end, "incremental": incremental, "seconds": seconds, "views": names}


def _run_materialize(store: Any, views: list[Any], start: datetime, end: datetime, incremental: bool) -> None:
    names = [v.name for v in views]
    window_start = start
    if incremental:
        # Feast starts a never-materialized view one TTL before `end`; older data would never reach the store.
        fresh = [v.name for v in views if not v.materialization_intervals]
        if fresh:
            store.materialize(start_date=window_start, end_date=end, feature_views=fresh)
        done = [n for n in names if n not in fresh]
        if done:
            store.materialize_incremental(end_date=end, feature_views=done)
    else:
        store.materialize(start_date=window_start, end_date=end)
