"""The KServe predictor on its own (``serving.tabular.role: predictor``): encoded rows in, fraud probability out.

On Kubernetes the InferenceService's predictor loads the version KServe's storage initializer put in
``/mnt/models`` and answers V2 tensors ``input`` (FP32 ``[n, input_dim]``) with ``score``; its transformer
(:mod:`mlops_serving.remote`) reads ``GET /mlops/models/{name}/meta`` to encode for exactly these weights.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import kserve
import numpy as np
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from mlops_serving.errors import BadRequestError, ModelLoadError
from mlops_serving.metrics import ServingMetrics
from mlops_serving.schema import check_count
from mlops_serving.served import LocalModel

log = logging.getLogger(__name__)


class PredictorModel(kserve.Model):
    """Scores already-encoded rows with one exported model version."""

    def __init__(self, name: str, *, loader: Callable[[], LocalModel], metrics: ServingMetrics,
                 max_instances: int) -> None:
        super().__init__(name)
        self.ready: bool = False
        self.reason = "loading"
        self.loaded: LocalModel | None = None
        self._loader = loader
        self._metrics = metrics
        self._max_instances = max_instances

    def load(self) -> bool:
        if self.ready:
            return True
        try:
            self.loaded = self._loader()
        except ModelLoadError as exc:
            if self.reason != str(exc):
                log.error("predictor %s failed to load: %s", self.name, exc)
            self.reason = str(exc)
            return False
        ref = self.loaded.ref
        self._metrics.model_info.labels(self.name, ref.version, "stable", ref.alias or "").set(1)
        self.reason = ""
        self.ready = True
        return True

    def start(self) -> None:
        """Readiness comes from :meth:`load` only."""

    def close(self) -> None:
        """Nothing runs in the background."""

    @property
    def stable_version(self) -> str:
        return self.loaded.ref.version if self.loaded else "none"

    def describe(self) -> dict[str, Any]:
        ref = self.loaded.ref if self.loaded else None
        return {"name": self.name, "ready": self.ready, "reason": self.reason or None, "role": "predictor",
                "variants": [{"variant": "stable", "version": ref.version, "alias": ref.alias, "source": ref.source}]
                if ref else []}

    def export_meta(self) -> dict[str, Any]:
        assert self.loaded is not None
        return self.loaded.export_meta()

    def get_input_types(self) -> list[dict[str, Any]]:
        width = self.loaded.encoder.input_dim if self.loaded else -1
        return [{"name": "input", "datatype": "FP32", "shape": [-1, width]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [{"name": "score", "datatype": "FP32", "shape": [-1]}]

    async def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> tuple[np.ndarray, str, float]:
        started = time.perf_counter()
        assert self.loaded is not None
        width = self.loaded.encoder.input_dim
        if isinstance(payload, InferRequest):
            names = [i.name for i in payload.inputs]
            if names != ["input"]:
                raise BadRequestError(f"expected exactly one input named 'input', got {names!r}")
            inp = payload.inputs[0]
            if inp.datatype not in ("FP32", "FP64"):
                raise BadRequestError(f"input 'input' must be FP32 or FP64, got {inp.datatype!r}")
            shape = list(inp.shape)
            if len(shape) != 2 or shape[1] != width:
                raise BadRequestError(f"input 'input' has shape {shape}; expected [n, {width}]")
            try:
                values = np.asarray(inp.data, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                raise BadRequestError("input 'input' must hold numbers only") from None
            if values.size != math.prod(shape):
                raise BadRequestError(f"input 'input' shape {shape} does not match its {values.size} values")
            x, protocol = values.reshape(shape), "v2"
        elif isinstance(payload, dict) and isinstance(payload.get("instances"), list):
            try:
                x = np.asarray(payload["instances"], dtype=np.float64)
            except (TypeError, ValueError):
                raise BadRequestError("'instances' must be a list of equal-length number lists") from None
            if x.ndim != 2 or x.shape[1] != width:
                raise BadRequestError(f"'instances' has shape {list(x.shape)}; expected [n, {width}]")
            protocol = "v1"
        else:
            raise BadRequestError('expected a V2 tensor "input" or {"instances": [[...], ...]}')
        check_count(x.shape[0], self._max_instances)
        if not np.isfinite(x).all():
            raise BadRequestError("encoded rows must be finite (no NaN or inf)")
        return x.astype(np.float32), protocol, started

    async def predict(self, payload: tuple[np.ndarray, str, float], headers: dict[str, str] | None = None
                      ) -> tuple[np.ndarray, str, float]:
        assert self.loaded is not None
        x, protocol, started = payload
        t0 = time.perf_counter()
        scores = self.loaded.model.score_encoded(x)
        labels = (self.name, self.loaded.ref.version, "stable")
        self._metrics.predict.labels(*labels).observe(time.perf_counter() - t0)
        self._metrics.requests.labels(*labels, protocol).inc()
        self._metrics.predictions.labels(*labels).inc(len(scores))
        hist = self._metrics.score.labels(*labels)
        for s in scores:
            hist.observe(float(s))
        self._metrics.request_latency.labels(*labels).observe(time.perf_counter() - started)
        return scores, protocol, started

    async def postprocess(self, result: Any, headers: dict[str, str] | None = None,
                          response_headers: dict[str, str] | None = None) -> Any:
        assert self.loaded is not None
        scores, protocol, _ = result
        version = self.loaded.ref.version
        if protocol == "v2":
            out = InferOutput("score", [len(scores)], "FP32", scores.astype(np.float32).tolist())
            return InferResponse(response_id="", model_name=self.name, model_version=version, infer_outputs=[out])
        return {"predictions": scores.tolist(), "model_name": self.name, "model_version": version}
