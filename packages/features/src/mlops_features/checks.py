"""Definition checks of a feature repository, each problem naming the file and the object it is about.

Run by ``mlops features plan`` (the review report) and before ``mlops features apply`` registers anything:
Feast itself accepts several of these silently (two views of one name, a FeatureService over a view the
repository does not define at module level, a BatchFeatureView's ``aggregations``, which Feast 0.67's registry
does not store). A definition that fails to import is reported by :func:`mlops_features.repo.load_repo`
(``feature_repo/<file>:<line>``): Feast's type checks refuse a TTL or an aggregation window that is not a
``timedelta`` there.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from mlops_features.errors import FeatureStoreError
from mlops_features.repo import feature_defaults_of


def object_files(repo: Path) -> dict[str, str]:
    """``{object name: "feature_repo/<file>"}`` for objects declared as ``name="..."`` in the repository."""
    out: dict[str, str] = {}
    for path in sorted(repo.rglob("*.py")):
        for name in re.findall(r"""name\s*=\s*["']([A-Za-z0-9_]+)["']""", path.read_text(encoding="utf-8")):
            out.setdefault(name, f"{repo.name}/{path.relative_to(repo)}")
    return out


def where(files: dict[str, str], name: str) -> str:
    """``feature_repo/<file>: '<name>'``: where an object is declared."""
    return f"{files.get(name, 'feature_repo')}: {name!r}"


def definition_problems(repo: Any, files: dict[str, str]) -> list[str]:
    """Problems of the repository's objects (``RepoContents``), each starting with :func:`where` of the object."""
    problems: list[str] = []
    views = {v.name: v for v in [*repo.feature_views, *repo.on_demand_feature_views]}
    for kind, objs in (("feature view", [*repo.feature_views, *repo.on_demand_feature_views]),
                       ("feature service", repo.feature_services), ("entity", repo.entities)):
        names = [o.name for o in objs]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"{where(files, dup)}: two {kind}s are named {dup!r}: names must be unique")
    for service in repo.feature_services:
        seen: dict[str, str] = {}
        for proj in service.feature_view_projections:
            if proj.name not in views:
                problems.append(f"{where(files, service.name)}: FeatureService reads view {proj.name!r}, "
                                "which the repository does not define at module level")
            for f in proj.features:
                if f.name in seen:
                    problems.append(f"{where(files, service.name)}: feature {f.name!r} comes from both "
                                    f"{seen[f.name]!r} and {proj.name!r}: a name clash in the served row")
                seen[f.name] = proj.name
    for view in [*repo.feature_views, *repo.on_demand_feature_views]:
        try:
            feature_defaults_of([view])
        except FeatureStoreError as exc:
            problems.append(f"{where(files, view.name)}: {exc}")
    for view in repo.feature_views:
        if view.ttl is not None and not isinstance(view.ttl, timedelta):
            problems.append(f"{where(files, view.name)}: ttl {view.ttl!r} is not a duration "
                            "(expected a datetime.timedelta, e.g. timedelta(hours=24))")
        problems += [f"{where(files, view.name)}: {p}" for p in _aggregation_problems(view)]
    return problems


def _aggregation_problems(view: Any) -> list[str]:
    out = []
    for agg in getattr(view, "aggregations", None) or []:
        what = f"Aggregation({agg.function}({agg.column!r}), time_window={agg.time_window!r})"
        if agg.time_window is not None and not isinstance(agg.time_window, timedelta):
            out.append(f"{what}: the window is not a duration (expected a datetime.timedelta, e.g. timedelta(hours=1))")
        else:
            out.append(f"{what}: Feast 0.67 does not store a BatchFeatureView's aggregations in its registry (a "
                       "materialization would write the raw column) and its local compute engine refuses time "
                       "windows: compute the window in the view's udf (docs/features.md, 'Add a feature')")
    return out


def check_definitions(repo: Any, repo_path: Path) -> None:
    """Raise on any :func:`definition_problems` (before an apply registers a repository).

    Raises:
        FeatureStoreError: every problem, one per line, each naming its file and object.
    """
    problems = definition_problems(repo, object_files(repo_path))
    if problems:
        raise FeatureStoreError("feature repository has definition problems:\n  " + "\n  ".join(problems))
