"""The two ways a trained model is exported (each family's :class:`~mlops_training.spec.TrainSpec` names one).

Both write the ``mlops_model`` exported-model contract from rank 0's full state dict and sign it with ``sign``
(:func:`mlops_model.model_signer`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlops_training.tasks import Task
    from mlops_training.trainer import TrainOutcome


def export_hf_model(
    folder: Path,
    outcome: TrainOutcome,
    task: Task,
    lineage: dict[str, Any],
    sign: Callable[[Path], object] | None = None,
    calibration: dict[str, Any] | None = None,
    decision_threshold: dict[str, Any] | None = None,
) -> Path:
    """A fine-tuned causal LM as a Hugging Face folder, signed alike (no calibration, no decision threshold: it
    does not score)."""
    from mlops_training.hf_export import export_hf

    lm = task.training.causal_lm  # type: ignore[attr-defined]
    out = export_hf(
        folder,
        outcome.full_state,
        outcome.built.architecture,
        task.checkpoint,  # type: ignore[attr-defined]
        {"features": task.features_meta(), "lineage": lineage},
        lora=lm.lora if lm.finetune == "lora" else None,
        adapter_only=lm.export_adapter_only,
    )
    if sign is not None:
        sign(out)
    return out


def export_weights(
    folder: Path,
    outcome: TrainOutcome,
    task: Task,
    lineage: dict[str, Any],
    sign: Callable[[Path], object] | None = None,
    calibration: dict[str, Any] | None = None,
    decision_threshold: dict[str, Any] | None = None,
) -> Path:
    """``model.safetensors`` + ``model.json`` of the trained state (the tabular MLP, the byte-level LM).

    A tabular model's ``model.json`` also records the contract its training set was prepared under
    (``contract``): serving validates requests, looks features up and assembles them by it."""
    from mlops_model import save_exported

    meta = {
        "kind": outcome.built.kind.value,
        "architecture": outcome.built.architecture,
        "features": task.features_meta(),
        "lineage": lineage,
    }
    if calibration is not None:
        meta["calibration"] = calibration
    if decision_threshold is not None:
        meta["decision_threshold"] = decision_threshold
    contract = getattr(getattr(task, "data", None), "contract", None)  # only a tabular task's data holds one
    if contract is not None:
        meta["contract"] = contract
    return save_exported(folder, outcome.full_state, meta, sign=sign)
