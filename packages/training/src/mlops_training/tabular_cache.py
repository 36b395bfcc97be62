"""The fraud model's prepared training set, kept by content: a run whose inputs hash the same copies it instead of
building it again.

Building it (:func:`~mlops_training.tabular_data.prepare_tabular`) imports Feast and runs its point-in-time join:
most of a short run's start-up, paid again by every re-run of a recorded recipe (the reproducibility gate,
``mlops registry verify --rerun``). The key is everything the prepared folder is made of: the ``data`` and
``features`` sections and the call's other arguments; the bytes of the validated area and of the feature source
folder (with ``dvc.lock``'s entries for them, as :func:`mlops_features.data_lineage` records them), of the Feast
registry (a file's bytes, or a SQL registry's rows: :func:`mlops_features.registry_digest`) and of the feature
repository; the source of the code that builds it (``mlops_features``, ``mlops_model``, :mod:`.tabular_data`) and
the versions of the libraries it runs on. A change to any of them is another key: modified data is prepared (and
caught) again.

The store is ``<training.checkpoint.dir>/_tabular/<key>``, written whole under a temporary name and renamed into
place; the :data:`KEEP` most recently used entries stay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlops_config import DataConfig, FeaturesConfig

log = logging.getLogger(__name__)

KEEP = 4
"""Entries kept in the store (the most recently used); older ones are removed when a new one is added."""
LIBRARIES = ("feast", "pandas", "numpy", "pyarrow", "duckdb")
"""Libraries whose version is part of the key: the join, the frame and the arrays are theirs."""


def _hash_files(digest: Any, base: Path, files: Iterable[Path]) -> None:
    for f in sorted(files):
        digest.update(f.relative_to(base).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(f.read_bytes()).digest())


def _tree(folder: Path) -> list[Path]:
    """The files under ``folder`` (none when it is missing), without bytecode caches."""
    if not folder.is_dir():
        return []
    return [f for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts]


def _code_digest() -> str:
    import mlops_features
    import mlops_model
    from mlops_training import tabular_data

    digest = hashlib.sha256()
    for module in (mlops_features, mlops_model):
        base = Path(module.__file__ or "").parent
        _hash_files(digest, base, (f for f in _tree(base) if f.suffix == ".py"))
    own = Path(tabular_data.__file__ or "")
    _hash_files(digest, own.parent, [own])
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()


def cache_key(features: FeaturesConfig, data: DataConfig, root: Path, **kwargs: Any) -> str:
    """The key of the training set these inputs prepare."""
    from mlops_features import data_lineage, data_version, registry_digest

    root = Path(root)
    sections = {"features": features.model_dump(mode="json"), "data": data.model_dump(mode="json"),
                "kwargs": {k: v.model_dump(mode="json") if hasattr(v, "model_dump") else v for k, v in kwargs.items()}}
    digest = hashlib.sha256(json.dumps(sections, sort_keys=True, default=str).encode())
    lineage = data_lineage(root, [data.validated_dir, features.source_dir])  # MD5 per file + the lock entries
    digest.update(json.dumps([data_version(data, root), lineage], sort_keys=True).encode())
    digest.update(registry_digest(features, root).encode())
    repo = (root / features.repo_path).resolve()
    _hash_files(digest, repo, _tree(repo))
    digest.update(_code_digest().encode())
    return digest.hexdigest()


def prepare_cached(prepare: Callable[..., None], features: FeaturesConfig, data: DataConfig, root: Path,
                   cache: Path, store: Path, **kwargs: Any) -> bool:
    """``prepare(features, data, root, cache, **kwargs)``, or a copy of the folder it made before from the same
    inputs (kept under ``store``). Returns whether the copy was used."""
    key = cache_key(features, data, root, **kwargs)
    entry = store / key
    if (entry / "meta.json").is_file():
        try:
            shutil.copytree(entry, cache, dirs_exist_ok=True)
            os.utime(entry)  # most recently used
        except OSError as exc:  # removed meanwhile by another run keeping its own (least recently used first)
            log.warning("training set: the prepared copy %s… went away (%s); preparing it", key[:12], exc)
        else:
            log.info("training set: the prepared copy %s… (same data, feature store, sections and code)", key[:12])
            return True
    prepare(features, data, root, cache, **kwargs)
    _keep(cache, store, key)
    return False


def _keep(cache: Path, store: Path, key: str) -> None:
    """Copy ``cache`` into ``store/key`` (whole or not at all) and drop the least recently used entries."""
    store.mkdir(parents=True, exist_ok=True)
    partial = store / f".{key}.{os.getpid()}.{time.monotonic_ns()}"
    shutil.copytree(cache, partial)
    try:
        os.rename(partial, store / key)
    except OSError:  # another run kept the same inputs meanwhile: theirs stays
        shutil.rmtree(partial, ignore_errors=True)
    entries = sorted((p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
