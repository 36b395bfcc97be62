"""The review report's quick retrain: does a changed FeatureService beat the champion's on the sample data?

For a FeatureService that is new or changed in the pull request and the FeatureService the champion model
serves, the same short training on the same sample data: each view's own udf over the sample transactions
(:func:`mlops_features.backfill.compute_view`), joined to every labelled transaction strictly before it and
inside the view's TTL (the training set's point-in-time rule), on-demand views run on the joined rows with the
transaction's own request fields, nulls replaced by each feature's default; the model's encoder, an L2 logistic
regression fitted on the first 70 % of the transactions by time and scored (ROC AUC) on the rest. The delta is
information for the reviewer, not a gate: the train workflow retrains the real model and gates every merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import ContractConfig, FeaturesConfig, TrackingConfig
from mlops_features.backfill import compute_view
from mlops_features.repo import feature_defaults_of

TRAIN_FRACTION = 0.7
"""Share of the sample's transactions (earliest first) the quick model is fitted on; the rest scores it."""


@dataclass(frozen=True)
class Definitions:
    """Feature services and views by name, from a repository (``RepoContents``) or a registry (``FeatureStore``)."""

    services: dict[str, Any]
    views: dict[str, Any]

    @classmethod
    def of_repo(cls, repo: Any) -> Definitions:
        return cls({s.name: s for s in repo.feature_services},
                   {v.name: v for v in [*repo.feature_views, *repo.on_demand_feature_views]})

    @classmethod
    def of_store(cls, store: Any) -> Definitions:
        return cls({s.name: s for s in store.list_feature_services()},
                   {v.name: v for v in [*store.list_feature_views(), *store.list_on_demand_feature_views()]})


def service_frame(defs: Definitions, service: str, raw: pd.DataFrame, contract: ContractConfig
                  ) -> tuple[pd.DataFrame, list[str]]:
    """``(rows, feature names)``: one row per labelled record of ``raw`` with the service's features as known
    strictly before it (see the module doc), the ``contract``'s ids, request fields and label, sorted by event time."""
    rid = contract.record_id
    tx = raw.sort_values(["event_timestamp", rid], kind="stable").reset_index(drop=True)
    tx = tx.assign(event_timestamp=pd.to_datetime(tx["event_timestamp"], utc=True).dt.as_unit("us"))
    out = tx[[rid, "event_timestamp", *contract.entity_keys, *contract.request_fields, contract.label]].copy()
    names: list[str] = []
    views = []
    on_demand = []
    for proj in defs.services[service].feature_view_projections:
        view = defs.views[proj.name]
        wanted = [f.name for f in proj.features]
        names += wanted
        views.append(view)
        if hasattr(view, "source_request_sources"):
            on_demand.append((view, wanted))
            continue
        out = _join(out, view, compute_view(None, view, raw), wanted)
    for view, wanted in on_demand:  # their inputs are stored features: join any the service does not serve
        for proj in view.source_feature_view_projections.values():
            need = [f.name for f in proj.features if f.name not in out.columns]
            if need:
                source = defs.views[proj.name]
                out = _join(out, source, compute_view(None, source, raw), need)
        computed = view.feature_transformation.udf(out.copy())
        out[wanted] = computed[wanted].to_numpy()
    defaults = feature_defaults_of(views)
    out = out.fillna({n: defaults[n] for n in names if n in defaults})
    return out, names


def _join(out: pd.DataFrame, view: Any, rows: pd.DataFrame, wanted: list[str]) -> pd.DataFrame:
    key, ts = view.entity_columns[0].name, view.batch_source.timestamp_field
    feats = rows[[key, ts, *wanted]].rename(columns={ts: "_feature_ts"})
    feats = feats.assign(_feature_ts=pd.to_datetime(feats["_feature_ts"], utc=True).dt.as_unit("us"))
    joined = pd.merge_asof(out.reset_index(names="_order"), feats.sort_values("_feature_ts"), left_on="event_timestamp",
                           right_on="_feature_ts", by=key, allow_exact_matches=False,
                           tolerance=pd.Timedelta(view.ttl) if view.ttl else None)
    return joined.sort_values("_order").drop(columns=["_order", "_feature_ts"]).reset_index(drop=True)


def quick_auc(frame: pd.DataFrame, names: list[str], contract: ContractConfig, *, seed: int = 0) -> dict[str, Any]:
    """ROC AUC on the later ``1 - TRAIN_FRACTION`` of ``frame`` of a logistic regression fitted on the earlier part
    (the ``contract``'s label; its numeric request fields and ``names`` as inputs)."""
    from sklearn.linear_model import LogisticRegression

    from mlops_model import EncoderSpec, statistics

    label = contract.label
    cut = int(len(frame) * TRAIN_FRACTION)
    train, test = frame.iloc[:cut], frame.iloc[cut:]
    result = {"train_rows": len(train), "test_rows": len(test), "auc": math.nan}
    if train[label].nunique() < 2 or test[label].nunique() < 2:
        return result
    encoder = EncoderSpec.fit(train, numeric=[*contract.numeric_fields, *names], contract=contract)
    model = LogisticRegression(C=1.0, max_iter=500, random_state=seed)
    model.fit(encoder.encode_frame(train).astype(np.float64), train[label].to_numpy())
    scores = model.decision_function(encoder.encode_frame(test).astype(np.float64))
    return {**result, "auc": float(statistics.roc_auc(test[label].to_numpy(), scores))}


def quick_retrain(candidate: Definitions, service: str, champion: Definitions, champion_service: str,
                  raw: pd.DataFrame, contract: ContractConfig) -> dict[str, Any]:
    """The quick retrain of ``service`` (as the pull request declares it) against ``champion_service`` (as the
    champion was trained: the predecessor's definitions): both AUCs on the same split and their delta."""
    new = quick_auc(*service_frame(candidate, service, raw, contract), contract)
    old = quick_auc(*service_frame(champion, champion_service, raw, contract), contract)
    return {"service": service, "champion_service": champion_service, "train_rows": new["train_rows"],
            "test_rows": new["test_rows"], "auc": new["auc"], "champion_auc": old["auc"],
            "delta_auc": new["auc"] - old["auc"]}


def champion_service(tracking: TrackingConfig | None, root: Path, model: str | None) -> tuple[str | None, str | None]:
    """``(FeatureService, note)``: what the registered model's ``champion`` version records (tag
    ``mlops.feature_service``), or ``None`` with the reason."""
    if tracking is None or not model:
        return None, None
    try:
        from mlops_core import mlflow_client

        client = mlflow_client(tracking, root)
        version = client.get_model_version_by_alias(f"{tracking.registered_model_prefix}{model}", "champion")
        return (version.tags.get("mlops.feature_service") or None), None
    except Exception as exc:  # no registry or no champion yet: compare with the configured FeatureService
        return None, (f"no champion version of {model!r} found ({type(exc).__name__}): the quick retrain compares "
                      "with the configured FeatureService")


def retrain_changed(features: FeaturesConfig, root: Path, tracking: TrackingConfig | None, model: str | None,
                    repo: Any, before: Any, old_services: dict[str, Any], changed: dict[str, dict[str, str]],
                    raw: pd.DataFrame, contract: ContractConfig) -> tuple[list[dict[str, Any]], list[str]]:
    """``(rows, notes)``: a :func:`quick_retrain` of each new or changed FeatureService of ``repo`` against the
    champion's FeatureService as the predecessor (``before``, a FeatureStore or ``None``) defines it."""
    found, note = champion_service(tracking, root, model)
    notes = [note] if note else []
    champion = found or features.require_feature_service()
    now, was = Definitions.of_repo(repo), Definitions.of_store(before) if before is not None else None
    old = was if was is not None and champion in was.services else now
    if champion not in old.services:
        return [], [*notes, f"quick retrain skipped: the champion's FeatureService {champion!r} is defined neither "
                            "before nor after this change"]

    def shape(service: Any) -> list[tuple[str, list[str]]]:
        return [(p.name, [f.name for f in p.features]) for p in service.feature_view_projections]

    rows = []
    for name, service in sorted(now.services.items()):
        previous = old_services.get(name)
        new_or_changed = previous is None or shape(previous) != shape(service) or any(
            p.name in changed for p in service.feature_view_projections)
        if not new_or_changed or (name == champion and old is now):
            continue
        try:
            rows.append(quick_retrain(now, name, old, champion, raw, contract))
        except Exception as exc:  # information only: say why, never block on it
            notes.append(f"quick retrain of {name!r} failed: {type(exc).__name__}: {exc}")
    return rows, notes
