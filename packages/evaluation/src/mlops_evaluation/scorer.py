"""Registered versions as scorers: fetch the exported model of a version and load it.

A ``tabular_mlp`` version is an :class:`mlops_model.ExportedModel`, the same load-and-score serving uses, so
the gates judge exactly the scores production returns; a ``causal_lm`` version is rebuilt by :mod:`.lm`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_evaluation.errors import EvaluationError
from mlops_model import ExportedModel, ModelKind, ModelKindError, kind_of, load_exported

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
    tabular: ExportedModel | None = None
    """The loaded model of a ``tabular_mlp`` version (None for ``causal_lm``)."""
    tokenizer: Any = None
    """The ``transformers`` tokenizer of an ``hf_causal_lm`` version."""

    @property
    def kind(self) -> ModelKind:
        """The model's family (``model.json``'s ``kind``)."""
        return kind_of(self.meta)

    def _tabular(self) -> ExportedModel:
        if self.tabular is None:
            raise EvaluationError(f"v{self.version} is a {self.kind.value!r} model: it does not score tabular rows")
        return self.tabular

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Rows → the model's float32 input, with the encoder the model was trained with."""
        return self._tabular().encoder.encode_frame(frame)

    def predict_encoded(self) -> Callable[[np.ndarray], np.ndarray]:
        """A predictor over encoded rows (what the latency gate times): forward + sigmoid, no autograd."""
        return self._tabular().score_encoded

    def serving_predictor(self) -> tuple[list[str], Callable[[Sequence[Mapping[str, Any]]], np.ndarray]]:
        """The columns serving must send and serving's scorer over row dicts (encode + forward), which the
        latency gate times."""
        model = self._tabular()
        return sorted(model.encoder.input_columns), model.score_records

    def score(self, frame: pd.DataFrame) -> np.ndarray:
        """Probability of fraud for every row."""
        return self._tabular().score_frame(frame)


def load_version(client: MlflowClient, name: str, version: str, dst: Path,
                 check: Callable[[Path], object] | None = None) -> Scorer:
    """Download ``model/`` of the version's run into ``dst`` and load it (weights verified).

    ``check`` (:func:`mlops_model.model_verifier`) verifies the signature before anything is scored: a version
    whose files or signature do not verify is refused with an :class:`EvaluationError` saying what differs.
    """
    from mlflow.exceptions import MlflowException

    from mlops_model import ModelSignatureError

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
    try:
        tensors, meta = load_exported(folder, check=check)
    except ModelSignatureError as exc:
        raise EvaluationError(f"{name!r} v{version} is refused before scoring: {exc}") from None
    try:
        kind = kind_of(meta)
    except ModelKindError as exc:
        raise EvaluationError(f"{name!r} v{version} cannot be scored: {exc}") from None
    return LOADERS[kind](str(version), mv.run_id, meta, tensors, folder)


def _load_tabular(version: str, run_id: str, meta: dict[str, Any], tensors: Any, folder: Path) -> Scorer:
    model = ExportedModel.load(folder)
    return Scorer(version, run_id, model.meta, model.network, folder, model)


def _load_byte_lm(version: str, run_id: str, meta: dict[str, Any], tensors: Any, folder: Path) -> Scorer:
    from mlops_evaluation.lm import build_lm

    return Scorer(version, run_id, meta, build_lm(meta, tensors), folder)


def _load_hf(version: str, run_id: str, meta: dict[str, Any], tensors: Any, folder: Path) -> Scorer:
    from mlops_evaluation.lm_evaluate import load_hf

    hf = load_hf(folder)
    return Scorer(version, run_id, meta, hf.model, folder, tokenizer=hf.tokenizer)


LOADERS: dict[ModelKind, Callable[[str, str, dict[str, Any], Any, Path], Scorer]] = {
    ModelKind.TABULAR: _load_tabular,
    ModelKind.BYTE_LM: _load_byte_lm,
    ModelKind.HF_CAUSAL_LM: _load_hf,
}
"""How a registered version of each model family is loaded to be scored (``(version, run_id, meta, tensors,
folder)``): the one place the scorer chooses by family; the gates are chosen in :data:`.runner.GATE_SUITES`."""
