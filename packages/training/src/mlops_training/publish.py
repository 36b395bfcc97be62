"""After training, on rank 0: export the gathered model (safetensors + model.json) and record its lineage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_config import ContractConfig, PlatformConfig
from mlops_model import ExportedModelError, contract_of
from mlops_training.errors import TrainingError
from mlops_training.spec import train_spec

if TYPE_CHECKING:
    from mlops_training.shard_plan import ShardPlan
    from mlops_training.tasks import Task
    from mlops_training.trainer import TrainOutcome

log = logging.getLogger(__name__)

_TIME_COLUMNS = ("event_timestamp", "created_timestamp")


def export_model(folder: Path, outcome: TrainOutcome, task: Task, lineage: dict[str, Any],
                 sign: Callable[[Path], object] | None = None, calibration: dict[str, Any] | None = None,
                 decision_threshold: dict[str, Any] | None = None) -> Path:
    """Write the exported-model folder (``mlops_model`` exported-model contract) from rank 0's full state dict,
    signed by ``sign`` (:func:`mlops_model.model_signer`), as the family's spec exports it."""
    return train_spec(outcome.built.kind).export(folder, outcome, task, lineage, sign, calibration,
                                                 decision_threshold)


def _logits(outcome: TrainOutcome, x: Any) -> Any:
    import torch

    from mlops_model import build_tabular_mlp

    model = build_tabular_mlp(outcome.built.architecture)
    model.load_state_dict(outcome.full_state)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x)).reshape(-1).numpy()


def _raw_scores(outcome: TrainOutcome, x: Any) -> Any:
    from mlops_model import served_scores

    return served_scores(_logits(outcome, x), None)


def _served(outcome: TrainOutcome, x: Any, calibration: dict[str, Any] | None) -> Any:
    """The scores the export serves for ``x`` (:func:`mlops_model.served_scores`, as ``ExportedModel`` scores)."""
    from mlops_model import Calibration, served_scores

    cal = None if calibration is None else Calibration.from_dict(calibration, source="training calibration")
    return served_scores(_logits(outcome, x), cal)


def fit_score_calibration(task: Task, outcome: TrainOutcome, method: str, n_bins: int = 10) -> dict[str, Any] | None:
    """The ``calibration`` entry of ``model.json`` (``training.calibration``), or ``None`` (``none``, an LM).

    Fitted on the older half of the time-ordered validation split, so the newer half can say what it changed
    (``ece_before`` / ``ece_after``) on rows it never saw.
    """
    data = getattr(task, "data", None)  # only a tabular task holds scored rows: a language model has none
    if method == "none" or data is None:
        return None
    from mlops_model import fit_calibration, statistics
    from mlops_training.tabular_data import calibration_rows

    scores, labels = _raw_scores(outcome, data.val_x), data.val_y
    half = calibration_rows(len(scores))  # TabularTask checked this half holds both classes before training
    try:
        fitted = fit_calibration(scores[:half], labels[:half], method)
    except ExportedModelError as exc:
        raise TrainingError(f"training.calibration={method!r} cannot be fitted on the older half of the validation "
                            f"split ({half} rows): {exc}; give the run more data (data.rows) or set "
                            "training.calibration: none") from None
    after = fitted.apply(scores[half:])
    return {**fitted.to_dict(), "holdout_rows": int(half), "evaluation_rows": int(len(scores) - half),
            "ece_before": statistics.expected_calibration_error(labels[half:], scores[half:], n_bins),
            "ece_after": statistics.expected_calibration_error(labels[half:], after, n_bins)}


def choose_decision_threshold(task: Task, outcome: TrainOutcome, criterion: str, value: float,
                              calibration: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``decision_threshold`` entry of ``model.json`` (``training.decision_threshold``), or ``None`` (an LM).

    Chosen on the whole validation split's scores as the export serves them (calibrated, if it is): the
    calibrator is monotone, so the F1-optimal cut of the raw scores is the same rows' cut, at the served value.
    """
    data = getattr(task, "data", None)
    if data is None:
        return None
    from mlops_model import choose_threshold

    return choose_threshold(data.val_y, _served(outcome, data.val_x, calibration), criterion, value)


def reference_profile(task: Task, outcome: TrainOutcome, n_bins: int,
                      calibration: dict[str, Any] | None = None, *,
                      declared: ContractConfig | None) -> dict[str, Any] | None:
    """The training set's reference profile with the trained model's scores (calibrated as served, if it is).

    The set's ids and label are left out by the contract it records; a set prepared before sets recorded one is
    read under ``declared``, the model config's (``None``: it declares none, refused).

    Raises:
        TrainingError: the set records no contract and the model config declares none.
    """
    data = getattr(task, "data", None)
    if data is None:
        return None
    try:
        from mlops_core import build_reference_profile
    except ImportError:
        log.warning("mlops_core.profile is not available: no reference profile logged")
        return None
    import pandas as pd

    scores = _served(outcome, data.train_x, calibration)  # the drift reference must hold the scores serving returns
    df = pd.read_parquet(data.frame_path)
    # the set records the contract it was prepared under; one prepared before sets recorded it: the config's
    contract = contract_of({"contract": data.contract}, source=str(data.frame_path)) or declared
    if contract is None:
        raise TrainingError(f"the training set {str(data.frame_path)!r} records no contract and the model config "
                            "declares none: its ids and label cannot be told from its features; prepare it again "
                            "under a model config with a section contract (configs/models/<model>.yaml)")
    ids = {contract.record_id, *contract.entity_keys, contract.label, *_TIME_COLUMNS}
    cols = [c for c in df.columns if c not in ids]
    numeric = [c for c in cols if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    categorical = [c for c in cols if c not in numeric]
    return build_reference_profile(df, numeric, categorical, n_bins, scores=scores)


def publish(config: PlatformConfig, plan: ShardPlan, root: Path, run_name: str, task: Task, outcome: TrainOutcome,
            *, track: bool) -> dict[str, Any]:
    """Export, and with ``track`` log the run to MLflow and register a model version. Returns the result."""
    import torch

    from mlops_core import dirty_code_files, git_info
    from mlops_model import model_signer
    from mlops_training.lineage import config_hash

    sign = model_signer(config.provenance, root)
    training = config.training
    export_root = Path(training.export_dir)
    export_root = export_root if export_root.is_absolute() else root / export_root
    folder = export_root / run_name
    git = git_info(root)
    lineage: dict[str, Any] = {"run_name": run_name, "seed": config.project.seed, "data_hash": task.data_hash,
                               "git_commit": git.commit, "git_dirty": git.dirty, "steps": outcome.steps,
                               "world_size": int(outcome.system["world_size"]),
                               "parallelism": plan.parallelism,
                               "sharding_strategy": plan.sharding_strategy,
                               "torch_version": torch.__version__, "config_sha256": config_hash(config),
                               "code_dirty_files": dirty_code_files(root), "trajectory": dict(outcome.trajectory),
                               "trajectory_sketch": dict(outcome.trajectory_sketch)}
    calibration = fit_score_calibration(task, outcome, training.calibration, config.monitoring.calibration_bins)
    threshold = choose_decision_threshold(task, outcome, training.decision_threshold.criterion,
                                          training.decision_threshold.value, calibration)
    data_lineage = getattr(getattr(task, "data", None), "data_lineage", None)
    if data_lineage:  # a tabular run: the DVC-tracked folders (and lock entries) its training set came from
        lineage["data_lineage"] = data_lineage
    result: dict[str, Any] = {"run_name": run_name, "steps": outcome.steps,
                              "resumed_from_step": outcome.resumed_from_step, "metrics": outcome.final_metrics,
                              "system": outcome.system, "per_rank": outcome.per_rank, "run_id": None,
                              "model_name": None, "model_version": None}
    if not track:
        export_model(folder, outcome, task, lineage, sign, calibration, threshold)
    else:
        from mlops_training.lineage import record_run

        features = task.features_meta()
        tags = {"mlops.torch_version": torch.__version__, "mlops.world_size": str(lineage["world_size"]),
                "mlops.parallelism": plan.parallelism,
                "mlops.sharding_strategy": plan.sharding_strategy,
                "mlops.config_sha256": lineage["config_sha256"], "mlops.model_kind": outcome.built.kind.value,
                **{f"mlops.trajectory.{k}": v for k, v in outcome.trajectory.items()}}
        if "dataset" in features:  # a fine-tuned language model: what it started from and learned on
            tags.update({"mlops.dataset": str(features["dataset"]), "mlops.finetune": str(features["finetune"]),
                         "mlops.base_checkpoint": str(features["checkpoint"])})
        if "feature_service" in features:
            tags["mlops.feature_service"] = str(features["feature_service"])
            tags["mlops.data_version"] = str(features.get("data_version", ""))

        def do_export(run_id: str) -> Path:
            return export_model(folder, outcome, task, {**lineage, "run_id": run_id}, sign, calibration, threshold)

        recorded = record_run(
            config.tracking, root, model=config.project.model, run_name=run_name, seed=config.project.seed,
            config=config.model_dump(mode="json"), data_hash=task.data_hash, tags=tags, history=outcome.history,
            system=outcome.system, per_rank=outcome.per_rank,
            artifacts={"checkpoint_manifest.json": outcome.manifest,
                       "reference_profile.json": reference_profile(task, outcome, config.monitoring.n_bins,
                                                                   calibration, declared=config.contract)},
            export=do_export)
        result.update(run_id=recorded.run_id, model_name=recorded.model_name, model_version=recorded.model_version)
    from mlops_model import read_meta

    result["export_dir"] = str(folder)
    result["weights_sha256"] = read_meta(folder)["weights_sha256"]
    result["data_hash"] = task.data_hash
    result["config_sha256"] = lineage["config_sha256"]
    result["trajectory"] = dict(outcome.trajectory)
    result["trajectory_sketch"] = dict(outcome.trajectory_sketch)
    return result
