"""The model family: one :class:`ModelKind`, decided once by :func:`kind_of`.

A family is named by the ``kind`` its export writes into ``model.json``; a training section names it by
``training.model`` (and, for a causal LM, whether it fine-tunes on ``causal_lm.dataset``). Every package keeps
one registry keyed by the kind (training tasks, gate suites, servers, the pipeline's loop) and looks its stage up
there, so no other module compares kinds (``tests/unit/model/test_kind_branching.py`` checks this): as
torchtitan's ``TrainSpec`` keeps the trainer from branching on the model, and KServe's huggingfaceserver infers
the task once and picks the ``Model`` class from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_model.errors import ModelKindError

if TYPE_CHECKING:
    from mlops_config import TrainingConfig


class ModelKind(StrEnum):
    """A model family; the value is the ``kind`` its export writes into ``model.json``."""

    TABULAR = "tabular_mlp"
    """The tabular MLP over a FeatureService's encoded features (``training.model: tabular``)."""

    BYTE_LM = "causal_lm"
    """A LLaMA-architecture causal LM trained from scratch on bytes (``training.model: causal_lm``)."""

    HF_CAUSAL_LM = "hf_causal_lm"
    """A causal LM fine-tuned from a Hugging Face checkpoint (``training.model: causal_lm`` with a dataset)."""


KNOWN_KINDS = tuple(k.value for k in ModelKind)


def kind_of(source: Mapping[str, Any] | Path | TrainingConfig) -> ModelKind:
    """The family of an export's meta (``model.json`` as a mapping), an export folder, or a training section.

    A folder without ``model.json`` but with a ``transformers`` ``config.json`` is a Hugging Face causal LM
    (a checkpoint served as it is).

    Raises:
        ModelKindError: the meta's ``kind`` is missing or unknown (naming it and the known kinds), or the folder
            holds neither ``model.json`` nor ``config.json``.
    """
    if isinstance(source, Path):
        return _kind_of_folder(source)
    if isinstance(source, Mapping):
        return _parse(source.get("kind"), "model.json kind")
    model = getattr(source, "model", None)
    if model == "tabular":
        return ModelKind.TABULAR
    if model == "causal_lm":
        return ModelKind.HF_CAUSAL_LM if source.causal_lm.dataset is not None else ModelKind.BYTE_LM
    raise ModelKindError(f"training.model {model!r} names no model family; expected 'tabular' or 'causal_lm'")


def _parse(value: Any, where: str) -> ModelKind:
    try:
        return ModelKind(value)
    except ValueError:
        raise ModelKindError(
            f"{where} {value!r} is not a known model kind; expected one of {list(KNOWN_KINDS)}"
        ) from None


def _kind_of_folder(folder: Path) -> ModelKind:
    meta = folder / "model.json"
    if meta.is_file():
        try:
            kind = json.loads(meta.read_text(encoding="utf-8")).get("kind")
        except (json.JSONDecodeError, AttributeError) as exc:
            raise ModelKindError(f"{str(meta)!r} is not a JSON object: {exc}") from None
        return _parse(kind, f"{str(meta)!r} kind")
    if (folder / "config.json").is_file():
        return ModelKind.HF_CAUSAL_LM
    raise ModelKindError(
        f"{str(folder)!r} holds neither model.json (an exported model) nor config.json (a "
        f"Hugging Face checkpoint); cannot tell its model kind, expected one of {list(KNOWN_KINDS)}"
    )


def kind_problem(source: Mapping[str, Any] | Path, expected: ModelKind) -> str | None:
    """Why ``source`` (an export's meta or folder) is not an ``expected`` model (a sentence), or ``None`` when it
    is: for checks that take one family only (the tabular contract gate, :class:`~mlops_model.ExportedModel`)."""
    try:
        got = kind_of(source)
    except ModelKindError as exc:
        return str(exc)
    return None if got is expected else f"kind {got.value!r} is not {expected.value!r}"
