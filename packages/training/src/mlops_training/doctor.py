"""Pre-flight doctor: configs known to fail are refused before a single worker starts.

Checks the FSDP section against the real model (built on the meta device) and the world it will run in:
shard groups, wrap classes, offload + clipping on an NCCL-only group, dtype combinations, batch split,
backend vs hardware, and (on GPUs) whether the planner says it fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlops_config import TrainingConfig
from mlops_training.errors import DoctorError, TrainingError
from mlops_training.parallelize import shard_group_size, wrap_units
from mlops_training.zoo import PRESETS, build_model, module_class_names

_WIDTH = {"float32": 32, "bfloat16": 16, "float16": 16}


@dataclass
class Diagnosis:
    """What the doctor found: ``problems`` refuse the run, ``warnings`` only inform."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise :class:`DoctorError` listing every problem when there is any."""
        if self.problems:
            raise DoctorError(self.problems)


def _check_dtypes(training: TrainingConfig, d: Diagnosis) -> None:
    fsdp, mp = training.fsdp, training.fsdp.mixed_precision
    if fsdp.parallelism == "ddp" and (mp.param_dtype, mp.reduce_dtype) != ("float32", "float32"):
        d.problems.append(
            f"mixed_precision param_dtype={mp.param_dtype!r}/reduce_dtype={mp.reduce_dtype!r} with parallelism "
            "'ddp': the DDP baseline trains in float32; use parallelism 'fsdp' for mixed precision"
        )
    if "float16" in (mp.param_dtype, mp.reduce_dtype):
        d.problems.append(
            "mixed_precision uses 'float16', which needs loss scaling this trainer does not do; use 'bfloat16'"
        )
    if _WIDTH[mp.reduce_dtype] < _WIDTH[mp.param_dtype]:
        d.problems.append(
            f"mixed_precision reduce_dtype={mp.reduce_dtype!r} is narrower than param_dtype={mp.param_dtype!r}; "
            "gradients would lose precision in the reduction: use reduce_dtype >= param_dtype"
        )
    if mp.buffer_dtype != mp.param_dtype and mp.buffer_dtype != "float32":
        d.warnings.append(
            f"mixed_precision buffer_dtype={mp.buffer_dtype!r}: FSDP2 keeps buffers in the model's dtype (float32)"
        )


def diagnose(training: TrainingConfig, *, world_size: int, local_world_size: int, cuda: bool,
             input_dim: int = 32) -> Diagnosis:
    """Every known-bad setting of ``training`` for ``world_size`` ranks (``local_world_size`` per node)."""
    d = Diagnosis()
    fsdp = training.fsdp
    if training.backend == "nccl" and not cuda:
        d.problems.append("backend 'nccl' needs CUDA devices and this machine has none; use 'auto' or 'gloo'")
    if fsdp.parallelism == "fsdp":
        shard = shard_group_size(fsdp, world_size, local_world_size)
        if shard > world_size or world_size % shard:
            d.problems.append(
                f"hybrid_shard_group_size={shard!r} does not divide world size {world_size!r} "
                f"({world_size // max(local_world_size, 1)} node(s) × {local_world_size} ranks); pick a divisor"
            )
    if fsdp.hybrid_shard_group_size is not None and fsdp.sharding_strategy != "HYBRID_SHARD":
        d.warnings.append(f"hybrid_shard_group_size is ignored with sharding_strategy {fsdp.sharding_strategy!r}")
    if fsdp.cpu_offload:
        if not cuda:
            d.problems.append(
                "cpu_offload needs CUDA devices (FSDP2's CPUOffloadPolicy copies parameters to the GPU to compute); "
                "on this CPU-only machine the state is already in host memory: set cpu_offload false"
            )
        if fsdp.parallelism == "ddp":
            d.problems.append("cpu_offload with parallelism 'ddp': DDP cannot offload; use parallelism 'fsdp'")
        if training.backend == "nccl" and training.max_grad_norm is not None:
            d.problems.append(
                "cpu_offload with gradient clipping on an NCCL-only group: the norm of CPU gradients needs a gloo "
                "group; set backend 'auto' (cpu:gloo,cuda:nccl) or max_grad_norm null"
            )
    _check_dtypes(training, d)
    split = world_size * training.grad_accum_steps
    if training.batch_size % split:
        d.problems.append(
            f"batch_size={training.batch_size!r} does not split over {world_size} ranks × "
            f"{training.grad_accum_steps} accumulation steps; use a multiple of {split}"
        )
    _check_model(training, d, input_dim)
    return d


def _check_model(training: TrainingConfig, d: Diagnosis, input_dim: int) -> None:
    lm = training.causal_lm
    if training.model == "causal_lm":
        if lm.preset not in PRESETS:
            d.problems.append(f"causal_lm.preset {lm.preset!r} is unknown; expected one of {sorted(PRESETS)}")
            return
        if lm.seq_len > PRESETS[lm.preset]["max_position_embeddings"]:
            d.problems.append(
                f"causal_lm.seq_len={lm.seq_len!r} exceeds preset {lm.preset!r}'s context of "
                f"{PRESETS[lm.preset]['max_position_embeddings']}"
            )
    try:
        built = build_model(training.model, preset=lm.preset, input_dim=input_dim,
                            hidden_sizes=training.tabular.hidden_sizes, dropout=training.tabular.dropout, meta=True)
    except TrainingError as exc:
        d.problems.append(str(exc))
        return
    units = wrap_units(built.module, training.fsdp)
    policy = training.fsdp.wrap_policy
    if training.fsdp.parallelism == "fsdp" and policy.kind == "transformer" and not units:
        d.problems.append(
            f"wrap_policy.transformer_layer_cls {list(policy.transformer_layer_cls)!r} names no class of the "
            f"{training.model!r} model; it contains {module_class_names(built.module)}"
        )
    elif training.fsdp.parallelism == "fsdp" and not units:
        d.warnings.append(
            f"wrap_policy min_num_params={policy.min_num_params!r} selects no submodule: only the root is sharded"
        )
    if training.fsdp.activation_checkpointing and not units:
        d.warnings.append("activation_checkpointing has no wrapped unit to checkpoint")


def preflight(training: TrainingConfig, *, world_size: int, local_world_size: int,
              gpu_memory_gb: float | None = None) -> Diagnosis:
    """The doctor as ``mlops train run`` calls it: on CUDA, also refuse a plan that does not fit.

    Raises:
        DoctorError: listing every problem found.
    """
    import torch

    cuda = torch.cuda.is_available()
    d = diagnose(training, world_size=world_size, local_world_size=local_world_size, cuda=cuda)
    if d.ok and cuda:
        from mlops_training.planner import GIB, HEADROOM, estimate, shape_for

        memory = gpu_memory_gb * GIB if gpu_memory_gb else torch.cuda.get_device_properties(0).total_memory
        strategy = "DDP" if training.fsdp.parallelism == "ddp" else training.fsdp.sharding_strategy
        shard = 1 if strategy == "DDP" else shard_group_size(training.fsdp, world_size, local_world_size)
        est = estimate(shape_for(training), strategy=strategy, param_dtype=training.fsdp.mixed_precision.param_dtype,
                       cpu_offload=training.fsdp.cpu_offload, ac=training.fsdp.activation_checkpointing,
                       world_size=world_size, shard=shard, gpus_per_node=local_world_size,
                       micro_batch=max(training.batch_size // (world_size * training.grad_accum_steps), 1),
                       seq_len=training.causal_lm.seq_len, gpu_memory_bytes=int(memory))
        if not est.fits:
            d.problems.append(
                f"{strategy} needs about {est.per_gpu_bytes / GIB:.1f} GiB per GPU, more than {HEADROOM:.0%} of "
                f"{memory / GIB:.1f} GiB; see `mlops train plan` for combinations that fit"
            )
    d.raise_for_problems()
    return d
