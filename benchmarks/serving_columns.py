"""Thread CPU per batch of the two column paths on serving's hot path, old against new, in process.

- ``encode``: from the online reader's assembled columns to the encoder's float32 matrix. Old: the reader's
  columns turned into one dict per row (what ``OnlineFeatures._assemble`` returned), the lookup's per-row dicts
  with defaults, the request row merged with its features (``{**row, **feats}``), ``encode_records``. New: the
  lookup's defaults applied per column (``FeatureLookup._found``), the model's columns picked
  (``transformer._model_columns``), ``encode_columns``.
- ``log``: a scored batch's prediction-log rows handed to the writer. Old: ``log_rows`` per request and one
  ``queue.Queue.put_nowait`` per row (the writer's queue before). New: ``batch_log_columns`` and one
  ``PredictionLogWriter.append_columns``.

The encoder is the fraud model's shape (``EncoderSpec.fit`` on sample transactions joined to the repo's window
features); a batch is ``--rows`` requests of one row each, a third of them unknown entities. Old and new are
timed interleaved (``time.thread_time_ns`` over ``--inner`` batches, ``--reps`` times each); medians per batch.
Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import queue
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # the reference model's: this bench encodes fraud
from mlops_model import UNKNOWN_ENTITY, EncoderSpec
from mlops_serving.lookup import FeatureLookup
from mlops_serving.prediction_log import PredictionLogWriter, batch_log_columns, log_rows
from mlops_serving.schema import parse_v1
from mlops_serving.transformer import _model_columns

ROOT = Path(__file__).resolve().parents[1]


def fraud_spec_and_rows(tmp: Path) -> tuple[EncoderSpec, pd.DataFrame]:
    """The spec the train stage fits (sample transactions + the repo's window features) and rows to serve."""
    from mlops_features import generate_transactions

    spec_file = importlib.util.spec_from_file_location("fraud_windows_bench", ROOT / "feature_repo/windows.py")
    assert spec_file is not None and spec_file.loader is not None
    windows = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(windows)
    paths = generate_transactions(tmp, rows=1500, days=2, seed=5, users=80, merchants=20)
    tx = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    users = windows.user_windows_udf(tx).drop(columns=["created"])
    merchants = windows.merchant_risk_udf(tx).drop(columns=["created", "event_timestamp"])
    df = tx.merge(users, on=["user_id", "event_timestamp"], how="left")
    df = df.merge(merchants.groupby("merchant_id").last().reset_index(), on="merchant_id", how="left")
    return EncoderSpec.fit(df.iloc[:1000], contract=FRAUD_CONTRACT), df.iloc[1000:].reset_index(drop=True)


class _Source:
    service_name = "fraud_v1"

    def __init__(self, defaults: dict[str, Any]) -> None:
        self.defaults = defaults

    def get(self, entity_rows: Any) -> list[dict[str, Any]]:  # unused: the benchmark feeds _found directly
        raise NotImplementedError

    def ping(self) -> bool:
        return True


def _reader_columns(spec: EncoderSpec, frame: pd.DataFrame, n: int) -> dict[str, list[Any]]:
    """What the online reader assembles: flags first, then each feature (defaults applied), by column."""
    features = [c.name for c in spec.numeric if c.name != "amount"]
    unknown = [i % 3 == 2 for i in range(n)]
    cols: dict[str, list[Any]] = {"unknown_user": unknown, "unknown_merchant": [False] * n, UNKNOWN_ENTITY: unknown}
    for name in features:
        cols[name] = [None if u else float(v) for u, v in zip(unknown, frame[name].iloc[:n].tolist(), strict=True)]
    return cols


def _requests(frame: pd.DataFrame, n: int) -> list[dict[str, Any]]:
    fields = ["user_id", "merchant_id", "amount", "currency", "category", "country", "device", "channel"]
    return parse_v1({"instances": [{k: frame[k].iloc[i] for k in fields} for i in range(n)]}, n,
                    contract=FRAUD_CONTRACT)


def _time(fn: Callable[[], object], inner: int) -> float:
    start = time.thread_time_ns()
    for _ in range(inner):
        fn()
    return (time.thread_time_ns() - start) / inner / 1000.0  # µs per batch


def _interleaved(old: Callable[[], object], new: Callable[[], object], reps: int, inner: int,
                 reset: Callable[[], object] = lambda: None) -> dict[str, float]:
    olds, news = [], []
    for _ in range(reps):
        olds.append(_time(old, inner))
        news.append(_time(new, inner))
        reset()  # untimed: the queues emptied, as the writer's flush thread does
    o, n = statistics.median(olds), statistics.median(news)
    return {"old_us": round(o, 1), "new_us": round(n, 1), "saved_us": round(o - n, 1), "new_over_old": round(n / o, 3)}


def run(rows: int, spec: EncoderSpec, frame: pd.DataFrame, reps: int, inner: int, tmp: Path) -> dict[str, Any]:
    lookup = FeatureLookup(_Source({c.name: c.mean for c in spec.numeric if c.name != "amount"}))
    lookup.configure(spec, contract=FRAUD_CONTRACT)  # the reference contract's entity keys (user_id, merchant_id)
    reader = _reader_columns(spec, frame, rows)
    requests = _requests(frame, rows)
    names = spec.input_columns
    defaults = dict(lookup._defaults)

    def encode_old() -> object:
        keys = list(reader)
        found = [dict(zip(keys, values, strict=True)) for values in zip(*reader.values(), strict=True)]
        feats = [{n: d if (v := got.get(n)) is None or (isinstance(v, float) and v != v) else v
                  for n, d in defaults.items()} for got in found]
        [bool(got.get(UNKNOWN_ENTITY)) for got in found]
        return spec.encode_records([{**row, **f} for row, f in zip(requests, feats, strict=True)])

    def encode_new() -> object:
        found = lookup._found(reader, rows)
        return spec.encode_columns(_model_columns(names, requests, found, None))

    found = lookup._found(reader, rows)
    feats = found.rows()
    scores = [0.5] * rows
    ids = [f"req-{i}" for i in range(rows)]
    old_queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=10**9)
    writer = PredictionLogWriter(tmp / "log", "fraud", max_queue=10**9)

    def log_old() -> object:
        for i in range(rows):
            for row in log_rows(request_id=ids[i], ts=1.7e9, model_name="fraud", model_version="1", variant="stable",
                                rows=requests[i : i + 1], features=feats[i : i + 1], scores=scores[i : i + 1],
                                degraded=False, latency_ms=1.5):
                old_queue.put_nowait(row)
        return None

    def log_new() -> object:
        writer.append_columns(batch_log_columns(
            ts=1.7e9, model_name="fraud", request_ids=ids, versions=["1"] * rows, variants=["stable"] * rows,
            latencies_ms=[1.5] * rows, sizes=[1] * rows, rows=requests, features=found.columns, scores=scores,
            degraded=False))
        return None

    def reset() -> None:
        while not old_queue.empty():
            old_queue.get_nowait()
        writer._drain(10**9)

    assert encode_old().tobytes() == encode_new().tobytes()  # type: ignore[attr-defined]
    return {"encode": _interleaved(encode_old, encode_new, reps, inner),
            "log": _interleaved(log_old, log_new, reps, inner, reset)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[9, 64])
    parser.add_argument("--reps", type=int, default=31)
    parser.add_argument("--inner", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec, frame = fraud_spec_and_rows(Path(tmp))
        result = {f"rows_{n}": run(n, spec, frame, args.reps, args.inner, Path(tmp)) for n in args.rows}
    print(json.dumps({"input_dim": spec.input_dim, **result, "reps": args.reps, "inner": args.inner}))


if __name__ == "__main__":
    main()
