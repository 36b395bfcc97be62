"""The predictor's model: an exported ``tabular_mlp`` rebuilt from safetensors, scoring encoded rows.

Loading never unpickles: weights come from ``model.safetensors`` through :func:`mlops_core.exported.load_exported`
(hash-checked), the network from :func:`mlops_core.exported.build_tabular_mlp`, the encoder spec from
``model.json``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mlops_core.exported import ExportedModelError, build_tabular_mlp, load_exported
from mlops_serving.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelRef:
    """Which immutable model version is served and where its exported folder is."""

    name: str
    version: str
    folder: Path
    alias: str | None = None
    source: str = "folder"
    """``registry`` (resolved from MLflow) or ``folder`` (served from a local exported folder)."""


class ServedModel(Protocol):
    """What the transformer needs of a model: its version, encoder, FeatureService and a scorer.

    :class:`LoadedModel` scores in process; :class:`mlops_serving.remote.RemoteModel` asks a predictor.
    """

    ref: ModelRef
    encoder: dict[str, Any]
    feature_service: str | None
    weights_sha256: str

    def score(self, x: np.ndarray) -> np.ndarray: ...


@dataclass
class LoadedModel:
    """An exported MLP ready to score encoded rows (float32, ``input_dim`` wide)."""

    ref: ModelRef
    network: torch.nn.Module
    meta: dict[str, Any]
    encoder: dict[str, Any]
    feature_service: str | None
    input_dim: int
    weights_sha256: str = field(default="")

    def export_meta(self) -> dict[str, Any]:
        """``model.json`` plus the served version: what a transformer in front of this predictor encodes for."""
        return {**self.meta, "served_version": self.ref.version, "served_name": self.ref.name}

    def score(self, x: np.ndarray) -> np.ndarray:
        """Probability of fraud per row of ``x`` (shape ``[n, input_dim]``)."""
        import torch

        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"encoded input has shape {x.shape}; the model expects [n, {self.input_dim}]")
        with torch.inference_mode():
            logits = self.network(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
            return torch.sigmoid(logits).reshape(-1).numpy().astype(np.float64)


def load_model(ref: ModelRef) -> LoadedModel:
    """Rebuild the exported model at ``ref.folder``; any problem is a :class:`ModelLoadError` with the reason."""
    try:
        tensors, meta = load_exported(ref.folder)
    except ExportedModelError as exc:
        raise ModelLoadError(f"model {ref.name!r} version {ref.version!r}: {exc}") from None
    if meta.get("kind") != "tabular_mlp":
        raise ModelLoadError(
            f"model {ref.name!r} version {ref.version!r} is of kind "
            f"{meta.get('kind')!r}; this server serves tabular_mlp"
        )
    features = meta.get("features") or {}
    encoder = features.get("encoder")
    if not isinstance(encoder, dict):
        raise ModelLoadError(
            f"model {ref.name!r} version {ref.version!r} has no features.encoder in model.json; "
            "re-export it with the encoder the model was trained with"
        )
    try:
        network = build_tabular_mlp(meta["architecture"])
        network.load_state_dict(tensors, strict=True)
    except (ExportedModelError, RuntimeError) as exc:
        raise ModelLoadError(f"model {ref.name!r} version {ref.version!r}: weights do not fit: {exc}") from None
    network.eval()
    input_dim = int(meta["architecture"]["input_dim"])
    if "input_dim" in encoder and int(encoder["input_dim"]) != input_dim:
        raise ModelLoadError(
            f"model {ref.name!r} version {ref.version!r}: encoder input_dim {encoder['input_dim']!r} "
            f"!= architecture input_dim {input_dim!r}"
        )
    log.info("loaded model %s version %s from %s", ref.name, ref.version, ref.folder)
    return LoadedModel(
        ref=ref,
        network=network,
        meta=meta,
        encoder=encoder,
        feature_service=features.get("feature_service"),
        input_dim=input_dim,
        weights_sha256=str(meta.get("weights_sha256", "")),
    )
