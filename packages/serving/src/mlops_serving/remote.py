"""The transformer's view of a separate predictor (KServe InferenceService: transformer → predictor over V2).

At load the transformer asks the predictor which version it serves and with which encoder
(``GET /mlops/models/{name}/meta``), so it always encodes for exactly the weights behind it; per batch it
sends the encoded rows as one V2 tensor ``input`` (FP32, ``[n, input_dim]``) and reads ``score`` back. The
predictor's ``model.json`` also brings the model's contract, which the transformer validates requests by.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlops_model import EncoderSpec, EncoderSpecError, ExportedModelError, contract_of
from mlops_serving.errors import ModelLoadError, PredictorUnavailableError
from mlops_serving.served import ModelRef

log = logging.getLogger(__name__)


def predictor_url(host: str) -> str:
    """``http://host:port`` from KServe's ``--predictor_host`` value (``host[:port]`` or a URL)."""
    return host.rstrip("/") if "://" in host else f"http://{host.rstrip('/')}"


class RemoteModel:
    """A :class:`~mlops_serving.served.ServedModel` whose forward pass runs in the predictor."""

    def __init__(self, name: str, meta: dict[str, Any], base_url: str, timeout_s: float) -> None:
        import httpx

        features = meta.get("features") or {}
        try:
            self.encoder = EncoderSpec.from_dict(features.get("encoder"),
                                                 source=f"the predictor at {base_url!r}'s features.encoder")
            self.contract = contract_of(meta, source=f"the predictor at {base_url!r}'s model.json")
        except (EncoderSpecError, ExportedModelError) as exc:
            raise ModelLoadError(str(exc)) from None
        self.ref = ModelRef(name=name, version=str(meta.get("served_version", "unknown")), folder=Path(base_url),
                            source="predictor")
        self.feature_service: str | None = features.get("feature_service")
        self.weights_sha256: str = str(meta.get("weights_sha256", ""))
        self._url = f"{base_url}/v2/models/{name}/infer"
        self._client = httpx.Client(timeout=timeout_s)

    def score_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Encode here, score in the predictor (one V2 tensor per batch)."""
        return self._score_encoded(self.encoder.encode_records(records))

    def score_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """Encode the columns here, score in the predictor (one V2 tensor per batch)."""
        return self._score_encoded(self.encoder.encode_columns(columns))

    def _score_encoded(self, x: np.ndarray) -> np.ndarray:
        import httpx

        body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                            "data": np.asarray(x, dtype=np.float32).ravel().tolist()}]}
        try:
            r = self._client.post(self._url, json=body)
        except httpx.TransportError as exc:
            raise PredictorUnavailableError(f"predictor {self._url!r} unreachable: {exc}") from None
        if r.status_code != 200:
            raise PredictorUnavailableError(f"predictor {self._url!r} answered {r.status_code}: {r.text[:300]}")
        outputs = {o["name"]: o for o in r.json().get("outputs", [])}
        if "score" not in outputs:
            raise PredictorUnavailableError(f"predictor {self._url!r} returned no 'score' output")
        return np.asarray(outputs["score"]["data"], dtype=np.float64).reshape(-1)


def remote_loader(predictor_host: str, model: str, *, timeout_s: float = 10.0
                  ) -> Callable[[], tuple[RemoteModel, None]]:
    """A loader that reads the predictor's served version and encoder (no canary: KServe splits traffic)."""

    def load() -> tuple[RemoteModel, None]:
        import httpx

        base = predictor_url(predictor_host)
        try:
            r = httpx.get(f"{base}/mlops/models/{model}/meta", timeout=timeout_s)
        except httpx.TransportError as exc:
            raise ModelLoadError(f"predictor {base!r} unreachable: {exc}") from None
        if r.status_code != 200:
            raise ModelLoadError(f"predictor {base!r} has no ready model {model!r} ({r.status_code}: {r.text[:200]})")
        remote = RemoteModel(model, r.json(), base, timeout_s)
        log.info("transformer for %s: predictor %s serves version %s", model, base, remote.ref.version)
        return remote, None

    return load
