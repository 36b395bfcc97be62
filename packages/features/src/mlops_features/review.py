"""``mlops features plan``: the review report of a feature pull request.

Compares the repository (``features.repo_path``) with its predecessor (a registry the base revision was
applied to: the configured one, or a scratch one built from ``base_repo``) and reports, as Markdown:

1. definition checks — the repository imports (errors name ``file:line``), names are unique, every
   FeatureService reads views the repository defines, no feature name is served twice, every feature has a
   numeric ``default`` tag, each view's udf runs on the sample data and returns its declared columns;
2. Feast's own registry diff (``feast plan``; Feast 0.67 crashes on a changed udf: then our diff stands alone);
3. schema and type changes per view (features added, removed, retyped; udf, TTL, entities changed);
4. breaking changes — a FeatureService a registered model version uses (tag ``mlops.feature_service``)
   must not change;
5. statistics of every new or changed feature on the sample data (nulls, range, mean, quantiles, PSI
   against its predecessor's values);
6. leakage — a value at an event must not change when rows stamped after it are removed (no use of the
   future), and a feature known just before a transaction must not predict its label almost perfectly
   (ROC AUC ≥ ``LEAKAGE_AUC``).

A failed check makes :attr:`PlanReport.ok` false (the CLI exits 1); statistics are information.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import ContractConfig, FeaturesConfig, TrackingConfig
from mlops_features.backfill import compute_view, source_path
from mlops_features.checks import definition_problems, object_files, where
from mlops_features.errors import FeatureStoreError
from mlops_features.repo import in_repo, load_repo, repo_dir
from mlops_features.retrain import retrain_changed
from mlops_features.store import apply_repo, open_store

logger = logging.getLogger(__name__)

LEAKAGE_AUC = 0.97
"""A single feature with a ROC AUC this far from chance (either side) against the label is flagged."""


@dataclass
class PlanReport:
    """What :func:`plan_features` found; :meth:`to_markdown` is the job summary."""

    problems: list[str] = field(default_factory=list)
    feast_diff: str = ""
    changes: dict[str, list[str]] = field(default_factory=dict)
    breaking: list[str] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    leakage: list[str] = field(default_factory=list)
    retrain: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No definition problem, no breaking change, no leakage."""
        return not (self.problems or self.breaking or self.leakage)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "problems": self.problems, "changes": self.changes, "breaking": self.breaking,
                "stats": self.stats, "leakage": self.leakage, "retrain": self.retrain, "notes": self.notes,
                "feast_diff": self.feast_diff}

    def to_markdown(self) -> str:
        """The review report as Markdown."""
        out = [f"## Feature plan: {'✅ ready to merge' if self.ok else '❌ blocked'}", ""]
        sections = [("Definition problems", self.problems), ("Breaking changes", self.breaking),
                    ("Leakage", self.leakage)]
        for title, items in sections:
            out += [f"### {title}", *([f"- {i}" for i in items] or ["- none"]), ""]
        out += ["### Schema and type changes"]
        out += [f"- **{name}**: {'; '.join(items)}" for name, items in sorted(self.changes.items())] or ["- none"]
        out += ["", "### New or changed features on the sample data", ""]
        if self.stats:
            cols = ["feature", "view", "status", "rows", "nulls", "min", "max", "mean", "p50", "p99", "psi_vs_before"]
            out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(_fmt(s.get(c)) for c in cols) + " |" for s in self.stats]
        else:
            out += ["none"]
        out += ["", "### Quick retrain against the champion (sample data, information)", ""]
        if self.retrain:
            cols = ["service", "champion_service", "train_rows", "test_rows", "auc", "champion_auc", "delta_auc"]
            out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in self.retrain]
        else:
            out += ["none (no new or changed FeatureService)"]
        out += ["", "### Feast registry diff (`feast plan`)", "", "```", self.feast_diff.strip() or "(none)", "```"]
        if self.notes:
            out += ["", "### Notes", *[f"- {n}" for n in self.notes]]
        return "\n".join(out) + "\n"


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def plan_features(features: FeaturesConfig, root: str | Path, *, contract: ContractConfig,
                  tracking: TrackingConfig | None = None, base_repo: str | Path | None = None,
                  model: str | None = None) -> PlanReport:
    """Review the repository against its predecessor (see the module doc).

    Args:
        features: The ``features`` section.
        root: Repo root; the sample data is ``<features.source_dir>/transactions.parquet`` (``mlops features
            ingest`` writes it).
        contract: The model's contract: the label the leakage check and the quick retrain read, the record id,
            entity keys and request fields of the quick retrain's rows.
        tracking: Where registered models record their FeatureService (skipped when ``None``).
        base_repo: A copy of the base revision's ``feature_repo/``; default: compare with the configured registry.
        model: Registered model name whose versions' FeatureServices must not change.
    """
    root = Path(root)
    report = PlanReport()
    try:
        repo = load_repo(features, root)
    except FeatureStoreError as exc:
        report.problems.append(str(exc))
        return report
    files = object_files(repo_dir(features, root))
    report.problems += definition_problems(repo, files)
    before_cfg = _predecessor(features, root, base_repo, report)
    before = open_store(before_cfg, root) if before_cfg is not None else None
    report.feast_diff = _feast_diff(features, root, repo)
    old_views = {v.name: v for v in before.list_feature_views()} if before is not None else {}
    old_services = {s.name: s for s in before.list_feature_services()} if before is not None else {}
    new_views = {v.name: v for v in repo.feature_views}
    changed = _schema_changes(old_views, new_views, report)
    if tracking is not None and model:
        _breaking(tracking, root, model, old_services, repo, changed, report)
    raw = _sample(features, root, report)
    if raw is not None:
        store = open_store(features, root)
        for name in sorted(changed):
            view = new_views.get(name)
            if view is not None and getattr(view, "feature_transformation", None) is None:
                _check_source_columns(store, view, report, files)
            if view is None or getattr(view, "feature_transformation", None) is None:
                continue
            _stats_and_leakage(store, view, old_views.get(name), raw, changed[name], report, files, contract.label)
        if not report.problems:
            rows, notes = retrain_changed(features, root, tracking, model, repo, before, old_services, changed, raw,
                                          contract)
            report.retrain += rows
            report.notes += notes
    if base_repo is not None:
        shutil.rmtree(root / ".mlops" / "plan", ignore_errors=True)
    return report


def _check_source_columns(store: Any, view: Any, report: PlanReport, files: dict[str, str]) -> None:
    """A view without a udf reads its features straight from its source: each must be a column there."""
    import pyarrow.parquet as pq

    path = source_path(store, view)
    if not path.is_file():
        report.problems.append(f"{where(files, view.name)}: its source {view.batch_source.name!r} reads "
                               f"{str(path)!r}, which does not exist")
        return
    columns = pq.read_schema(path).names
    unknown = [f.name for f in view.features if f.name not in columns]
    if unknown:
        report.problems.append(f"{where(files, view.name)}: reads column(s) {unknown!r} that its source "
                               f"{view.batch_source.name!r} does not have (it has {sorted(columns)!r})")


def _predecessor(features: FeaturesConfig, root: Path, base_repo: str | Path | None,
                 report: PlanReport) -> FeaturesConfig | None:
    if base_repo is None:
        return features
    target = root / ".mlops" / "plan" / "feature_repo"
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(base_repo, target, ignore=shutil.ignore_patterns("__pycache__"))
    # Sources are relative to the repository ("../data/..."): a sibling folder of the same depth reads the same data.
    sibling = root / ".feature_repo_base"
    shutil.rmtree(sibling, ignore_errors=True)
    shutil.move(str(target), sibling)
    cfg = features.model_copy(update={"repo_path": sibling.name, "registry": ".mlops/plan/registry.db",
                                      "registry_type": "file", "online_store": "sqlite",
                                      "online_store_path": ".mlops/plan/online.db"})
    (sibling / "feature_store.yaml").write_text(
        f"project: {features.feast_project}\nprovider: local\nregistry: ../.mlops/plan/registry.db\n"
        "online_store:\n  type: sqlite\n  path: ../.mlops/plan/online.db\nentity_key_serialization_version: 3\n")
    try:
        apply_repo(cfg, root)
    except FeatureStoreError as exc:
        report.notes.append(f"the base revision does not apply ({exc}); everything counts as new")
        return None
    finally:
        shutil.rmtree(sibling, ignore_errors=True)
    return cfg.model_copy(update={"repo_path": features.repo_path})


def _feast_diff(features: FeaturesConfig, root: Path, repo: Any) -> str:
    store = open_store(features, root)
    try:
        with contextlib.redirect_stdout(io.StringIO()), in_repo(features, root):
            registry_diff, infra_diff, _ = store.plan(repo)
        _drop_source_meta_diffs(registry_diff)
        text = registry_diff.to_string() + "\n" + infra_diff.to_string()
        return re.sub(r"\x1b\[[0-9;]*m", "", text)  # Feast colours its diff for a terminal
    except Exception as exc:  # Feast 0.67's diff fails on a BatchFeatureView whose udf changed
        return f"feast plan failed ({type(exc).__name__}: {exc}); see the schema changes above"


def _drop_source_meta_diffs(registry_diff: Any) -> None:
    """Feast 0.67 lists a materialized view's source as updated when only its ``meta`` timestamps differ (the view
    counts its materialization intervals in equality, then diffs every field): drop those, keep real changes."""
    from feast.diff.registry_diff import TransitionType

    for diff in registry_diff.feast_object_diffs:
        kept = []
        for prop in diff.feast_object_property_diffs:
            if prop.property_name in ("batch_source", "stream_source") and hasattr(prop.val_existing, "meta"):
                a, b = type(prop.val_existing)(), type(prop.val_declared)()
                a.CopyFrom(prop.val_existing)
                b.CopyFrom(prop.val_declared)
                a.ClearField("meta")
                b.ClearField("meta")
                if a == b:
                    continue
            kept.append(prop)
        diff.feast_object_property_diffs = kept
        if not kept and diff.transition_type == TransitionType.UPDATE:
            diff.transition_type = TransitionType.UNCHANGED


def _spec(view: Any) -> dict[str, Any]:
    transform = getattr(view, "feature_transformation", None)
    return {"features": {f.name: str(f.dtype) for f in view.features},
            "udf": getattr(transform, "udf_string", None), "ttl": view.ttl, "entities": sorted(view.entities),
            "source": getattr(view.batch_source, "path", None)}


def _schema_changes(old: dict[str, Any], new: dict[str, Any], report: PlanReport) -> dict[str, dict[str, str]]:
    """``{view: {feature: "new" | "changed"}}`` for views added or changed; fills ``report.changes``."""
    changed: dict[str, dict[str, str]] = {}
    for name in sorted(set(old) | set(new)):
        if name not in new:
            report.changes[name] = ["view removed"]
            continue
        b = _spec(new[name])
        if name not in old:
            report.changes[name] = [f"new view: {', '.join(f'{k} ({t})' for k, t in b['features'].items())}"]
            changed[name] = dict.fromkeys(b["features"], "new")
            continue
        a, items, feats = _spec(old[name]), [], {}
        for f in sorted(set(a["features"]) | set(b["features"])):
            if f not in b["features"]:
                items.append(f"feature {f} removed")
            elif f not in a["features"]:
                items.append(f"feature {f} added ({b['features'][f]})")
                feats[f] = "new"
            elif a["features"][f] != b["features"][f]:
                items.append(f"feature {f}: {a['features'][f]} → {b['features'][f]}")
                feats[f] = "changed"
        for key in ("udf", "ttl", "entities", "source"):
            if a[key] != b[key]:
                items.append(f"{key} changed" + (f": {a[key]} → {b[key]}" if key != "udf" else ""))
                if key in ("udf", "ttl", "source"):
                    feats.update({f: feats.get(f, "changed") for f in b["features"]})
        if items:
            report.changes[name] = items
            changed[name] = feats
    return changed


def _breaking(tracking: TrackingConfig, root: Path, model: str, old_services: dict[str, Any], repo: Any,
              changed: dict[str, dict[str, str]], report: PlanReport) -> None:
    try:
        from mlops_core import mlflow_client

        client = mlflow_client(tracking, root)
        name = f"{tracking.registered_model_prefix}{model}"
        used = {v.tags.get("mlops.feature_service") for v in client.search_model_versions(f"name='{name}'")}
    except Exception as exc:  # an unreachable or empty registry: say so, do not guess
        report.notes.append(f"could not list registered model versions of {model!r} ({type(exc).__name__}): "
                            "the breaking-change check did not run")
        return
    new_services = {s.name: s for s in repo.feature_services}
    for service in sorted(s for s in used if s):
        if service not in new_services:
            if service in old_services:
                report.breaking.append(f"FeatureService {service!r} is used by a registered {model!r} version and "
                                       "was removed")
            continue
        before = old_services.get(service)
        now = [(p.name, [(f.name, str(f.dtype)) for f in p.features])
               for p in new_services[service].feature_view_projections]
        if before is not None:
            was = [(p.name, [(f.name, str(f.dtype)) for f in p.features]) for p in before.feature_view_projections]
            if was != now:
                report.breaking.append(f"FeatureService {service!r} (used by a registered {model!r} version) changed "
                                       "its features: add a new version (e.g. a new FeatureService) instead")
        touched = sorted(p for p, _ in now if p in changed and any(s == "changed" for s in changed[p].values()))
        if touched:
            report.breaking.append(f"FeatureService {service!r} (used by a registered {model!r} version) reads "
                                   f"changed view(s) {touched}: its values would change under a served model")


def _sample(features: FeaturesConfig, root: Path, report: PlanReport) -> pd.DataFrame | None:
    path = root / features.source_dir / "transactions.parquet"
    if not path.is_file():
        report.notes.append(f"no sample data at {str(path)!r} (run `mlops data generate`, `mlops data validate`, "
                            "`mlops features ingest`): statistics and leakage checks skipped")
        return None
    df = pd.read_parquet(path)
    df["event_timestamp"] = pd.to_datetime(df["event_timestamp"], utc=True)
    return df


def _stats_and_leakage(store: Any, view: Any, old: Any, raw: pd.DataFrame, feats: dict[str, str],
                       report: PlanReport, files: dict[str, str], label: str) -> None:
    from mlops_model import statistics

    try:
        rows = compute_view(store, view, raw)
    except FeatureStoreError as exc:
        report.problems.append(f"{where(files, view.name)}: {exc}")
        return
    before = None
    if old is not None and getattr(old, "feature_transformation", None) is not None:
        with contextlib.suppress(FeatureStoreError):
            before = compute_view(store, old, raw)
    key, ts = view.entity_columns[0].name, view.batch_source.timestamp_field
    for name, status in sorted(feats.items()):
        values = pd.to_numeric(rows[name], errors="coerce")
        stat: dict[str, Any] = {"feature": name, "view": view.name, "status": status, "rows": len(values),
                                "nulls": int(values.isna().sum())}
        if values.notna().any():
            q = values.quantile([0.5, 0.99])
            stat.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()),
                        p50=float(q.iloc[0]), p99=float(q.iloc[1]))
        if before is not None and name in before.columns:
            ref, cur = statistics.quantile_bin_counts(pd.to_numeric(before[name]).dropna().to_numpy(),
                                           values.dropna().to_numpy())
            stat["psi_vs_before"] = float(statistics.psi(ref, cur))
        report.stats.append(stat)
    # Leakage 1: values up to a cut must not change when rows after the cut are removed.
    cut = raw["event_timestamp"].quantile(0.5)
    early = compute_view(store, view, raw[raw["event_timestamp"] <= cut])
    full = rows[pd.to_datetime(rows[ts], utc=True) <= cut]
    merged = full.merge(early, on=[key, ts], suffixes=("", "__early"))
    for name in feats:
        a, b = merged[name].to_numpy(dtype=float), merged[f"{name}__early"].to_numpy(dtype=float)
        if not np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True):
            report.leakage.append(f"{where(files, view.name)}: feature {name!r} at an event changes when rows stamped "
                                  "after it are removed: it uses data from the future")
    # Leakage 2: known just before each transaction, does it give the label away?
    if label not in raw.columns or key not in raw.columns:
        return
    tx = raw[[key, "event_timestamp", label]].sort_values("event_timestamp")
    tx = tx.assign(event_timestamp=tx["event_timestamp"].dt.as_unit("us"))
    feat = rows.assign(**{ts: pd.to_datetime(rows[ts], utc=True).dt.as_unit("us")}).sort_values(ts)
    joined = pd.merge_asof(tx, feat[[key, ts, *feats]].rename(columns={ts: "_feature_ts"}), left_on="event_timestamp",
                           right_on="_feature_ts", by=key, allow_exact_matches=False)
    labels = joined[label].to_numpy()
    if labels.min() == labels.max():
        return
    for name in feats:
        score = pd.to_numeric(joined[name], errors="coerce").fillna(0).to_numpy(dtype=float)
        auc = float(statistics.roc_auc(labels, score))
        if abs(auc - 0.5) >= LEAKAGE_AUC - 0.5:
            report.leakage.append(f"{where(files, view.name)}: feature {name!r} alone predicts the label with ROC "
                                  f"AUC {auc:.3f}: check it does not encode the label")


def base_repo_from_git(root: str | Path, ref: str, repo_path: str, out: str | Path) -> Path:
    """``repo_path`` as of git ``ref`` (``origin/main``) extracted to ``out``; for CI's pull-request reports."""
    import subprocess
    import tarfile

    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", ref, repo_path], capture_output=True,
                             check=False)
    if archive.returncode != 0:
        raise FeatureStoreError(f"cannot read {repo_path!r} at git ref {ref!r}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(out, filter="data")
    return out / repo_path
