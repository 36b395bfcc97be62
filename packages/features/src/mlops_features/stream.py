"""Freshness: per-transaction online updates from a Redis Stream, and the freshness of every feature view.

Why a stream consumer and not Feast's push API fed by serving: the serving path sees only the transactions it
scores (not declined, offline or other channels), a push per request would put a windowed recompute and a write
on the prediction's p99, and a crash between predict and push loses the update. A consumer group on a broker
(Redis Streams here, the Redis the online store already runs on; Kafka in a larger deployment) gets every
transaction once, acknowledges after the online write, and replays what it had not acknowledged after a restart.

The updater runs each *streamable* view's own ``udf`` (a view tagged ``mlops.stream: "true"``: its value for
an entity depends only on that entity's rows) over the entity's recent history plus the new rows, and writes the
latest row with Feast's ``write_to_online_store``: the same function as the batch path, so the online value
equals the offline one. Views not tagged (the merchant risk: daily, labelled, a global base rate) stay with the
scheduled materialization.

Freshness of a view = now − the newest event time the online store reflects: the end of its last
materialization (registry) or the last event the updater wrote (a Redis hash), whichever is later; exported as
``feast_feature_freshness_seconds{project, feature_view}`` and alerted on against ``features.freshness_slo_s``.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_config import FeaturesConfig
from mlops_features.backfill import compute_view, source_path
from mlops_features.errors import FeatureStoreError
from mlops_features.repo import transformed_views
from mlops_features.store import open_store

logger = logging.getLogger(__name__)

STREAM_TAG = "mlops.stream"
"""Tag of a feature view the stream updater keeps fresh per event (value ``"true"``)."""


def watermark_key(features: FeaturesConfig) -> str:
    """Redis hash ``{view: newest event time written by the updater (epoch s)}``."""
    return f"mlops:freshness:{features.feast_project}"


def _redis(features: FeaturesConfig) -> Any:
    import redis

    from mlops_features.online_redis import password_from_env, username_from_env

    class _Cfg:
        password_env = features.redis_password_env
        username_env = features.redis_username_env

    return redis.Redis.from_url(features.redis_url, password=password_from_env(_Cfg()),
                                username=username_from_env(_Cfg()), socket_timeout=features.redis_timeout_s * 10)


def publish_transactions(features: FeaturesConfig, rows: pd.DataFrame, client: Any | None = None) -> list[str]:
    """XADD each transaction (one JSON field ``tx``) to ``features.stream_key``; returns the entry ids."""
    client = client or _redis(features)
    ids = []
    for record in rows.to_dict("records"):
        payload = {k: (v.isoformat() if isinstance(v, pd.Timestamp | datetime) else v) for k, v in record.items()}
        ids.append(client.xadd(features.stream_key, {"tx": json.dumps(payload, default=float)}).decode())
    return ids


class StreamUpdater:
    """Consumer of ``features.stream_key`` (group ``group``) that keeps the streamable views fresh per event.

    Args:
        features: The ``features`` section (Redis online store; the stream lives on the same Redis).
        root: Repo root the section's paths are relative to.
        group: Consumer group; created at the stream's end ("$") when missing.
        consumer: This consumer's name inside the group.
    """

    def __init__(self, features: FeaturesConfig, root: str | Path, *, group: str = "mlops-features",
                 consumer: str = "updater-0") -> None:
        import redis

        self.features, self.group, self.consumer = features, group, consumer
        self.store = open_store(features, root)
        self.views = [v for v in transformed_views(self.store) if (v.tags or {}).get(STREAM_TAG) == "true"]
        if not self.views:
            raise FeatureStoreError(f"no feature view is tagged {STREAM_TAG}='true' in project "
                                    f"{features.feast_project!r}: nothing for the stream updater to keep fresh")
        self.lookback = max(pd.Timedelta(v.ttl) for v in self.views)
        sources = {source_path(self.store, v) for v in self.views}
        self.history: pd.DataFrame = self._trim(pd.concat([pd.read_parquet(p) for p in sources], ignore_index=True))
        self.client = _redis(features)
        try:
            self.client.xgroup_create(features.stream_key, group, id="$", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _trim(self, df: pd.DataFrame) -> pd.DataFrame:
        df = df.assign(event_timestamp=pd.to_datetime(df["event_timestamp"], utc=True))
        return df[df["event_timestamp"] >= df["event_timestamp"].max() - self.lookback].reset_index(drop=True)

    def process(self, *, block_ms: int = 1000, count: int = 1000) -> int:
        """Read new entries (waiting up to ``block_ms``), update the online store, acknowledge; returns entries."""
        got = self.client.xreadgroup(self.group, self.consumer, {self.features.stream_key: ">"}, count=count,
                                     block=block_ms)
        entries = [e for _, batch in (got or []) for e in batch]
        if not entries:
            return 0
        new = pd.DataFrame([json.loads(fields[b"tx"]) for _, fields in entries])
        for col in ("event_timestamp", "created"):
            if col in new:
                new[col] = pd.to_datetime(new[col], utc=True)
        self.history = self._trim(pd.concat([self.history, new.astype(self.history.dtypes.to_dict(),
                                                                      errors="ignore")], ignore_index=True))
        marks = {}
        for view in self.views:
            key = view.entity_columns[0].name
            touched = self.history[self.history[key].isin(set(new[key]))]
            rows = compute_view(self.store, view, touched)
            ts = view.batch_source.timestamp_field
            latest = rows.sort_values(ts, kind="stable").groupby(key, sort=False).tail(1)
            self.store.write_to_online_store(view.name, latest, transform_on_write=False)
            marks[view.name] = float(pd.to_datetime(new[ts], utc=True).max().timestamp())
        pipe = self.client.pipeline()
        pipe.xack(self.features.stream_key, self.group, *[eid for eid, _ in entries])
        for name, mark in marks.items():
            pipe.eval("local c = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') "
                      "if tonumber(ARGV[2]) > c then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end",
                      1, watermark_key(self.features), name, repr(mark))
        pipe.execute()
        return len(entries)

    def run(self, *, stop_after_s: float | None = None) -> None:
        """Process until interrupted (or for ``stop_after_s``)."""
        t0 = time.monotonic()
        while stop_after_s is None or time.monotonic() - t0 < stop_after_s:
            n = self.process()
            if n:
                logger.info("stream updater: %d transactions applied", n)


def freshness(features: FeaturesConfig, root: str | Path, *, now: datetime | None = None) -> dict[str, float]:
    """Seconds since the newest event each feature view's online values reflect (``inf``: never loaded)."""
    now = now or datetime.now(UTC)
    store = open_store(features, root)
    marks: dict[str, float] = {}
    if features.online_store == "redis":
        raw = _redis(features).hgetall(watermark_key(features))
        marks = {k.decode(): float(v) for k, v in raw.items()}
    out = {}
    for view in store.list_feature_views():
        ends = [end.timestamp() for _, end in view.materialization_intervals]
        newest = max([*ends, marks.get(view.name, float("-inf"))])
        out[view.name] = now.timestamp() - newest if newest != float("-inf") else float("inf")
    return out


def freshness_metrics_text(features: FeaturesConfig, root: str | Path, *, now: datetime | None = None) -> str:
    """The Prometheus exposition of :func:`freshness` (gauge ``feast_feature_freshness_seconds``)."""
    lines = ["# HELP feast_feature_freshness_seconds Seconds since the newest event the online store reflects.",
             "# TYPE feast_feature_freshness_seconds gauge"]
    for name, seconds in sorted(freshness(features, root, now=now).items()):
        value = "+Inf" if seconds == float("inf") else repr(round(seconds, 3))
        lines.append(f'feast_feature_freshness_seconds{{project="{features.feast_project}",feature_view="{name}"}} '
                     f"{value}")
    return "\n".join(lines) + "\n"
