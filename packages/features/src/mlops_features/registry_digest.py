"""The Feast registry's content as one hash, read without importing Feast: what a cache keyed by it (the prepared
training set, :mod:`mlops_training.tabular_cache`) must see change when ``feast apply`` or a materialization
changes the registry.

A file registry is its bytes. A SQL registry is every row of every table in its database, table by table in name
order, rows in primary-key order: the stored protos and their update times. Any write (an apply, a
materialization's intervals) is another digest; reading the registry writes nothing, so trainings and their
re-runs between two writes see one digest.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from mlops_config import FeaturesConfig
from mlops_features.store import repo_config_dict


def registry_digest(features: FeaturesConfig, root: str | Path, *, environ: Mapping[str, str] | None = None) -> str:
    """SHA-256 of the registry ``features`` names (a file under ``root``, or the SQL database it points at).

    ``environ`` holds the registry password's env var (default: this process's environment). A missing registry
    file hashes as empty; a SQL registry that cannot be reached raises SQLAlchemy's error.
    """
    digest = hashlib.sha256()
    if features.registry_type == "file":
        path = Path(root) / features.registry
        digest.update(path.read_bytes() if path.is_file() else b"")
        return digest.hexdigest()
    import sqlalchemy as sa

    registry = repo_config_dict(features, root, environ=os.environ if environ is None else environ)["registry"]
    engine = sa.create_engine(registry["path"], **registry["sqlalchemy_config_kwargs"])
    try:
        tables = sa.MetaData()
        tables.reflect(engine)
        with engine.connect() as conn:
            for table in sorted(tables.tables.values(), key=lambda t: t.name):
                digest.update(f"table {table.name}\0".encode())
                order = list(table.primary_key.columns) or list(table.columns)
                for row in conn.execute(sa.select(table).order_by(*order)):
                    digest.update(repr(tuple(row)).encode() + b"\0")
    finally:
        engine.dispose()
    return digest.hexdigest()
