"""Memory planner: per-GPU bytes of every strategy × mixed precision × CPU offload × activation checkpointing.

The model is built on the meta device (shapes only). Per rank it counts, from the real parameter shapes:

- **model state** — fp32 parameters, gradients and AdamW state (two moments + a step per tensor), each
  sharded on dim 0 the way FSDP2 shards (``ceil(dim0 / shard) × rest`` on the largest rank), or whole for
  DDP / NO_SHARD; zero on the GPU with CPU offload (then it is counted per node as host memory);
- **gathered** — unsharded parameters in ``param_dtype`` (the largest unit plus the root, twice with
  prefetch; every unit under SHARD_GRAD_OP / NO_SHARD) and the largest unit's unsharded gradient;
- **activations** — per token per decoder layer ``(11·hidden + 4·intermediate)`` elements in ``param_dtype``
  (hidden-state saves of the norms, projections, rotary q/k, attention output, SwiGLU), or only the layer
  input with activation checkpointing (plus one layer being recomputed), and the logits (``param_dtype`` +
  fp32 copy + fp32 gradient).

The model-state figure is what a test checks against tensors measured on CPU (within 15%).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mlops_config import FSDPConfig, TrainingConfig
from mlops_model import kind_of
from mlops_training.errors import TrainingError
from mlops_training.parallelize import wrap_units
from mlops_training.shard_plan import ShardPlan
from mlops_training.spec import TrainSpec, train_spec
from mlops_training.zoo import PRESETS, build_model, count_parameters

if TYPE_CHECKING:
    import torch

GIB = 1 << 30
HEADROOM = 0.90
"""Fraction of GPU memory a plan may use (CUDA context, allocator fragmentation, NCCL buffers)."""

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Estimate:
    """Per-GPU bytes of one combination, by component."""

    sharding_strategy: str
    param_dtype: str
    cpu_offload: bool
    activation_checkpointing: bool
    params: int
    grads: int
    optimizer: int
    gathered: int
    activations: int
    host_bytes_per_node: int
    per_gpu_bytes: int
    fits: bool
    preference: int
    """The strategy's rank when several fit (``ShardPlan.preference``)."""

    @property
    def model_state_bytes(self) -> int:
        return self.params + self.grads + self.optimizer


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs from a meta-device model."""

    parameters: int
    param_shapes: list[tuple[int, ...]]
    largest_unit: int
    root_params: int
    unit_params: list[int]
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    widths: list[int]


def describe_model(model: torch.nn.Module, fsdp: FSDPConfig, architecture: dict[str, Any]) -> ModelShape:
    """Shapes, FSDP units and LLaMA dimensions of a (meta) model."""
    units = wrap_units(model, fsdp)
    unit_params = [sum(p.numel() for p in u.parameters()) for u in units]
    total = count_parameters(model)
    return ModelShape(
        parameters=total, param_shapes=[tuple(p.shape) for p in model.parameters()],
        largest_unit=max(unit_params, default=0), root_params=total - sum(unit_params), unit_params=unit_params,
        layers=int(architecture.get("num_hidden_layers", 0)), hidden=int(architecture.get("hidden_size", 0)),
        intermediate=int(architecture.get("intermediate_size", 0)), vocab=int(architecture.get("vocab_size", 0)),
        widths=[int(w) for w in architecture.get("hidden_sizes", [])] + [1],
    )


def sharded_numel(shapes: list[tuple[int, ...]], shard: int) -> int:
    """Elements the largest rank holds when each tensor is chunked on dim 0 over ``shard`` ranks."""
    total = 0
    for shape in shapes:
        if not shape:
            total += 1
            continue
        rest = math.prod(shape[1:])
        total += math.ceil(shape[0] / shard) * rest
    return total


def estimate(shape: ModelShape, shard_plan: ShardPlan, *, micro_batch: int, seq_len: int, prefetch: bool = True,
             gpu_memory_bytes: int | None = None) -> Estimate:
    """Per-GPU bytes of ``shard_plan`` for ``shape`` (see the module docstring for the model)."""
    pb = _BYTES[shard_plan.param_dtype]
    reduce_bytes = _BYTES[shard_plan.reduce_dtype]
    ac = shard_plan.activation_checkpointing
    local = shape.parameters if shard_plan.ddp else sharded_numel(shape.param_shapes, shard_plan.dp_shard)
    tensors = len(shape.param_shapes)
    params, grads, optim = 4 * local, 4 * local, 8 * local + 4 * tensors
    host = 0
    if shard_plan.cpu_offload:
        host = (params + grads + optim) * shard_plan.ranks_per_node
        params = grads = optim = 0
    if shard_plan.ddp:
        gathered = 0
    elif not shard_plan.reshard_after_forward:  # every unit stays gathered from forward to backward
        gathered = shape.parameters * pb + shape.largest_unit * reduce_bytes
    else:
        gathered = ((shape.largest_unit * (2 if prefetch else 1) + shape.root_params) * pb
                    + shape.largest_unit * reduce_bytes)
    tokens = micro_batch * seq_len
    if shape.layers:
        per_layer = (11 * shape.hidden + 4 * shape.intermediate) * pb
        layer_acts = (shape.hidden * pb * shape.layers + per_layer) if ac else per_layer * shape.layers
        acts = tokens * (layer_acts + shape.hidden * pb + shape.vocab * (pb + 8))
    else:
        acts = micro_batch * sum(shape.widths) * 4 * (1 if ac else 3)
    total = params + grads + optim + gathered + acts
    fits = gpu_memory_bytes is None or total <= HEADROOM * gpu_memory_bytes
    return Estimate(shard_plan.strategy, shard_plan.param_dtype, shard_plan.cpu_offload, ac, params, grads, optim,
                    gathered, acts, host, total, fits, shard_plan.preference(shard_plan.nodes))


def shape_for(training: TrainingConfig, *, preset: str | None = None, input_dim: int = 32) -> ModelShape:
    """Build the configured model (or a LLaMA ``preset``) on the meta device and describe it."""
    fsdp = training.fsdp
    if preset is not None:  # a named shape is planned with one unit per decoder layer
        built = build_model("causal_lm", preset=preset, meta=True)
        fsdp = fsdp.model_copy(update={"wrap_policy": fsdp.wrap_policy.model_copy(
            update={"kind": "transformer", "transformer_layer_cls": ("LlamaDecoderLayer",)})})
    else:
        built = _spec(training).shape(training, input_dim)
    return describe_model(built.module, fsdp, built.architecture)


def _spec(training: TrainingConfig) -> TrainSpec:
    return train_spec(kind_of(training))


def _order(e: Estimate) -> tuple[int, int, int, int]:
    return (int(e.cpu_offload), int(e.activation_checkpointing), e.preference, 0 if e.param_dtype == "bfloat16" else 1)


def plan(training: TrainingConfig, *, gpus: int, gpu_memory_gb: float, nodes: int = 1, preset: str | None = None,
         seq_len: int | None = None, micro_batch: int | None = None) -> dict[str, Any]:
    """Estimate every combination for ``gpus`` GPUs per node × ``nodes``; say which fit and recommend one.

    Returns:
        ``{"model", "parameters", "world_size", "gpu_memory_bytes", "seq_len", "micro_batch", "strategies":
        [...], "recommended": {...} | None}``; each strategy row has ``sharding_strategy, param_dtype,
        cpu_offload, activation_checkpointing, per_gpu_bytes, fits`` and the breakdown.
    """
    if gpus < 1 or nodes < 1 or gpu_memory_gb <= 0:
        raise TrainingError(
            f"--gpus {gpus!r}, --nodes {nodes!r} and --gpu-memory-gb {gpu_memory_gb!r} must all be positive"
        )
    shape = shape_for(training, preset=preset)
    world = gpus * nodes
    seq = seq_len or (PRESETS[preset]["max_position_embeddings"] if preset else training.causal_lm.seq_len)
    # A named shape is planned at its own context length and one sequence per GPU unless told otherwise.
    mb = micro_batch or (1 if preset else max(training.batch_size // (world * training.grad_accum_steps), 1))
    capacity = int(gpu_memory_gb * GIB)
    # Every candidate is estimated with float32 reductions, as before the plan existed.
    fsdp = training.fsdp.model_copy(update={"mixed_precision": training.fsdp.mixed_precision.model_copy(
        update={"reduce_dtype": "float32"})})
    rows: list[Estimate] = []
    for layout in ShardPlan.candidates(fsdp, world_size=world, ranks_per_node=gpus):
        for dtype in ("float32",) if layout.ddp else ("float32", "bfloat16"):
            for offload in (False,) if layout.ddp else (False, True):
                for ac in (False, True):
                    candidate = layout.with_policies(param_dtype=dtype, cpu_offload=offload,
                                                     activation_checkpointing=ac)
                    rows.append(estimate(shape, candidate, micro_batch=mb, seq_len=seq, gpu_memory_bytes=capacity))
    fitting = sorted((e for e in rows if e.fits), key=_order)
    model_name = preset or _spec(training).plan_name(training)
    return {"model": model_name, "parameters": shape.parameters, "world_size": world, "nodes": nodes,
            "gpus_per_node": gpus, "gpu_memory_bytes": capacity, "headroom": HEADROOM, "seq_len": seq,
            "micro_batch": mb, "strategies": [_row(e) for e in rows],
            "recommended": _row(fitting[0]) if fitting else None}


def _row(e: Estimate) -> dict[str, Any]:
    row = asdict(e)
    row["model_state_bytes"] = e.model_state_bytes
    return row
