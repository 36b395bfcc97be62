"""Registered versions as scorers: fetch the exported model of a version, rebuild the MLP, score rows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_evaluation.errors import EvaluationError

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)
MODEL_ARTIFACT = "model"


@dataclass
class Scorer:
    """One registered version, loaded: its meta (``model.json``), the network and its run."""

    version: str
    run_id: str | None
    meta: dict[str, Any]
    module: torch.nn.Module
    folder: Path

    @property
    def kind(self) -> str:
        """``tabular_mlp`` or ``causal_lm``."""
        return str(self.meta.get("kind"))

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Rows → the model's float32 input, with the encoder the model was trained with."""
        from mlops_features import encode

        return encode(frame, self.meta["features"]["encoder"])

    def predict_encoded(self) -> Callable[[np.ndarray], np.ndarray]:
        """A predictor over encoded rows (what the latency gate times): forward + sigmoid, no autograd."""
        import torch

        module = self.module

        def predict(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return torch.sigmoid(module(torch.from_numpy(x)).squeeze(-1)).numpy()

        return predict

    def score(self, frame: pd.DataFrame, batch: int = 4096) -> np.ndarray:
        """Probability of fraud for every row."""
        x = self.encode(frame)
        predict = self.predict_encoded()
        return np.concatenate([predict(x[i:i + batch]) for i in range(0, len(x), batch)]) if len(x) else np.empty(0)


def load_version(client: MlflowClient, name: str, version: str, dst: Path) -> Scorer:
    """Download ``model/`` of the version's run into ``dst`` and rebuild the network (weights verified)."""
    from mlflow.exceptions import MlflowException

    from mlops_core import build_tabular_mlp, load_exported

    try:
        mv = client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise EvaluationError(f"{name!r} has no version {version!r}: {exc.message}") from None
    if not mv.run_id:
        raise EvaluationError(f"{name!r} version {version!r} has no run: cannot find its exported model")
    try:
        dst.mkdir(parents=True, exist_ok=True)
        folder = Path(client.download_artifacts(mv.run_id, MODEL_ARTIFACT, str(dst)))
    except (MlflowException, OSError) as exc:
        raise EvaluationError(f"cannot fetch artifact {MODEL_ARTIFACT!r} of run {mv.run_id!r} "
                              f"({name!r} v{version}): {exc}") from None
    tensors, meta = load_exported(folder)
    if meta.get("kind") == "causal_lm":
        from mlops_evaluation.lm import build_lm

        return Scorer(str(version), mv.run_id, meta, build_lm(meta, tensors), folder)
    if meta.get("kind") != "tabular_mlp":
        raise EvaluationError(f"{name!r} v{version} is a {meta.get('kind')!r} model; expected 'tabular_mlp' or "
                              "'causal_lm'")
    module = build_tabular_mlp(meta["architecture"])
    module.load_state_dict(tensors)
    module.eval()
    return Scorer(str(version), mv.run_id, meta, module, folder)
