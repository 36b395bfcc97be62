"""Pre-flight doctor: configs known to fail are refused before a single worker starts.

Checks the FSDP section against the real model (built on the meta device) and the world it will run in:
shard groups, wrap classes, offload + clipping on an NCCL-only group, dtype combinations, batch split,
backend vs hardware, and (on GPUs) whether the planner says it fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlops_config import TrainingConfig
from mlops_model import kind_of
from mlops_training.errors import DoctorError, TrainingError
from mlops_training.parallelize import wrap_units
from mlops_training.planner import GIB, HEADROOM, estimate, plan, shape_for
from mlops_training.shard_plan import ShardPlan
from mlops_training.spec import train_spec
from mlops_training.zoo import PRESETS, module_class_names

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


def _check_dtypes(training: TrainingConfig, shard_plan: ShardPlan | None, d: Diagnosis) -> None:
    mp = training.fsdp.mixed_precision
    if shard_plan is not None and shard_plan.ddp and (mp.param_dtype, mp.reduce_dtype) != ("float32", "float32"):
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
    shard_plan: ShardPlan | None = None
    try:
        shard_plan = ShardPlan.resolve(training, world_size=world_size, ranks_per_node=local_world_size)
    except TrainingError as exc:
        d.problems.append(str(exc))
    else:
        d.warnings.extend(shard_plan.ignored)
    ddp = shard_plan is not None and shard_plan.ddp
    if fsdp.cpu_offload:
        if not cuda:
            d.problems.append(
                "cpu_offload needs CUDA devices (FSDP2's CPUOffloadPolicy copies parameters to the GPU to compute); "
                "on this CPU-only machine the state is already in host memory: set cpu_offload false"
            )
        if ddp:
            d.problems.append("cpu_offload with parallelism 'ddp': DDP cannot offload; use parallelism 'fsdp'")
        if training.backend == "nccl" and training.max_grad_norm is not None:
            d.problems.append(
                "cpu_offload with gradient clipping on an NCCL-only group: the norm of CPU gradients needs a gloo "
                "group; set backend 'auto' (cpu:gloo,cuda:nccl) or max_grad_norm null"
            )
    _check_dtypes(training, shard_plan, d)
    split = world_size * training.grad_accum_steps
    if training.batch_size % split:
        d.problems.append(
            f"batch_size={training.batch_size!r} does not split over {world_size} ranks × "
            f"{training.grad_accum_steps} accumulation steps; use a multiple of {split}"
        )
    _check_model(training, shard_plan, d, input_dim)
    return d


def _check_model(training: TrainingConfig, shard_plan: ShardPlan | None, d: Diagnosis, input_dim: int) -> None:
    spec = train_spec(kind_of(training))
    own = spec.problems(training)
    d.problems.extend(own)
    try:
        built = spec.shape(training, input_dim)
    except TrainingError as exc:
        if not own:  # the family's own problems already say why it cannot be built
            d.problems.append(str(exc))
        return
    units = wrap_units(built.module, training.fsdp)
    policy = training.fsdp.wrap_policy
    sharded = shard_plan is not None and not shard_plan.ddp
    if sharded and policy.kind == "transformer" and not units:
        d.problems.append(
            f"wrap_policy.transformer_layer_cls {list(policy.transformer_layer_cls)!r} names no class of the "
            f"{training.model!r} model; it contains {module_class_names(built.module)}"
        )
    elif sharded and not units:
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
        memory = gpu_memory_gb * GIB if gpu_memory_gb else torch.cuda.get_device_properties(0).total_memory
        shard_plan = ShardPlan.resolve(training, world_size=world_size, ranks_per_node=local_world_size)
        est = estimate(shape_for(training), shard_plan,
                       micro_batch=max(training.batch_size // (world_size * training.grad_accum_steps), 1),
                       seq_len=training.causal_lm.seq_len, gpu_memory_bytes=int(memory))
        if not est.fits:
            d.problems.append(
                f"{shard_plan.strategy} needs about {est.per_gpu_bytes / GIB:.1f} GiB per GPU, more than "
                f"{HEADROOM:.0%} of {memory / GIB:.1f} GiB; see `mlops train plan` for combinations that fit"
            )
    d.raise_for_problems()
    return d


def plan_report(training: TrainingConfig, target: str, *, gpus: int, gpu_memory_gb: float, nodes: int = 1,
                seq_len: int | None = None, micro_batch: int | None = None) -> dict[str, Any]:
    """:func:`~mlops_training.planner.plan` for a LLaMA preset name or the configured model, plus the doctor's
    verdict on the configured FSDP section at ``gpus × nodes`` ranks (as ``doctor: {problems, warnings}``)."""
    preset = target if target in PRESETS else None
    checked = training
    if preset is not None:
        lm = training.causal_lm.model_copy(update={
            "preset": preset, "seq_len": min(seq_len or PRESETS[preset]["max_position_embeddings"],
                                             PRESETS[preset]["max_position_embeddings"])})
        checked = training.model_copy(update={"model": "causal_lm", "causal_lm": lm})
    report = plan(checked, gpus=gpus, gpu_memory_gb=gpu_memory_gb, nodes=nodes, preset=preset, seq_len=seq_len,
                  micro_batch=micro_batch)
    verdict = diagnose(checked, world_size=gpus * nodes, local_world_size=gpus, cuda=True)
    report["doctor"] = {"problems": verdict.problems, "warnings": verdict.warnings}
    return report
