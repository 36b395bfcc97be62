"""FSDP2 training under torchrun: trainer, launcher, memory planner + doctor, sharded checkpoints, lineage."""

from mlops_training.accelerate_config import accelerate_config, write_accelerate_config
from mlops_training.api import reproduce, reproduce_weights_hash, train_model, train_tabular
from mlops_training.corpus import load_corpus
from mlops_training.doctor import Diagnosis, diagnose, plan_report, preflight
from mlops_training.errors import CheckpointError, DoctorError, RunLockedError, TrainingError
from mlops_training.launcher import TrainResult, launch
from mlops_training.lineage import config_hash
from mlops_training.planner import plan
from mlops_training.sft import encode_padded, gate_instructions, held_out
from mlops_training.shard_plan import STRATEGIES, ShardPlan, ShardPlanError
from mlops_training.trainjob import TrainJobResult, job_from_overlay, job_state, submit_trainjob
from mlops_training.zoo import PRESETS, build_causal_lm, build_model

__all__ = [
    "PRESETS",
    "STRATEGIES",
    "CheckpointError",
    "Diagnosis",
    "DoctorError",
    "RunLockedError",
    "ShardPlan",
    "ShardPlanError",
    "TrainJobResult",
    "TrainResult",
    "TrainingError",
    "accelerate_config",
    "build_causal_lm",
    "build_model",
    "config_hash",
    "diagnose",
    "encode_padded",
    "gate_instructions",
    "held_out",
    "job_from_overlay",
    "job_state",
    "launch",
    "load_corpus",
    "plan",
    "plan_report",
    "preflight",
    "reproduce",
    "reproduce_weights_hash",
    "submit_trainjob",
    "train_model",
    "train_tabular",
    "write_accelerate_config",
]
