"""Shadow traffic: a share of live requests mirrored to a candidate predictor, off the request path.

The live path only *offers* a scored request (:meth:`ShadowSender.offer`): an integer test decides whether it is
mirrored (request ``i`` is iff ``floor((i + 1) * f) > floor(i * f)`` for fraction ``f``, so exactly ``f`` of any
run of requests, spread evenly), and a mirrored one is put on a bounded queue without waiting. A full queue
drops the request and counts it (``mlops_serving_shadow_dropped_total{reason="queue_full"}``). Nothing the
candidate does (errors, hangs, being down) reaches the live answer: one daemon thread takes requests off the
queue (everything queued, up to ``max_rows`` rows: under load one call carries many requests, which keeps the
sender's CPU, and the candidate's, per request small), encodes them with the *candidate's* encoder (read from
its ``/mlops/models/{name}/meta``, as the transformer does for its own predictor) and sends one V2 tensor per
call with ``serving.tabular.shadow.timeout_s``. A request's shadow latency is the round trip of the call it rode in.

Every mirrored request that was sent is logged, answered or not, to the shadow log: the prediction-log store's
layout under ``<prediction_log_uri>/role=shadow`` (``model=<m>/version=<candidate version>/hour=<h>/part-*``),
one row per instance with the live answer beside the candidate's: ``request_id, instance, ts, model_name,
model_version`` (candidate), ``live_version, live_variant``, the record id (the column the served model's contract
names ``record_id``, as in the prediction log: ``transaction_id`` for fraud; what the two logs join on),
``live_score, score`` (null on error),
``status`` (``ok`` | ``timeout`` | ``unreachable`` | ``http_<code>`` | ``bad_answer``), ``error``,
``latency_ms`` (the candidate round trip: encode + call + decode) and ``live_predict_ms`` (the live model step).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from mlops_serving.log_store import LogColumns, read_prediction_log

if TYPE_CHECKING:
    import pandas as pd

    from mlops_model import EncoderSpec
    from mlops_serving.prediction_log import PredictionLogWriter

log = logging.getLogger(__name__)

SHADOW_PARTITION = "role=shadow"
UNKNOWN_VERSION = "unknown"
"""Partition of rows whose candidate never told its version (down from the start)."""
LINGER_S = 0.05
"""After the first queued request the sender waits this long for more to ride along in the same call."""
LATENCY_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def shadow_log_uri(prediction_log_uri: str | Path) -> str:
    """The shadow log's store: ``role=shadow`` inside the prediction-log store (never read as live rows)."""
    return f"{str(prediction_log_uri).rstrip('/')}/{SHADOW_PARTITION}"


def read_shadow_log(prediction_log_uri: str | Path, model: str, *, since: datetime | None = None,
                    until: datetime | None = None, versions: Sequence[str | int] | None = None) -> pd.DataFrame:
    """Shadow rows of ``model`` with ``since <= ts <= until`` (of candidate ``versions`` only, if given)."""
    return read_prediction_log(shadow_log_uri(prediction_log_uri), model, since=since, until=until,
                               versions=versions)


class ShadowMetrics:
    """The shadow series, registered in the server's registry (so ``/metrics`` shows them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.mirrored = Counter("mlops_serving_shadow_mirrored", "Live requests put on the shadow queue.",
                                ["model"], registry=r)
        self.dropped = Counter("mlops_serving_shadow_dropped",
                               "Live requests picked for shadowing but not mirrored (the queue was full).",
                               ["model", "reason"], registry=r)
        self.answered = Counter("mlops_serving_shadow_answered", "Mirrored requests the candidate answered.",
                                ["model", "version"], registry=r)
        self.errors = Counter("mlops_serving_shadow_errors",
                              "Mirrored requests the candidate failed (timeout, unreachable, http_<code>, bad_answer).",
                              ["model", "type"], registry=r)
        self.latency = Histogram("mlops_serving_shadow_seconds", "Candidate round trip per mirrored request.",
                                 ["model", "version"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("mlops_serving_shadow_queue_depth", "Mirrored requests waiting to be sent.",
                                 ["model"], registry=r)
        self.log_dropped = Counter("mlops_serving_shadow_log_dropped", "Shadow-log rows never written.",
                                   ["model"], registry=r)


@dataclass(frozen=True)
class _Mirrored:
    request_id: str
    ts: float
    live_version: str
    live_variant: str
    rows: Sequence[Mapping[str, Any]]
    features: Mapping[str, Sequence[Any]]
    """The lookup's columns of the request's batch, as served (never copied on the live path)."""
    start: int
    """The request's rows are ``start:start + len(rows)`` of each column."""
    live_scores: Sequence[float]
    live_predict_ms: float
    record_id: str
    """The served contract's record id column: the rows' id under it is logged under the same name."""


class _CandidateError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Candidate:
    version: str
    encoder: EncoderSpec


class ShadowSender:
    """Mirrors a share of live requests to a candidate predictor; the live path never waits for it."""

    def __init__(self, model: str, *, url: str, fraction: float, queue_size: int, timeout_s: float,
                 metrics: ShadowMetrics, log_writer: PredictionLogWriter | None, max_rows: int = 256) -> None:
        from mlops_serving.remote import predictor_url

        if not 0 <= fraction <= 1:
            raise ValueError(f"shadow fraction {fraction!r} must be in [0, 1]")
        self.model = model
        self.base_url = predictor_url(url)
        self.fraction = fraction
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        """Rows per call to the candidate at most (its ``serving.tabular.max_instances``)."""
        self._log = log_writer
        self._metrics = metrics
        self._mirrored = metrics.mirrored.labels(model)
        self._dropped = metrics.dropped.labels(model, "queue_full")
        self._depth = metrics.queue_depth.labels(model)
        self._queue: queue.Queue[_Mirrored] = queue.Queue(maxsize=queue_size)
        self._counter = itertools.count()
        # the fraction as a ratio of small integers (0.3 is 3/10, not the binary float's 5404319552844595/2**54):
        # the pick is exact arithmetic, so exactly that share of any run of requests is mirrored
        ratio = Fraction(fraction).limit_denominator(1_000_000)
        self._num, self._den = ratio.numerator, ratio.denominator
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._candidate: _Candidate | None = None
        self._client: Any = None

    # -- the live side: cheap, never blocks, never raises into the request ---------------------------------
    def offer(self, *, request_id: str, ts: float, live_version: str, live_variant: str,
              rows: Sequence[Mapping[str, Any]], features: Mapping[str, Sequence[Any]], live_scores: Sequence[float],
              live_predict_ms: float, record_id: str, start: int = 0) -> bool:
        """Mirror this scored request if its turn has come; ``True`` when it was queued.

        ``features``: the lookup's columns (name → one value per row) of the batch the request rode in, its rows at
        ``start:start + len(rows)``: kept by reference, read on the sender's thread, never turned into dicts.
        ``record_id``: the served model's contract's record id column, logged under its name.
        """
        i = next(self._counter)
        if (i + 1) * self._num // self._den == i * self._num // self._den:
            return False
        if self._thread is None:
            self._start()
        try:
            self._queue.put_nowait(_Mirrored(request_id, ts, live_version, live_variant, rows, features, start,
                                             live_scores, live_predict_ms, record_id))
        except queue.Full:
            self._dropped.inc()
            return False
        self._mirrored.inc()
        return True

    def describe(self) -> dict[str, Any]:
        """Settings and what is known of the candidate (for ``/status``)."""
        return {"url": self.base_url, "fraction": self.fraction, "queue": self._queue.qsize(),
                "candidate_version": self._candidate.version if self._candidate else None}

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            if self._log is not None:
                self._log.start()
            self._thread = threading.Thread(target=self._run, name="shadow-sender", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the sender (requests still queued after ``timeout`` are not sent) and flush the shadow log."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._log is not None and self._thread is not None:
            self._log.stop()
        if self._client is not None:
            self._client.close()

    # -- the sender thread -------------------------------------------------------------------------------------
    def _run(self) -> None:
        import httpx
        import torch

        torch.set_num_threads(1)  # per thread: the encoder's numpy work must not spin helper threads on the cores
        self._client = httpx.Client(timeout=self.timeout_s)
        while not self._stop.is_set():
            try:
                batch = [self._queue.get(timeout=0.2)]
            except queue.Empty:
                continue
            self._stop.wait(LINGER_S)  # let more queue up: fewer, fuller calls (the CPU cost is mostly per call)
            rows = len(batch[0].rows)
            while rows < self.max_rows:  # what queued up meanwhile rides along: one call, not one per request
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if rows + len(item.rows) > self.max_rows:  # too big for this call: it starts the next one
                    self._send_safely(batch)
                    batch, rows = [], 0
                batch.append(item)
                rows += len(item.rows)
            self._depth.set(self._queue.qsize())
            self._send_safely(batch)

    def _send_safely(self, batch: list[_Mirrored]) -> None:
        try:
            self._send(batch)
        except Exception:  # the sender must outlive anything a candidate answers
            log.exception("shadow: %d mirrored request(s) could not be handled", len(batch))

    def _send(self, batch: list[_Mirrored]) -> None:
        """One V2 call for the batch; every request in it gets the call's round trip as its latency."""
        t0 = time.perf_counter()
        scores: list[float] | None = None
        status, error = "ok", None
        try:
            candidate = self._load_candidate()
            scores = self._score(candidate, mirrored_columns(candidate.encoder.input_columns, batch))
        except _CandidateError as exc:
            status, error = exc.status, str(exc)[:500]
            if status != "bad_answer":
                self._candidate = None  # it may come back as another version: read its meta again
        latency_s = time.perf_counter() - t0
        version = self._candidate.version if self._candidate else UNKNOWN_VERSION
        if status == "ok":
            self._metrics.answered.labels(self.model, version).inc(len(batch))
            hist = self._metrics.latency.labels(self.model, version)
            for _ in batch:
                hist.observe(latency_s)
        else:
            self._metrics.errors.labels(self.model, status).inc(len(batch))
        if self._log is not None:
            offset = 0
            for item in batch:
                n = len(item.rows)
                part = None if scores is None else scores[offset : offset + n]
                offset += n
                self._log.append_columns(_log_rows(self.model, version, item, part, status, error, latency_s * 1000.0))

    def _load_candidate(self) -> _Candidate:
        if self._candidate is not None:
            return self._candidate
        from mlops_model import EncoderSpec, EncoderSpecError

        url = f"{self.base_url}/mlops/models/{self.model}/meta"
        meta = self._call("GET", url)
        features = meta.get("features") or {}
        try:
            encoder = EncoderSpec.from_dict(features.get("encoder"), source=f"the candidate {url!r}'s features.encoder")
        except EncoderSpecError as exc:
            raise _CandidateError("bad_answer", str(exc)) from None
        self._candidate = _Candidate(str(meta.get("served_version", UNKNOWN_VERSION)), encoder)
        log.info("shadow: candidate %s serves %s version %s", self.base_url, self.model, self._candidate.version)
        return self._candidate

    def _score(self, candidate: _Candidate, columns: Mapping[str, Sequence[Any]]) -> list[float]:
        import numpy as np
        import orjson

        x = np.asarray(candidate.encoder.encode_columns(columns), dtype=np.float32)
        n = len(x)
        body = orjson.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                         "data": x.ravel()}]}, option=orjson.OPT_SERIALIZE_NUMPY)
        answer = self._call("POST", f"{self.base_url}/v2/models/{self.model}/infer", body)
        outputs = {o.get("name"): o for o in answer.get("outputs", []) if isinstance(o, dict)}
        data = (outputs.get("score") or {}).get("data")
        if not isinstance(data, list) or len(data) != n:
            raise _CandidateError("bad_answer", f"the candidate answered no 'score' of {n} values")
        return [float(s) for s in data]

    def _call(self, method: str, url: str, body: bytes | None = None) -> dict[str, Any]:
        import httpx

        try:
            r = self._client.request(method, url, content=body,
                                     headers={"content-type": "application/json"} if body is not None else None)
        except httpx.TimeoutException:
            raise _CandidateError("timeout", f"{url!r} did not answer within {self.timeout_s} s") from None
        except httpx.TransportError as exc:
            raise _CandidateError("unreachable", f"{url!r} unreachable: {exc}") from None
        if r.status_code != 200:
            raise _CandidateError(f"http_{r.status_code}", f"{url!r} answered {r.status_code}: {r.text[:200]}")
        try:
            answer = r.json()
        except ValueError:
            raise _CandidateError("bad_answer", f"{url!r} answered no JSON") from None
        if not isinstance(answer, dict):
            raise _CandidateError("bad_answer", f"{url!r} answered {type(answer).__name__}, not an object")
        return answer


def mirrored_columns(names: Sequence[str], batch: Sequence[_Mirrored]) -> dict[str, list[Any]]:
    """The candidate encoder's input columns for every row of ``batch``, in order: what merging each request row
    with its features (``{**row, **features}``) and reading the names gave, built by column. A column the lookup
    served is taken as it is (a store feature wins over a request field of the same name); any other is the
    request's field, None where a row lacks it (the candidate may read a feature the live service does not)."""
    out: dict[str, list[Any]] = {}
    for name in names:
        column: list[Any] = []
        for item in batch:
            served = item.features.get(name)
            if served is None:
                column += [row.get(name) for row in item.rows]
            else:
                column += served[item.start : item.start + len(item.rows)]
        out[name] = column
    return out


def _log_rows(model: str, version: str, item: _Mirrored, scores: Sequence[float] | None, status: str,
              error: str | None, latency_ms: float) -> LogColumns:
    """The shadow-log rows of one mirrored request, by column (one list per column, no dict per row)."""
    n = len(item.rows)
    when = datetime.fromtimestamp(item.ts, UTC)
    return LogColumns({
        "request_id": [item.request_id] * n, "instance": list(range(n)), "ts": [when] * n,
        "model_name": [model] * n, "model_version": [version] * n, "live_version": [item.live_version] * n,
        "live_variant": [item.live_variant] * n, item.record_id: [row.get(item.record_id) for row in item.rows],
        "live_score": [float(item.live_scores[k]) for k in range(n)],
        "score": [None] * n if scores is None else [scores[k] for k in range(n)],
        "status": [status] * n, "error": [error] * n,
        "latency_ms": [latency_ms] * n, "live_predict_ms": [item.live_predict_ms] * n,
    }, n)


def shadow_sender(model: str, *, url: str, fraction: float, queue_size: int, timeout_s: float,
                  registry: CollectorRegistry, prediction_log_uri: str | Path | None, flush_s: float = 2.0,
                  retention_hours: float | None = None, max_rows: int = 256) -> ShadowSender:
    """A sender with its metrics in ``registry`` and its log in the prediction-log store's ``role=shadow``."""
    from mlops_serving.prediction_log import PredictionLogWriter

    metrics = ShadowMetrics(registry)
    writer = None
    if prediction_log_uri is not None:
        writer = PredictionLogWriter(shadow_log_uri(prediction_log_uri), model, flush_s=flush_s,
                                     max_queue=max(100, queue_size * 16), retention_hours=retention_hours,
                                     on_dropped=lambda n: metrics.log_dropped.labels(model).inc(n))
    return ShadowSender(model, url=url, fraction=fraction, queue_size=queue_size, timeout_s=timeout_s,
                        metrics=metrics, log_writer=writer, max_rows=max_rows)
