"""The served ``kserve.Model``: transformer (validate → online features → encode) and predictor in one process.

``preprocess`` turns a V1 body or a V2 ``InferRequest`` into rows (:mod:`mlops_serving.schema`);
``predict`` joins the request to a micro-batch (:mod:`mlops_serving.batcher`); per batch the variant of each
request is picked (stable|canary), features are looked up once, and each variant scores its rows with its own
recorded encoder, straight from the lookup's columns (:meth:`mlops_model.EncoderSpec.encode_columns`);
``postprocess`` answers in the protocol the request came in. Metrics and the prediction log are filled here,
the log off the request path.

Requests are validated, and the online store looked up, by the served model's contract (``model.json``'s
``contract``): stable and canary must record the same one; an export made before models carried one is served
under :data:`mlops_model.DEFAULT_CONTRACT`, said once in the log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kserve
import numpy as np
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from mlops_config import ContractConfig
from mlops_model import DEFAULT_CONTRACT
from mlops_serving.admission import Ticket, current_ticket, is_past, latest_deadline
from mlops_serving.batcher import MicroBatcher
from mlops_serving.canary import CanaryRouter, Variant
from mlops_serving.errors import BadRequestError, InternalError, ModelLoadError, ServingError
from mlops_serving.lookup import FeatureLookup, LookupResult
from mlops_serving.metrics import ServingMetrics
from mlops_serving.prediction_log import PredictionLogWriter, batch_log_columns
from mlops_serving.served import LocalModel, ServedModel
from mlops_serving.shadow import ShadowSender
from mlops_serving.v2 import V2_OUTPUTS, columns_from_infer_request, input_metadata

log = logging.getLogger(__name__)

Loader = Callable[[], tuple[ServedModel, ServedModel | None]]


@dataclass
class _Batch:
    rows: list[dict[str, Any]]
    protocol: str
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    ticket: Ticket | None = field(default_factory=current_ticket)


@dataclass(frozen=True)
class _Series:
    """The labelled metric children of one (variant, protocol)."""

    lookup: Any
    predict: Any
    request: Any
    requests: Any
    predictions: Any
    score: Any
    degraded: Any
    unknown: Any


@dataclass
class _Scored:
    batch: _Batch
    variant: Variant[ServedModel]
    scores: np.ndarray
    degraded: bool
    unknown: list[bool]


class TabularModel(kserve.Model):
    """One served model name, backed by a stable and an optional canary version."""

    def __init__(
        self,
        name: str,
        *,
        loader: Loader,
        lookup: FeatureLookup,
        metrics: ServingMetrics,
        prediction_log: PredictionLogWriter | None,
        max_instances: int,
        canary_percent: int = 0,
        max_batch: int = 64,
        shadow: ShadowSender | None = None,
    ) -> None:
        super().__init__(name)
        self.ready: bool = False
        self._loader = loader
        self._lookup = lookup
        self._metrics = metrics
        self._log = prediction_log
        self._max_instances = max_instances
        self._canary_percent = canary_percent
        self._shadow = shadow
        self.router: CanaryRouter[ServedModel] | None = None
        self.contract: ContractConfig | None = None
        """The served model's contract (requests are validated by it); ``None`` until it is loaded."""
        self.reason = "loading"
        self._load_lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}
        self._batcher: MicroBatcher[_Batch, _Scored | ServingError] = MicroBatcher(
            self._score_batches, max_items=max_batch)
        self._remote_pool: ThreadPoolExecutor | None = None
        """Set when a version scores in a predictor (role ``transformer``): its HTTP call runs off the loop."""

    # -- lifecycle -------------------------------------------------------------------------------------
    def load(self) -> bool:
        """Load the versions; a failure leaves the model not ready with :attr:`reason`, never raises.

        Called again (by the server's load thread, with back-off) until it succeeds: a registry or predictor
        that comes up later is picked up without a restart.
        """
        with self._load_lock:
            if self.ready:
                return True
            try:
                stable, canary = self._loader()
                self._check_feature_service(stable, canary)
                contract = _served_contract(stable, canary)
                self._check_entity_keys(contract)
            except ModelLoadError as exc:
                if self.reason != str(exc):
                    log.error("model %s failed to load: %s", self.name, exc)
                self.reason = str(exc)
                return False
            except Exception as exc:  # an unforeseen loader failure must not crash the server either
                self.reason = f"{type(exc).__name__}: {exc}"
                log.exception("model %s failed to load", self.name)
                return False
            self._lookup.configure(*(m.encoder for m in (stable, canary) if m is not None), contract=contract)
            if not all(isinstance(m, LocalModel) for m in (stable, canary) if m is not None):
                # a forward pass in a predictor is a blocking HTTP call: on a thread, so the loop serves meanwhile
                self._remote_pool = ThreadPoolExecutor(1, thread_name_prefix="predictor-call")
            self.router = CanaryRouter(stable, canary, self._canary_percent)
            self.contract = contract
            for variant in self.router.variants():
                ref = variant.target.ref
                self._metrics.model_info.labels(self.name, ref.version, variant.name, ref.alias or "").set(1)
            self.reason = ""
            self.ready = True
            _freeze_heap()
            return True

    def _check_feature_service(self, stable: ServedModel, canary: ServedModel | None) -> None:
        service = self._lookup.source.service_name
        for loaded in (stable, canary):
            if loaded is not None and loaded.feature_service and loaded.feature_service != service:
                raise ModelLoadError(
                    f"version {loaded.ref.version} was trained on FeatureService {loaded.feature_service!r} but "
                    f"the transformer reads {service!r}; set features.feature_service={loaded.feature_service}")

    def _check_entity_keys(self, contract: ContractConfig) -> None:
        keys = getattr(self._lookup.source, "entity_keys", None)  # OnlineFeatures says which keys it reads by
        if keys is not None and tuple(keys) != contract.entity_keys:
            raise ModelLoadError(
                f"the served model's contract looks features up by entity keys {list(contract.entity_keys)!r} but the "
                f"online store is read by {list(keys)!r}; serve the model with its own model config (contract)")

    def start(self) -> None:
        """KServe calls this at registration; readiness comes from :meth:`load` only."""

    def close(self) -> None:
        """Stop the predictor-call thread, the shadow sender and the lookup threads (server shutdown)."""
        self._batcher.close()
        if self._remote_pool is not None:
            self._remote_pool.shutdown(wait=True)
        if self._shadow is not None:
            self._shadow.close()
        self._lookup.close()

    @property
    def stable_version(self) -> str:
        return self.router.stable.target.ref.version if self.router else "none"

    def describe(self) -> dict[str, Any]:
        """What is served: versions, aliases, split, readiness and its reason."""
        variants = []
        if self.router:
            for v in self.router.variants():
                ref = v.target.ref
                variants.append({"variant": v.name, "version": ref.version, "alias": ref.alias, "source": ref.source,
                                 "weights_sha256": v.target.weights_sha256,
                                 "feature_service": v.target.feature_service})
        return {"name": self.name, "ready": self.ready, "reason": self.reason or None, "variants": variants,
                "canary_percent": self.router.percent if self.router else self._canary_percent,
                "shadow": self._shadow.describe() if self._shadow is not None else None}

    # -- V2 metadata -----------------------------------------------------------------------------------
    def get_input_types(self) -> list[dict[str, Any]]:
        if self.contract is None:  # which fields a request holds is the loaded model's to say
            raise ModelLoadError(f"model {self.name!r} is not loaded: {self.reason}")
        return input_metadata(self.contract)

    def get_output_types(self) -> list[dict[str, Any]]:
        return [dict(o) for o in V2_OUTPUTS]

    # -- request path ----------------------------------------------------------------------------------
    async def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> _Batch:
        from mlops_serving.schema import parse_columns, parse_v1

        contract = self.contract
        if contract is None:  # which fields a request holds is the loaded model's to say
            raise ModelLoadError(f"model {self.name!r} is not loaded: {self.reason}")
        request_id = (headers or {}).get("x-request-id") or next(_REQUEST_IDS)
        if isinstance(payload, InferRequest):
            columns = columns_from_infer_request(payload, contract)
            rows = parse_columns(columns, self._max_instances, contract=contract)
            return _Batch(rows, "v2", payload.id or request_id)
        if isinstance(payload, bytes | str):
            raise BadRequestError("the body must be JSON (Content-Type: application/json)")
        return _Batch(parse_v1(payload, self._max_instances, contract=contract), "v1", request_id)

    async def predict(self, payload: _Batch, headers: dict[str, str] | None = None) -> _Scored:
        if self.router is None:
            raise ModelLoadError(f"model {self.name!r} is not loaded: {self.reason}")
        result = await self._batcher.submit(payload)
        if isinstance(result, ServingError):
            raise result
        return result

    async def _score_batches(self, batches: Sequence[_Batch]) -> list[_Scored | ServingError]:
        """Score the requests still within their deadline; the others get their refusal (admission)."""
        now = time.monotonic()
        late = [is_past(b.ticket, now) for b in batches]
        live = [b for b, past in zip(batches, late, strict=True) if not past]
        try:
            scored = iter(await self._score(live) if live else [])
        except ServingError:
            raise
        except Exception as exc:
            log.exception("prediction failed")
            raise InternalError(f"prediction failed ({type(exc).__name__}); see the server log") from None
        return [_expire(b.ticket) if past else next(scored) for b, past in zip(batches, late, strict=True)]

    async def _score(self, batches: Sequence[_Batch]) -> list[_Scored]:
        """One online-store lookup for all requests (awaited: the batch's one hand-over to a thread), then one
        encode + forward pass per variant, on the loop (a predictor's HTTP call on a thread of its own)."""
        assert self.router is not None
        picked = [self.router.pick() for _ in batches]
        rows = [row for b in batches for row in b.rows]
        t0 = time.perf_counter()
        found = await self._lookup.fetch(rows, deadline=latest_deadline([b.ticket for b in batches]))
        if found.abandoned:
            for b in batches:
                if b.ticket is not None:
                    b.ticket.lookup_abandoned = True
        t1 = time.perf_counter()
        if self._remote_pool is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._remote_pool, self._finish, batches, picked, found, t0, t1)
        return self._finish(batches, picked, found, t0, t1)

    def _finish(self, batches: Sequence[_Batch], picked: Sequence[Variant[ServedModel]], found: LookupResult,
                t0: float, t1: float) -> list[_Scored]:
        """Encode + forward per variant, then the batch's log rows, shadow copies and metrics."""
        bounds = [0, *itertools.accumulate(len(b.rows) for b in batches)]
        scores: list[np.ndarray] = [np.empty(0)] * len(batches)
        rows = [row for b in batches for row in b.rows]
        for variant in {v.name: v for v in picked}.values():
            members = [i for i, v in enumerate(picked) if v.name == variant.name]
            index = (None if len(members) == len(batches)
                     else [k for i in members for k in range(bounds[i], bounds[i + 1])])
            out = variant.target.score_columns(_model_columns(variant.target.encoder.input_columns, rows, found, index))
            offset = 0
            for i in members:
                n = len(batches[i].rows)
                scores[i] = out[offset : offset + n]
                offset += n
        t2 = time.perf_counter()
        self._metrics.feature_store_up.labels(self.name).set(0 if found.degraded else 1)
        now = time.time()
        if self._log is not None:  # the batch's log rows in one block, by column, as the lookup gave them
            self._log.append_columns(batch_log_columns(
                ts=now, model_name=self.name, request_ids=[b.request_id for b in batches],
                versions=[v.target.ref.version for v in picked], variants=[v.name for v in picked],
                latencies_ms=[(t2 - b.started) * 1000.0 for b in batches], sizes=[len(b.rows) for b in batches],
                rows=rows, features=found.columns, scores=[s for part in scores for s in part.tolist()],
                degraded=found.degraded))
        results = []
        assert self.contract is not None, "a batch was scored before the model (and its contract) loaded"
        record_id = self.contract.record_id  # the shadow log names the id column as the prediction log does
        for i, (batch, variant) in enumerate(zip(batches, picked, strict=True)):
            if self._shadow is not None:  # queued for the shadow thread, never waited for
                self._shadow.offer(request_id=batch.request_id, ts=now, live_version=variant.target.ref.version,
                                   live_variant=variant.name, rows=batch.rows, features=found.columns,
                                   start=bounds[i], live_scores=scores[i].tolist(),
                                   live_predict_ms=(t2 - t1) * 1000.0, record_id=record_id)
            results.append(_Scored(batch, variant, scores[i], found.degraded, found.unknown[bounds[i] : bounds[i + 1]]))
        self._observe(results, t1 - t0, t2 - t1, t2)
        return results

    def _observe(self, results: Sequence[_Scored], lookup_s: float, predict_s: float, done: float) -> None:
        """The batch's metrics: the lookup and the encode + forward once per variant in the batch (one store call
        and one pass each), the counters once per (variant, protocol), latency and scores per request."""
        seen: set[str] = set()
        for scored in results:
            series = self._series_of(scored.variant, scored.batch.protocol)
            if scored.variant.name not in seen:
                seen.add(scored.variant.name)
                series.lookup.observe(lookup_s)
                series.predict.observe(predict_s)
            series.request.observe(done - scored.batch.started)
            series.requests.inc()
            n = len(scored.scores)
            series.predictions.inc(n)
            for s in scored.scores.tolist():
                series.score.observe(s)
            if scored.degraded:
                series.degraded.inc(n)
            n_unknown = sum(scored.unknown)
            if n_unknown:
                series.unknown.inc(n_unknown)

    def _series_of(self, variant: Variant[ServedModel], protocol: str) -> _Series:
        """The labelled children of (variant, protocol), resolved once, not per request."""
        series = self._series.get((variant.name, protocol))
        if series is None:
            m = self._metrics
            labels = (self.name, variant.target.ref.version, variant.name)
            series = self._series[(variant.name, protocol)] = _Series(
                m.feature_lookup.labels(*labels), m.predict.labels(*labels), m.request_latency.labels(*labels),
                m.requests.labels(*labels, protocol), m.predictions.labels(*labels), m.score.labels(*labels),
                m.degraded.labels(*labels), m.unknown_entities.labels(*labels))
        return series

    async def postprocess(self, result: Any, headers: dict[str, str] | None = None,
                          response_headers: dict[str, str] | None = None) -> Any:
        scored: _Scored = result
        ref = scored.variant.target.ref
        if scored.batch.protocol == "v2":
            n = len(scored.scores)
            outputs = [
                InferOutput("score", [n], "FP32", scored.scores.astype(np.float32).tolist()),
                InferOutput("degraded", [n], "BOOL", [scored.degraded] * n),
                InferOutput("unknown_entity", [n], "BOOL", list(scored.unknown)),
            ]
            return InferResponse(response_id=scored.batch.request_id, model_name=self.name, model_version=ref.version,
                                 infer_outputs=outputs, parameters={"variant": scored.variant.name})
        return {
            "predictions": [
                {"score": float(s), "degraded": scored.degraded, "unknown_entity": bool(u)}
                for s, u in zip(scored.scores, scored.unknown, strict=True)
            ],
            "model_name": self.name,
            "model_version": ref.version,
            "variant": scored.variant.name,
            "degraded": scored.degraded,
            "request_id": scored.batch.request_id,
        }


def _served_contract(stable: ServedModel, canary: ServedModel | None) -> ContractConfig:
    """The contract requests are validated by: the one the served versions record (the same for both).

    Raises:
        ModelLoadError: the canary records another contract than the stable version (one request schema serves
            both).
    """
    contract = stable.contract
    if canary is not None and canary.contract != contract:
        raise ModelLoadError(
            f"version {canary.ref.version} (canary) records another contract than version {stable.ref.version} "
            f"(stable): {_contract_line(canary.contract)} vs {_contract_line(contract)}; a canary must take the "
            "requests the stable version takes")
    if contract is None:
        log.warning("version %s's model.json records no contract (exported before models carried one): serving "
                    "it under the default contract (%s)", stable.ref.version, _contract_line(DEFAULT_CONTRACT))
        contract = DEFAULT_CONTRACT
    return contract


def _contract_line(contract: ContractConfig | None) -> str:
    if contract is None:
        return "none recorded"
    return f"entity keys {list(contract.entity_keys)!r}, fields {list(contract.fields)!r}"


def _model_columns(names: Sequence[str], rows: Sequence[dict[str, Any]], found: LookupResult,
                   index: Sequence[int] | None) -> dict[str, list[Any]]:
    """An encoder's input columns for the batch's rows at ``index`` (all rows when None).

    A column the lookup has is taken as it is (a store feature wins over a request field of the same name, as
    merging a row with its features did); the others are the request's fields, None where a row lacks one.
    """
    out: dict[str, list[Any]] = {}
    for name in names:
        column = found.columns.get(name)
        if column is None:
            out[name] = [rows[k].get(name) for k in index] if index is not None else [r.get(name) for r in rows]
        else:
            out[name] = column if index is None else [column[k] for k in index]
    return out


def _request_ids() -> Iterator[str]:
    """Ids for requests that bring none: a random prefix per process and a counter (``<16 hex>-<hex>``).

    Unique across replicas and restarts in practice (64 random bits per process, then a count; ids are drawn on
    the event loop only), at a fraction of ``uuid4``'s cost, which reads the OS's random source and builds a UUID
    object on every request.
    """
    prefix = os.urandom(8).hex()
    return (f"{prefix}-{n:x}" for n in itertools.count(1))


_REQUEST_IDS = _request_ids()


def _expire(ticket: Ticket | None) -> ServingError:
    assert ticket is not None
    ticket.expired = True
    return ticket.expired_error()


def single_threaded_torch() -> None:
    """One intra-op thread for the calling thread (the setting is per thread: call it on the event loop).

    A small MLP on a few rows gains nothing from more, and the helper threads' spin-waits steal the CPU the
    event loop needs (measured: 6-8 ms per Linear call with 2 threads on 2 busy cores, 0.02 ms with 1).
    """
    import torch

    torch.set_num_threads(1)


def _freeze_heap() -> None:
    """Move everything loaded so far (feast, torch, kserve, the model) out of the cyclic GC's reach.

    Full collections walk every tracked object; with these libraries loaded that is tens of milliseconds on
    the request path. Objects created per request are still collected as usual.
    """
    import gc

    gc.collect()
    gc.freeze()

