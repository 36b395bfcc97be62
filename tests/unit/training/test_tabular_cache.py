"""The prepared training set is copied, not built again, only when everything it is made of is the same: the data
and feature sections, the validated area's and the feature sources' bytes, the Feast registry, the feature
repository, the call's arguments. Each changed input is another key (a re-run on modified data prepares it again
and sees it); a SQL registry (a real PostgreSQL database) is keyed by its rows. A stand-in ``prepare`` counts the
builds and writes what its inputs say, so a wrong copy would show in the folder too."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from mlops_config import load_config
from mlops_training.tabular_cache import KEEP, cache_key, prepare_cached


@pytest.fixture
def repo(tmp_path: Path, repo_root: Path) -> tuple[Any, Path]:
    """A root with configs, a validated area, a feature source table, a registry file and the feature repo."""
    root = tmp_path / "repo"
    shutil.copytree(repo_root / "configs", root / "configs")
    shutil.copytree(repo_root / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    cfg = load_config(model="fraud", config_dir=root / "configs", environ={}).config
    for rel, body in ((cfg.data.validated_dir, b"batch-1"), (cfg.features.source_dir, b"transactions"),
                      (cfg.features.registry, b"registry v1")):
        path = root / rel / "part-0.parquet" if rel != cfg.features.registry else root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return cfg, root


def _prepare(builds: list[str]) -> Any:
    def prepare(features: Any, data: Any, root: Path, cache: Path, **kwargs: Any) -> None:
        cache.mkdir(parents=True, exist_ok=True)
        batch = (root / data.validated_dir / "part-0.parquet").read_text()
        (cache / "meta.json").write_text(json.dumps({"batch": batch, "service": features.feature_service, **kwargs}))
        builds.append(batch)

    return prepare


def test_same_inputs_are_copied_and_each_changed_input_is_prepared_again(repo: tuple[Any, Path],
                                                                         tmp_path: Path) -> None:
    cfg, root = repo
    store, builds = tmp_path / "store", []
    prepare = _prepare(builds)

    def run(name: str, features: Any = cfg.features, **kwargs: Any) -> tuple[bool, dict[str, Any]]:
        cache = tmp_path / "runs" / name
        hit = prepare_cached(prepare, features, cfg.data, root, cache, store, **kwargs)
        return hit, json.loads((cache / "meta.json").read_text())

    assert run("first") == (False, {"batch": "batch-1", "service": "fraud_v1"})
    assert run("replay") == (True, {"batch": "batch-1", "service": "fraud_v1"}) and builds == ["batch-1"]

    (root / cfg.data.validated_dir / "part-0.parquet").write_text("batch-2")  # modified data
    assert run("modified data") == (False, {"batch": "batch-2", "service": "fraud_v1"})
    keys = {cache_key(cfg.features, cfg.data, root)}
    for change in (lambda: (root / cfg.features.source_dir / "part-0.parquet").write_text("re-backfilled"),
                   lambda: (root / cfg.features.registry).write_text("registry v2"),
                   lambda: (root / cfg.features.repo_path / "windows.py").write_text("# another udf\n")):
        change()
        assert run("changed")[0] is False
        keys.add(cache_key(cfg.features, cfg.data, root))
    assert run("another service", cfg.features.model_copy(update={"feature_service": "fraud_v2"}))[0] is False
    assert run("another argument", val_fraction=0.3) == (False, {"batch": "batch-2", "service": "fraud_v1",
                                                                 "val_fraction": 0.3})
    assert run("the same again", val_fraction=0.3)[0] is True
    # a config section passed on (as a holdout's fraction may be) is keyed by its fields
    evaluation = load_config(model="fraud", config_dir=root / "configs", environ={}).config.evaluation
    other = evaluation.model_copy(update={"tabular": evaluation.tabular.model_copy(update={"holdout_fraction": 0.3})})
    assert cache_key(cfg.features, cfg.data, root, evaluation=evaluation) != cache_key(
        cfg.features, cfg.data, root, evaluation=other)
    assert len(keys) == 4 and len(builds) == 7
    kept = [p for p in store.iterdir() if not p.name.startswith(".")]
    assert len(kept) == KEEP and not [p for p in store.iterdir() if p.name.startswith(".")]


@pytest.fixture
def sql_registry(postgres_url: str) -> Iterator[str]:
    """A database of this test's own holding a registry-like table (name, proto, update time), dropped afterwards."""
    import psycopg2

    name = f"t_registry_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    url = urlparse(postgres_url)._replace(path=f"/{name}").geturl()
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE feature_views (name text PRIMARY KEY, proto bytea, last_updated_timestamp bigint)")
        cur.execute("INSERT INTO feature_views VALUES ('user_transactions', 'v1', 100), ('merchant_risk', 'm1', 100)")
    yield url.replace("postgresql://", "postgresql+psycopg2://", 1)
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.close()


def _write(registry: str, sql: str) -> None:
    import psycopg2

    with psycopg2.connect(registry.replace("+psycopg2", "", 1)) as conn, conn.cursor() as cur:
        cur.execute(sql)


def test_a_sql_registry_is_keyed_by_its_rows(repo: tuple[Any, Path], tmp_path: Path, sql_registry: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainings between two registry writes share one prepared set; a materialization's update of a view's row
    or a new table (an apply) is another key. The password comes from the env var the section names."""
    cfg, root = repo
    monkeypatch.setenv("T_REGISTRY_PASSWORD", "any (the test server trusts loopback)")
    features = cfg.features.model_copy(update={"registry_type": "sql", "registry": sql_registry,
                                               "registry_password_env": "T_REGISTRY_PASSWORD"})
    builds: list[str] = []

    def run(name: str) -> bool:
        return prepare_cached(_prepare(builds), features, cfg.data, root, tmp_path / name, tmp_path / "store")

    assert (run("first"), run("replay")) == (False, True) and builds == ["batch-1"]
    _write(sql_registry, "UPDATE feature_views SET proto = 'v1+interval', last_updated_timestamp = 200 "
                         "WHERE name = 'user_transactions'")
    assert (run("after materialize"), run("its replay")) == (False, True) and len(builds) == 2
    _write(sql_registry, "CREATE TABLE entities (name text PRIMARY KEY, proto bytea)")
    assert run("after apply") is False and len(builds) == 3
