"""The Feast repository as Feast itself reads it: ``parse_repo`` of ``features.repo_path``.

The platform holds no feature names: views, their columns, types and defaults (a ``Field``'s ``default``
tag) come from the repository's objects or the registry, the model's inputs from the FeatureService that
``features.feature_service`` names.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlops_config import FeaturesConfig
from mlops_features.errors import FeatureStoreError

DEFAULT_TAG = "default"
"""Tag of a feature's ``Field`` holding the value used for an unknown entity or a value past the TTL."""


def repo_dir(features: FeaturesConfig, root: str | Path) -> Path:
    """The repository folder (``features.repo_path`` against ``root``), checked to hold a ``feature_store.yaml``."""
    repo = (Path(root) / features.repo_path).resolve()
    if not (repo / "feature_store.yaml").is_file():
        raise FeatureStoreError(f"no Feast repository at {str(repo)!r}: expected feature_store.yaml there "
                                "(features.repo_path; render it with `mlops features render`)")
    return repo


@contextlib.contextmanager
def _importable(repo: Path) -> Iterator[None]:
    """cwd = ``repo`` and ``repo`` first on ``sys.path`` for the block, as the ``feast`` CLI runs; the repo's
    modules are forgotten before and after, so two repositories (a copy in a test) never share a module."""
    names = [p.relative_to(repo).with_suffix("").as_posix().replace("/", ".") for p in repo.rglob("*.py")]
    for name in names:
        sys.modules.pop(name, None)
    cwd, bytecode = Path.cwd(), sys.dont_write_bytecode
    sys.path.insert(0, str(repo))
    sys.dont_write_bytecode = True  # as the feast CLI: no __pycache__ inside the repository
    os.chdir(repo)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.dont_write_bytecode = bytecode
        with contextlib.suppress(ValueError):
            sys.path.remove(str(repo))
        for name in names:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def in_repo(features: FeaturesConfig, root: str | Path) -> Iterator[None]:
    """cwd = the repository for the block: Feast's duckdb offline store reads a FileSource's relative path
    against the working directory, and the ``feast`` CLI runs there; so does the platform."""
    repo, cwd = repo_dir(features, root), Path.cwd()
    os.chdir(repo)
    try:
        yield
    finally:
        os.chdir(cwd)


def load_repo(features: FeaturesConfig, root: str | Path) -> Any:
    """The repository's objects (``feast.repo_contents.RepoContents``), read exactly as ``feast plan`` reads them.

    Raises:
        FeatureStoreError: a definition file fails to import; the message names the file and the error.
    """
    from feast import Project
    from feast.repo_operations import parse_repo

    from mlops_core import filter_known_warnings

    filter_known_warnings()  # after Feast's import, whose own "once" filters would otherwise come first

    repo = repo_dir(features, root)
    with _importable(repo):
        try:
            contents = parse_repo(repo)
        except Exception as exc:
            raise FeatureStoreError(f"{_where(exc, repo)}: {type(exc).__name__}: {exc}") from exc
    if not contents.projects:  # as the feast CLI does: the project named in feature_store.yaml
        contents.projects.append(Project(name=features.feast_project, description=""))
    return contents


def _where(exc: BaseException, repo: Path) -> str:
    """``feature_repo/<file>:<line>`` of the innermost frame of ``exc`` inside the repository (or the folder)."""
    tb = exc.__traceback__
    found = str(repo)
    while tb is not None:
        file = Path(tb.tb_frame.f_code.co_filename)
        if file.is_relative_to(repo):
            found = f"{repo.name}/{file.relative_to(repo)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def feature_defaults_of(views: list[Any]) -> dict[str, float]:
    """``{feature: default}`` from the ``default`` tag of every feature of ``views`` (registry or repo objects); on an
    OnDemandFeatureView, the view's tag ``default:<feature>`` (Feast 0.67 refuses tags on its Fields: it compares
    the declared Fields whole with those it infers from the udf).

    Raises:
        FeatureStoreError: a feature has no ``default`` tag, or one that is not a number.
    """
    out: dict[str, float] = {}
    for view in views:
        for field in view.features:
            raw = (field.tags or {}).get(DEFAULT_TAG, (view.tags or {}).get(f"{DEFAULT_TAG}:{field.name}"))
            try:
                value = float(raw)  # type: ignore[arg-type]
                out[field.name] = int(value) if str(field.dtype).startswith("Int") else value
            except (TypeError, ValueError):
                raise FeatureStoreError(
                    f"feature {field.name!r} of view {view.name!r} has default tag {raw!r}: expected a number, "
                    f"e.g. Field(name={field.name!r}, ..., tags={{'default': '0'}}) (on an on-demand view: the view's "
                    f"tags={{'default:{field.name}': '0'}})") from None
    return out


def transformed_views(store: Any) -> list[Any]:
    """Registered feature views that compute their rows with a ``udf`` (the ones the platform backfills)."""
    return [v for v in store.list_feature_views() if getattr(v, "feature_transformation", None) is not None]
