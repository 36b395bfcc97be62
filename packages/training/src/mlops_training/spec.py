"""What each model family trains with: one :class:`TrainSpec` per :class:`~mlops_model.ModelKind`.

As torchtitan's ``TrainSpec``: the worker, the doctor, the planner and the export look the family's pieces up
here (``train_spec(kind_of(config.training))``) and never branch on the family themselves. A new family adds its
task and one entry to :data:`TRAIN_SPECS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_model import KNOWN_KINDS, ModelKind
from mlops_training.errors import TrainingError
from mlops_training.export import export_hf_model, export_weights
from mlops_training.zoo import PRESETS, BuiltModel, build_model

if TYPE_CHECKING:
    from mlops_config import PlatformConfig, TrainingConfig
    from mlops_training.tasks import Task

log = logging.getLogger(__name__)

MakeTask = Callable[["PlatformConfig", Path, Path, Any], "Task"]
"""``(config, root, run_dir, dist_info)`` → the task every rank trains (rank 0 prepares shared data)."""


@dataclass(frozen=True)
class TrainSpec:
    """One family's pieces of training."""

    make_task: MakeTask
    shape: Callable[[TrainingConfig, int], BuiltModel]
    """``(training, input_dim)`` → the model on the meta device, for the doctor and the planner."""
    problems: Callable[[TrainingConfig], list[str]]
    """The family's own config problems (the doctor reports them before building the shape)."""
    plan_name: Callable[[TrainingConfig], str]
    """What ``mlops train plan`` calls the configured model."""
    export: Callable[..., Path]
    """``(folder, outcome, task, lineage, sign, calibration, decision_threshold)`` → the exported folder
    (:mod:`.publish`)."""


def _resolve(root: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def _tabular_task(config: PlatformConfig, root: Path, run_dir: Path, dist_info: Any) -> Task:
    import torch.distributed as dist

    from mlops_training.tabular_cache import prepare_cached
    from mlops_training.tabular_data import load_tabular, prepare_tabular
    from mlops_training.tasks import TabularTask

    cache = run_dir / "data"
    failure: list[Any] = [None]
    if dist_info.is_main and not (cache / "meta.json").is_file():
        try:
            # a copy when the same inputs were prepared before (a replay of the recipe): tabular_cache
            contract = config.declared_contract("tabular training")  # keys the copy too
            prepare_cached(prepare_tabular, config.features, config.data, root, cache,
                           _resolve(root, config.training.checkpoint.dir) / "_tabular", contract=contract)
        except Exception as exc:  # every rank must learn of it, or they wait at the broadcast forever
            failure[0] = f"{type(exc).__name__}: {exc}"
    dist.broadcast_object_list(failure, src=0)
    if failure[0] is not None:
        raise TrainingError(f"preparing the tabular training set failed: {failure[0]}")
    return TabularTask(config.training, config.project.seed, dist_info.device, load_tabular(cache))


def _byte_lm_task(config: PlatformConfig, root: Path, run_dir: Path, dist_info: Any) -> Task:
    from mlops_training.tasks import LMTask

    return LMTask(config.training, config.project.seed, dist_info.device)


def _sft_task(config: PlatformConfig, root: Path, run_dir: Path, dist_info: Any) -> Task:
    """Rank 0 fetches the checkpoint and gates the data; every rank then builds the task from the same files."""
    import torch.distributed as dist

    from mlops_training.pretrained import resolve_checkpoint
    from mlops_training.sft import SFTTask, gate_instruction_data

    training = config.training
    shared: list[Any] = [None]
    if dist_info.is_main:
        try:
            assert training.causal_lm.checkpoint is not None  # the config validator requires it with a dataset
            cache = _resolve(root, training.checkpoint.dir) / "_pretrained"
            folder = resolve_checkpoint(training.causal_lm.checkpoint, root, cache, config.tracking)
            gate = gate_instruction_data(training, root, folder, run_dir / "data")
            log.info(
                "instruction gate: %d accepted, %d quarantined %s",
                gate.accepted_rows,
                gate.quarantined_rows,
                gate.reasons,
            )
            shared[0] = {"checkpoint": str(folder), "gate": gate.to_json()}
        except Exception as exc:  # every rank must learn of it, or they wait at the broadcast forever
            shared[0] = f"{type(exc).__name__}: {exc}"
    dist.broadcast_object_list(shared, src=0)
    if isinstance(shared[0], str):
        raise TrainingError(f"preparing the fine-tuning data failed: {shared[0]}")
    gate_doc = shared[0]["gate"]
    return SFTTask(
        training,
        config.project.seed,
        dist_info.device,
        Path(shared[0]["checkpoint"]),
        Path(gate_doc["accepted_path"]),
        gate_doc,
    )


def _tabular_shape(training: TrainingConfig, input_dim: int) -> BuiltModel:
    cfg = training.tabular
    return build_model("tabular", input_dim=input_dim, hidden_sizes=cfg.hidden_sizes, dropout=cfg.dropout, meta=True)


def _lm_shape(training: TrainingConfig, input_dim: int) -> BuiltModel:
    """A causal LM is planned with the LLaMA preset's shape (a fine-tune's checkpoint is not fetched to plan)."""
    return build_model("causal_lm", preset=training.causal_lm.preset, meta=True)


def _lm_problems(training: TrainingConfig) -> list[str]:
    lm = training.causal_lm
    if lm.preset not in PRESETS:
        return [f"causal_lm.preset {lm.preset!r} is unknown; expected one of {sorted(PRESETS)}"]
    if lm.seq_len > PRESETS[lm.preset]["max_position_embeddings"]:
        return [
            f"causal_lm.seq_len={lm.seq_len!r} exceeds preset {lm.preset!r}'s context of "
            f"{PRESETS[lm.preset]['max_position_embeddings']}"
        ]
    return []


TRAIN_SPECS: dict[ModelKind, TrainSpec] = {
    ModelKind.TABULAR: TrainSpec(
        _tabular_task, _tabular_shape, lambda training: [], lambda training: training.model, export_weights
    ),
    ModelKind.BYTE_LM: TrainSpec(
        _byte_lm_task, _lm_shape, _lm_problems, lambda training: training.causal_lm.preset, export_weights
    ),
    ModelKind.HF_CAUSAL_LM: TrainSpec(
        _sft_task, _lm_shape, _lm_problems, lambda training: training.causal_lm.preset, export_hf_model
    ),
}


def train_spec(kind: ModelKind) -> TrainSpec:
    """The family's training pieces.

    Raises:
        TrainingError: no spec is registered for ``kind``.
    """
    try:
        return TRAIN_SPECS[kind]
    except KeyError:
        raise TrainingError(
            f"no training spec for model kind {kind!r}; registered: "
            f"{[k.value for k in TRAIN_SPECS]} of {list(KNOWN_KINDS)}"
        ) from None
