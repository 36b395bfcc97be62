"""A served model version: which one it is (:class:`ModelRef`) and what the transformer asks of it.

Loading never unpickles: :class:`mlops_model.ExportedModel` reads ``model.safetensors`` (hash-checked),
rebuilds the network and validates the encoder recorded in ``model.json``; the same class scores the
evaluation gates' holdout, so production scores what the gates judged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlops_config import ContractConfig
from mlops_model import EncoderSpec, ExportedModel, ModelContractError
from mlops_serving.errors import ModelLoadError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelRef:
    """Which immutable model version is served and where its exported folder is."""

    name: str
    version: str
    folder: Path
    alias: str | None = None
    source: str = "folder"
    """``registry`` (resolved from MLflow), ``folder`` (a local exported folder) or ``predictor`` (remote)."""


class ServedModel(Protocol):
    """What the transformer needs of a version: its ref, encoder, FeatureService and a scorer of request rows.

    :class:`LocalModel` scores in process; :class:`mlops_serving.remote.RemoteModel` asks a predictor.
    """

    @property
    def ref(self) -> ModelRef: ...

    @property
    def encoder(self) -> EncoderSpec: ...

    @property
    def feature_service(self) -> str | None: ...

    @property
    def weights_sha256(self) -> str: ...

    @property
    def contract(self) -> ContractConfig | None:
        """The contract ``model.json`` records; ``None`` for an export made before models carried one."""
        ...

    def score_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray: ...

    def score_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """Score columns of raw values (:meth:`mlops_model.EncoderSpec.encode_columns`): the batch's path."""
        ...


@dataclass(frozen=True)
class LocalModel:
    """An :class:`~mlops_model.ExportedModel` served in this process under a :class:`ModelRef`."""

    ref: ModelRef
    model: ExportedModel

    @property
    def encoder(self) -> EncoderSpec:
        return self.model.encoder

    @property
    def feature_service(self) -> str | None:
        return self.model.feature_service

    @property
    def weights_sha256(self) -> str:
        return self.model.weights_sha256

    @property
    def contract(self) -> ContractConfig | None:
        return self.model.contract

    def score_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return self.model.score_records(records)

    def score_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        return self.model.score_columns(columns)

    def export_meta(self) -> dict[str, Any]:
        """``model.json`` plus the served version: what a transformer in front of this predictor encodes for."""
        return {**self.model.meta, "served_version": self.ref.version, "served_name": self.ref.name}


def load_model(ref: ModelRef, check: Callable[[Path], object] | None = None) -> LocalModel:
    """Load the exported model at ``ref.folder``; any problem is a :class:`ModelLoadError` with the reason.

    ``check`` (:func:`mlops_model.model_verifier`) verifies the model's signature first: a model whose files or
    signature do not verify is refused, and the server stays up but not ready, saying why.
    """
    try:
        model = ExportedModel.load(ref.folder, check=check)
    except ModelContractError as exc:
        raise ModelLoadError(f"model {ref.name!r} version {ref.version!r}: {exc}") from None
    log.info("loaded model %s version %s from %s", ref.name, ref.version, ref.folder)
    return LocalModel(ref, model)
