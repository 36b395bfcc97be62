"""Training/serving skew replay: what was served, row by row, against the offline store at the same instant.

A drift report compares distributions; it cannot say that *this* request saw a different feature value than
training would have. The replay takes a sample of the prediction log (which holds every served feature),
asks Feast's offline store for the same entities at the same event timestamps (the point-in-time
``get_historical_features`` that builds training sets, via ``mlops_features.historical_features``) and
compares value by value. Each mismatch gets a cause, from the entity's offline history (the feature view's
source table):

- ``missing_online``: every feature of that entity's view was served at its default (the online store did
  not know the entity) while the offline store has values;
- ``stale_ttl``: the offline store has no value inside the view's TTL (training sees the default) but the
  online store still served the entity's last, expired value;
- ``behind_materialization``: the served value is an *older* offline value of the entity: newer rows were
  ingested but not materialized to the online store;
- ``newer_than_request``: the served value is one the offline store stamps *after* the request (a row
  materialized ahead of its event time, e.g. a daily aggregate stamped at the day's end): training at that
  instant sees the older value;
- ``transformation``: the served value matches no offline value of the entity: the online path computed it
  differently from the offline one.

Each row is replayed at the instant its lookup counted the views' ``ttl`` from: the request's time, or
``features.online_ttl_as_of`` where the lookup pins it (served at the pinned instant, replayed at it too).

Degraded rows (served on defaults during a store outage) are not replayed: their defaults are known.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from mlops_config import FeaturesConfig
from mlops_monitoring.errors import MonitoringError

logger = logging.getLogger(__name__)

Cause = Literal["missing_online", "stale_ttl", "behind_materialization", "newer_than_request", "transformation"]
CAUSES: tuple[Cause, ...] = ("missing_online", "stale_ttl", "behind_materialization", "newer_than_request",
                             "transformation")
ROW_KEY = "_skew_row"


@dataclass(frozen=True)
class FeatureSkew:
    """One feature's replay result."""

    compared: int
    mismatches: int
    causes: dict[str, int]

    @property
    def mismatch_rate(self) -> float:
        return self.mismatches / self.compared if self.compared else 0.0


@dataclass(frozen=True)
class SkewReport:
    """Per-feature mismatch rates and causes, with a few examples to look at."""

    model: str
    rows_sampled: int
    rows_compared: int
    rows_degraded: int
    features: dict[str, FeatureSkew]
    examples: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def mismatch_rate(self) -> float:
        """Share of (row, feature) values that differ, over all features."""
        compared = sum(f.compared for f in self.features.values())
        return sum(f.mismatches for f in self.features.values()) / compared if compared else 0.0

    def causes(self) -> dict[str, int]:
        """Mismatches per cause, over all features."""
        out: dict[str, int] = dict.fromkeys(CAUSES, 0)
        for f in self.features.values():
            for cause, n in f.causes.items():
                out[cause] += n
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"model": self.model, "rows_sampled": self.rows_sampled, "rows_compared": self.rows_compared,
                "rows_degraded": self.rows_degraded, "mismatch_rate": self.mismatch_rate, "causes": self.causes(),
                "features": {n: {"compared": f.compared, "mismatches": f.mismatches,
                                 "mismatch_rate": f.mismatch_rate, "causes": f.causes}
                             for n, f in self.features.items()},
                "examples": list(self.examples)}


@dataclass(frozen=True)
class _View:
    name: str
    join_key: str
    features: tuple[str, ...]
    ttl: pd.Timedelta | None
    history: pd.DataFrame
    """The view's offline rows: join key, ``event_timestamp``, features (sorted by time)."""


@dataclass(frozen=True)
class _OnDemand:
    features: tuple[str, ...]
    """Features the service's on-demand views compute per request (nothing stored to look up)."""
    request: tuple[str, ...]
    """Request fields they read (logged with each prediction; the replay passes them to the offline join)."""


def _views(store: Any, service_name: str, offline: Any) -> tuple[list[_View], _OnDemand]:
    """``offline``: ``views -> views`` reading each view's offline rows (``mlops_features.offline_views``)."""
    service = store.get_feature_service(service_name)
    on_demand = {v.name: v for v in store.list_on_demand_feature_views()}
    views, computed, request = [], [], []
    for proj in service.feature_view_projections:
        if proj.name in on_demand:
            computed += [f.name for f in proj.features]
            request += [n for n in on_demand[proj.name].get_request_data_schema() if n not in request]
            continue
        view = offline([store.get_feature_view(proj.name)])[0]
        keys = [c.name for c in view.entity_columns]
        if len(keys) != 1:
            raise MonitoringError(f"skew replay supports views with one join key; {view.name!r} has {keys!r}")
        path = getattr(view.batch_source, "path", None)
        if not path:
            raise MonitoringError(f"view {view.name!r} has no file source ({type(view.batch_source).__name__}): "
                                  f"the replay reads each entity's offline history from a file source")
        names = tuple(f.name for f in proj.features)
        ts_col = view.batch_source.timestamp_field or "event_timestamp"
        history = pd.read_parquet(path, columns=[keys[0], ts_col, *names]).rename(columns={ts_col: "event_timestamp"})
        history["event_timestamp"] = pd.to_datetime(history["event_timestamp"], utc=True)
        ttl = pd.Timedelta(view.ttl) if view.ttl and view.ttl.total_seconds() > 0 else None
        views.append(_View(view.name, keys[0], names, ttl, history.sort_values("event_timestamp", kind="stable")))
    return views, _OnDemand(tuple(computed), tuple(request))


def _same(a: Any, b: Any) -> bool:
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _cause(view: _View, feature: str, served: Any, served_row: Mapping[str, Any], offline: Any,
           defaults: Mapping[str, Any], ts: pd.Timestamp) -> Cause:
    if all(_same(served_row[f], defaults[f]) for f in view.features) and not _missing(offline):
        return "missing_online"
    entity = view.history[view.history[view.join_key].astype(str) == str(served_row[view.join_key])]
    rows = entity[entity["event_timestamp"] <= ts]
    if _missing(offline) and len(rows) and _same(served, rows[feature].iloc[-1]):
        return "stale_ttl"
    older = rows[feature].iloc[:-1] if len(rows) else rows[feature]
    if any(_same(served, v) for v in older):
        return "behind_materialization"
    if any(_same(served, v) for v in entity.loc[entity["event_timestamp"] > ts, feature]):
        return "newer_than_request"
    return "transformation"


def replay_skew(features: FeaturesConfig, root: str | Path, log: pd.DataFrame, *, model: str,
                sample: int = 1000, seed: int = 0, max_examples: int = 20) -> SkewReport:
    """Replay up to ``sample`` logged predictions against the offline store and compare every feature.

    Args:
        features: The ``features`` section (store, FeatureService) the served model read.
        root: Repo root the section's paths are relative to.
        log: Prediction-log rows (contract columns: ``ts``, entity keys, feature columns, ``degraded``).
        model: Model name, for the report and metrics.
        sample: Rows to replay (a seeded random sample when the log holds more).
        seed: Sampling seed.
        max_examples: Mismatches kept as examples in the report.
    """
    from mlops_features import historical_features, offline_views, open_store, service_defaults

    store = open_store(features, root)
    views, on_demand = _views(store, features.require_feature_service(), lambda vs: offline_views(features, root, vs))
    names = [n for v in views for n in v.features] + list(on_demand.features)
    needed = ["ts", *(v.join_key for v in views), *on_demand.request, *names]
    lacking = [c for c in needed if c not in log.columns]
    if lacking:
        raise MonitoringError(f"prediction log lacks {lacking!r} for a skew replay; columns: {sorted(log.columns)}")
    rows = log.sample(n=sample, random_state=seed) if len(log) > sample else log
    degraded = rows["degraded"].astype(bool) if "degraded" in rows.columns else pd.Series(False, index=rows.index)
    rows = rows[~degraded].reset_index(drop=True)
    defaults = service_defaults(store, features.require_feature_service())  # what serving answers for no value
    feature_skew: dict[str, dict[str, Any]] = {n: {"compared": 0, "mismatches": 0, "causes": {}} for n in names}
    examples: list[dict[str, Any]] = []
    if len(rows):
        entity_df = rows[[v.join_key for v in views]].astype(str).copy()
        for request_field in on_demand.request:  # on-demand views recompute from the logged request
            entity_df[request_field] = rows[request_field].to_numpy()
        # the instant each row was looked up at: the lookup's pinned ``features.online_ttl_as_of`` when set (the
        # local profile and the rehearsal serve fixed sample data as of the day after it), else the request's time
        pinned = features.online_ttl_as_of
        entity_df["event_timestamp"] = (pd.Series(pd.to_datetime(pinned, utc=True), index=rows.index)
                                        if pinned is not None else pd.to_datetime(rows["ts"], utc=True))
        entity_df[ROW_KEY] = np.arange(len(rows))
        offline = historical_features(features, root, entity_df).set_index(ROW_KEY).sort_index()
        if len(offline) != len(rows):
            raise MonitoringError(f"point-in-time join returned {len(offline)} rows for {len(rows)}: the offline "
                                  f"store {features.offline_store!r} drops rows; use offline_store: duckdb")
        for i, served_row in rows.iterrows():
            ts = pd.Timestamp(entity_df["event_timestamp"].iloc[i])
            row_causes: list[Cause] = []
            for view in views:
                for name in view.features:
                    served, off = served_row[name], offline.at[i, name]
                    expected = defaults[name] if _missing(off) else off  # training fills gaps with the defaults
                    entry = feature_skew[name]
                    entry["compared"] += 1
                    if _same(served, expected):
                        continue
                    cause = _cause(view, name, served, served_row, off, defaults, ts)
                    row_causes.append(cause)
                    entry["mismatches"] += 1
                    entry["causes"][cause] = entry["causes"].get(cause, 0) + 1
                    if len(examples) < max_examples:
                        examples.append({"request_id": served_row.get("request_id"), "ts": ts.isoformat(),
                                         view.join_key: str(served_row[view.join_key]), "feature": name,
                                         "served": _plain(served), "offline": _plain(off), "cause": cause})
            for name in on_demand.features:
                # computed from the request and stored features: a stored input's skew explains it; with every
                # stored input equal, the function itself differs between serving and training
                served, off = served_row[name], offline.at[i, name]
                expected = defaults[name] if _missing(off) else off
                entry = feature_skew[name]
                entry["compared"] += 1
                if _same(served, expected):
                    continue
                cause = row_causes[0] if row_causes else "transformation"
                entry["mismatches"] += 1
                entry["causes"][cause] = entry["causes"].get(cause, 0) + 1
                if len(examples) < max_examples:
                    examples.append({"request_id": served_row.get("request_id"), "ts": ts.isoformat(),
                                     "feature": name, "served": _plain(served), "offline": _plain(off),
                                     "cause": cause})
    report = SkewReport(model=model, rows_sampled=int(len(rows) + degraded.sum()), rows_compared=len(rows),
                        rows_degraded=int(degraded.sum()),
                        features={n: FeatureSkew(**e) for n, e in feature_skew.items()}, examples=tuple(examples))
    logger.info("skew replay of %s: %d rows, mismatch rate %.4f, causes %s", model, report.rows_compared,
                report.mismatch_rate, report.causes())
    return report


def _plain(v: Any) -> Any:
    if _missing(v):
        return None
    return v.item() if hasattr(v, "item") else v


def skew_metrics_text(report: SkewReport) -> str:
    """Prometheus text exposition of a replay."""
    return generate_latest(skew_registry(report)).decode()


def skew_registry(report: SkewReport) -> CollectorRegistry:
    """A fresh registry with one replay's gauges (the monitor writes it beside its drift metrics)."""
    registry = CollectorRegistry()
    rate = Gauge("mlops_skew_mismatch_rate", "Share of replayed values that differ from the offline store",
                 ["model", "feature"], registry=registry)
    count = Gauge("mlops_skew_mismatches", "Replayed values that differ, by cause", ["model", "feature", "cause"],
                  registry=registry)
    for name, f in report.features.items():
        rate.labels(report.model, name).set(f.mismatch_rate)
        for cause in CAUSES:
            count.labels(report.model, name, cause).set(f.causes.get(cause, 0))
    rows = Gauge("mlops_skew_rows", "Prediction-log rows in the last replay", ["model", "kind"], registry=registry)
    rows.labels(report.model, "compared").set(report.rows_compared)
    rows.labels(report.model, "degraded").set(report.rows_degraded)
    Gauge("mlops_skew_mismatch_rate_total", "Share of all replayed values that differ", ["model"],
          registry=registry).labels(report.model).set(report.mismatch_rate)
    return registry
