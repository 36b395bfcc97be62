"""Our FSDP section as an Accelerate config file (``fsdp_version: 2``), so Accelerate / HF Trainer users keep
one config layer: ``accelerate launch --config_file <written file> train.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlops_config import TrainingConfig
from mlops_training.shard_plan import ShardPlan

_MIXED = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}


def accelerate_config(training: TrainingConfig) -> tuple[dict[str, Any], list[str]]:
    """The Accelerate ``ClusterConfig`` document for ``training`` and notes on what it cannot express.

    Raises:
        ShardPlanError: the hybrid shard group does not divide ``nproc × nnodes``.
    """
    fsdp = training.fsdp
    plan = ShardPlan.resolve(training)
    world = plan.world_size
    notes: list[str] = []
    doc: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "mixed_precision": _MIXED[fsdp.mixed_precision.param_dtype],
        "num_processes": world,
        "num_machines": training.nnodes,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "c10d" if training.nnodes > 1 else "static",
        "same_network": True,
        "use_cpu": False,
        "downcast_bf16": "no",
    }
    if training.rdzv_endpoint:
        host, _, port = training.rdzv_endpoint.rpartition(":")
        doc.update(main_process_ip=host, main_process_port=int(port))
    if fsdp.mixed_precision.reduce_dtype != "float32":
        notes.append(f"reduce_dtype {fsdp.mixed_precision.reduce_dtype!r} has no Accelerate config key; "
                     "pass a MixedPrecisionPolicy to FullyShardedDataParallelPlugin in code")
    if plan.fully_replicated:
        doc["distributed_type"] = "MULTI_GPU"
        notes.append(f"{'parallelism ddp' if plan.ddp else plan.strategy} maps to Accelerate's DDP")
        return doc, notes
    policy = fsdp.wrap_policy
    fsdp_doc: dict[str, Any] = {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": plan.reshard_after_forward,
        "fsdp_offload_params": plan.cpu_offload,
        "fsdp_activation_checkpointing": plan.activation_checkpointing,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": True,
    }
    if policy.kind == "transformer":
        fsdp_doc["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        fsdp_doc["fsdp_transformer_layer_cls_to_wrap"] = ",".join(policy.transformer_layer_cls)
    else:
        fsdp_doc["fsdp_auto_wrap_policy"] = "SIZE_BASED_WRAP"
        fsdp_doc["fsdp_min_num_params"] = policy.min_num_params
    if fsdp.backward_prefetch != "BACKWARD_PRE" or fsdp.forward_prefetch:
        notes.append("FSDP2 under Accelerate uses its default prefetching; backward/forward_prefetch are not mapped")
    doc["distributed_type"] = "FSDP"
    doc["fsdp_config"] = fsdp_doc
    if plan.hybrid:
        doc["parallelism_config"] = {"parallelism_config_dp_replicate_size": plan.dp_replicate,
                                     "parallelism_config_dp_shard_size": plan.dp_shard}
    return doc, notes


def write_accelerate_config(training: TrainingConfig, out: Path) -> list[str]:
    """Write the Accelerate YAML to ``out`` (notes as comments on top); return the notes."""
    doc, notes = accelerate_config(training)
    header = "# Written by `mlops train export-accelerate` from the `training` config section.\n"
    header += "".join(f"# note: {n}\n" for n in notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + yaml.safe_dump(doc, sort_keys=True), encoding="utf-8")
    return notes
