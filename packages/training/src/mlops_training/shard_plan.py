"""The parallelism of one job, resolved once: the only reader of ``training.fsdp.sharding_strategy``.

Like torchtitan's ``ParallelDims``, the config's vocabulary (FSDP1 strategy names, DDP vs FSDP, the hybrid
group size, ``reshard_after_forward`` left to the strategy) is turned into plain degrees and flags here, and
every consumer (``parallelize``, ``planner``, ``doctor``, ``accelerate_config``, the worker) reads those:

| strategy      | mesh                                   | reshard_after_forward (default) |
| ------------- | -------------------------------------- | ------------------------------- |
| DDP           | none (``DistributedDataParallel``)     | n/a (False)                     |
| FULL_SHARD    | 1-D ``(shard=world,)``                 | True                            |
| SHARD_GRAD_OP | 1-D ``(shard=world,)``                 | False                           |
| HYBRID_SHARD  | 2-D ``(replicate, shard=group)``       | True                            |
| NO_SHARD      | 2-D ``(replicate=world, shard=1)``     | False                           |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from mlops_config import FSDPConfig, TrainingConfig
from mlops_training.errors import TrainingError

STRATEGIES = ("DDP", "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD")
"""Every strategy a plan can have: DDP plus the FSDP1 names the config accepts."""

_RESHARD_BY_DEFAULT = ("FULL_SHARD", "HYBRID_SHARD")
_TWO_D = ("HYBRID_SHARD", "NO_SHARD")


class ShardPlanError(TrainingError):
    """The configured strategy cannot be laid out over the world size (e.g. a shard group that does not divide)."""


@dataclass(frozen=True)
class ShardPlan:
    """Degrees and policies of one job's data parallelism; build it with :meth:`resolve`."""

    strategy: str
    """What runs: ``DDP`` (``parallelism: ddp``) or the FSDP1 strategy name."""
    sharding_strategy: str
    """The configured FSDP1 name as written (recorded in lineage even under DDP)."""
    world_size: int
    """Ranks in the job."""
    nodes: int
    """Nodes (``world_size // ranks_per_node``)."""
    ranks_per_node: int
    """Ranks per node (torchrun's ``--nproc-per-node``, the local world size)."""
    dp_replicate: int
    """Copies of the parameters (the mesh's ``replicate`` degree)."""
    dp_shard: int
    """Ranks one copy of the parameters is sharded over (1 for DDP and NO_SHARD)."""
    reshard_after_forward: bool
    """Free gathered parameters after forward (the config's override, else the strategy's default)."""
    cpu_offload: bool
    """Sharded state lives in host memory (FSDP2 ``CPUOffloadPolicy``)."""
    param_dtype: str
    """Dtype parameters are gathered and computed in."""
    reduce_dtype: str
    """Dtype gradients are reduced in."""
    activation_checkpointing: bool
    """Recompute each unit's activations in backward."""
    ignored: tuple[str, ...] = ()
    """Configured settings this strategy does not use, as sentences (the doctor shows them as warnings)."""

    @classmethod
    def resolve(cls, training: TrainingConfig, *, world_size: int | None = None,
                ranks_per_node: int | None = None) -> ShardPlan:
        """The plan of ``training`` over ``world_size`` ranks (default ``nproc × nnodes``), ``ranks_per_node`` each.

        Raises:
            ShardPlanError: the shard group does not divide the world size.
        """
        return cls.from_fsdp(training.fsdp, world_size=world_size or training.nproc * training.nnodes,
                             ranks_per_node=ranks_per_node or training.nproc)

    @classmethod
    def from_fsdp(cls, fsdp: FSDPConfig, *, world_size: int, ranks_per_node: int) -> ShardPlan:
        """:meth:`resolve` from the ``fsdp`` section alone."""
        if world_size < 1 or ranks_per_node < 1:
            raise ShardPlanError(f"world size {world_size!r} and ranks per node {ranks_per_node!r} must be positive")
        configured = fsdp.sharding_strategy
        strategy = "DDP" if fsdp.parallelism == "ddp" else configured
        if strategy in ("DDP", "NO_SHARD"):
            shard = 1
        elif strategy == "HYBRID_SHARD":
            shard = fsdp.hybrid_shard_group_size or ranks_per_node
        else:
            shard = world_size
        if shard > world_size or world_size % shard:
            raise ShardPlanError(
                f"hybrid_shard_group_size={shard!r} does not divide world size {world_size!r} "
                f"({world_size // ranks_per_node} node(s) × {ranks_per_node} ranks); pick a divisor"
            )
        reshard = fsdp.reshard_after_forward
        if reshard is None:
            reshard = strategy in _RESHARD_BY_DEFAULT
        ignored: tuple[str, ...] = ()
        if fsdp.hybrid_shard_group_size is not None and configured != "HYBRID_SHARD":
            ignored = (f"hybrid_shard_group_size is ignored with sharding_strategy {configured!r}",)
        mp = fsdp.mixed_precision
        return cls(strategy=strategy, sharding_strategy=configured, world_size=world_size,
                   nodes=max(world_size // ranks_per_node, 1), ranks_per_node=ranks_per_node,
                   dp_replicate=world_size // shard, dp_shard=shard, reshard_after_forward=bool(reshard) and
                   strategy != "DDP", cpu_offload=fsdp.cpu_offload, param_dtype=mp.param_dtype,
                   reduce_dtype=mp.reduce_dtype, activation_checkpointing=fsdp.activation_checkpointing,
                   ignored=ignored)

    @classmethod
    def candidates(cls, fsdp: FSDPConfig, *, world_size: int, ranks_per_node: int) -> Iterator[ShardPlan]:
        """One plan per strategy at its default resharding (HYBRID_SHARD left out where it equals FULL_SHARD)."""
        for strategy in STRATEGIES:
            update = ({"parallelism": "ddp"} if strategy == "DDP"
                      else {"parallelism": "fsdp", "sharding_strategy": strategy})
            try:
                plan = cls.from_fsdp(fsdp.model_copy(update={**update, "reshard_after_forward": None}),
                                     world_size=world_size, ranks_per_node=ranks_per_node)
            except ShardPlanError:
                continue  # a hybrid group that does not divide the world: the doctor reports it
            if plan.hybrid and plan.dp_replicate == 1:
                continue  # one shard group over the whole world is FULL_SHARD
            yield plan

    def with_policies(self, *, param_dtype: str, cpu_offload: bool, activation_checkpointing: bool) -> ShardPlan:
        """The same layout with other mixed-precision / offload / checkpointing choices (the planner's grid)."""
        return dataclasses.replace(self, param_dtype=param_dtype, cpu_offload=cpu_offload,
                                   activation_checkpointing=activation_checkpointing)

    @property
    def parallelism(self) -> str:
        """``ddp`` or ``fsdp``, as the config names it."""
        return "ddp" if self.ddp else "fsdp"

    @property
    def ddp(self) -> bool:
        """Plain ``DistributedDataParallel``, no FSDP."""
        return self.strategy == "DDP"

    @property
    def hybrid(self) -> bool:
        """HSDP: sharded within a group, replicated across groups."""
        return self.strategy == "HYBRID_SHARD"

    @property
    def fully_replicated(self) -> bool:
        """Every rank holds every parameter between steps (DDP, NO_SHARD): what Accelerate calls DDP."""
        return self.strategy in ("DDP", "NO_SHARD")

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The FSDP2 device mesh: ``(replicate, shard)`` for HYBRID_SHARD / NO_SHARD, ``(shard,)`` otherwise."""
        return (self.dp_replicate, self.dp_shard) if self.strategy in _TWO_D else (self.world_size,)

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        return ("replicate", "shard") if self.strategy in _TWO_D else ("shard",)

    def preference(self, nodes: int) -> int:
        """Rank among strategies when several fit (lower is better): least communication first; across nodes
        HYBRID_SHARD keeps the all-gathers inside a node."""
        order = (("DDP", "HYBRID_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "NO_SHARD") if nodes > 1
                 else ("DDP", "SHARD_GRAD_OP", "FULL_SHARD", "NO_SHARD", "HYBRID_SHARD"))
        return order.index(self.strategy)
