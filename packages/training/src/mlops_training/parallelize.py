"""FSDP2 from a resolved :class:`~mlops_training.shard_plan.ShardPlan`: process group, device mesh,
``fully_shard`` units, prefetch, DDP baseline.

| FSDP1 knob                | FSDP2 here                                                        |
| ------------------------- | ----------------------------------------------------------------- |
| sharding_strategy         | the plan's mesh and ``reshard_after_forward`` (see ``shard_plan``) |
| mixed_precision           | ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``               |
| cpu_offload               | ``CPUOffloadPolicy()``                                            |
| wrap_policy               | which submodules get their own ``fully_shard`` call               |
| backward/forward_prefetch | ``set_modules_to_backward_prefetch`` / ``..._forward_prefetch``   |
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlops_config import FSDPConfig
from mlops_training.errors import TrainingError

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from mlops_training.shard_plan import ShardPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dist:
    """Where this process sits: rank, world size, local rank, device and backend."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_backend(backend: str, *, cuda: bool, cpu_offload: bool) -> str:
    """``auto`` → NCCL on CUDA (plus gloo for CPU tensors when offloading), gloo on CPU."""
    if backend == "auto":
        if not cuda:
            return "gloo"
        return "cpu:gloo,cuda:nccl" if cpu_offload else "nccl"
    if backend == "nccl" and not cuda:
        raise TrainingError("backend 'nccl' was configured but this machine has no CUDA device; use 'auto' or 'gloo'")
    return backend


def init_distributed(backend: str, *, cpu_offload: bool = False) -> Dist:
    """Join the process group torchrun set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``... in the env).

    A single process started without torchrun gets a world of one.
    """
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    chosen = resolve_backend(backend, cuda=cuda, cpu_offload=cpu_offload)
    if not dist.is_initialized():
        dist.init_process_group(backend=chosen, **_attempt_store())
    return Dist(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                local_world_size=int(os.environ["LOCAL_WORLD_SIZE"]), device=device, backend=chosen)


def _attempt_store() -> dict[str, Any]:
    """Under torchrun, a store namespaced by restart attempt.

    After a restart the agent's store still holds the failed attempt's gloo addresses; without a per-attempt
    prefix the new workers can read them and fail to connect ("Connection refused").
    """
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    base = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                    timeout=timedelta(minutes=10))
    return {"store": PrefixStore(f"mlops/attempt_{attempt}", base), "rank": rank, "world_size": world}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_mesh(plan: ShardPlan, dist_info: Dist) -> DeviceMesh:
    """The plan's device mesh: 1-D ``(shard,)`` or 2-D ``(replicate, shard)``."""
    from torch.distributed.device_mesh import init_device_mesh

    if plan.world_size != dist_info.world_size:
        raise TrainingError(f"the shard plan is for {plan.world_size!r} ranks but this job has "
                            f"{dist_info.world_size!r}; resolve it from the running world")
    return init_device_mesh(dist_info.device.type, plan.mesh_shape, mesh_dim_names=plan.mesh_dim_names)


def _dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def wrap_units(model: torch.nn.Module, fsdp: FSDPConfig) -> list[torch.nn.Module]:
    """Submodules that become their own FSDP unit, in forward order (the root is not included).

    ``transformer``: every instance of the named classes. ``size``: the smallest subtrees that hold at least
    ``min_num_params`` parameters (a unit never contains another unit).
    """
    policy = fsdp.wrap_policy
    if policy.kind == "transformer":
        names = set(policy.transformer_layer_cls)
        return [m for m in model.modules() if type(m).__name__ in names]
    units: list[torch.nn.Module] = []
    claimed: set[int] = set()

    def visit(module: torch.nn.Module) -> int:
        """Unclaimed parameters in ``module``'s subtree after its children claimed theirs."""
        free = sum(visit(child) for child in module.children())
        free += sum(p.numel() for p in module.parameters(recurse=False))
        if module is not model and free >= policy.min_num_params and id(module) not in claimed:
            units.append(module)
            claimed.add(id(module))
            return 0
        return free

    visit(model)
    order = {id(m): i for i, m in enumerate(model.modules())}
    return sorted(units, key=lambda m: order[id(m)])


def checkpoint_activations(units: list[torch.nn.Module]) -> None:
    """Recompute each unit's activations in backward (non-reentrant); parameter names do not change."""
    from torch.utils.checkpoint import checkpoint

    for unit in units:
        inner = unit.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        unit.forward = forward


def apply_parallelism(model: torch.nn.Module, plan: ShardPlan, fsdp: FSDPConfig, dist_info: Dist) -> torch.nn.Module:
    """Shard (FSDP2) or replicate (DDP) ``model`` in place per ``plan`` (units and prefetch from ``fsdp``);
    returns the module to train.

    Raises:
        TrainingError: a transformer wrap policy names classes the model does not contain.
    """
    units = wrap_units(model, fsdp)
    if fsdp.wrap_policy.kind == "transformer" and not units:
        from mlops_training.zoo import module_class_names

        raise TrainingError(
            f"wrap_policy.transformer_layer_cls {list(fsdp.wrap_policy.transformer_layer_cls)!r} matches no "
            f"submodule; the model contains {module_class_names(model)}"
        )
    if plan.activation_checkpointing:
        checkpoint_activations(units)
    on_meta = any(p.is_meta for p in model.parameters())
    if not on_meta:
        model.to(dist_info.device)  # a meta model gets storage for its own shards later (``to_empty``)
    if plan.ddp:
        if on_meta:
            raise TrainingError("a model built on the meta device (a pretrained checkpoint) needs FSDP: DDP "
                                "would need the whole model on every rank; set training.fsdp.parallelism=fsdp")
        from torch.nn.parallel import DistributedDataParallel

        ids = [dist_info.device.index] if dist_info.device.type == "cuda" else None
        # Gradients live in DDP's buckets (no second copy): what the planner counts for DDP.
        return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mesh = resolve_mesh(plan, dist_info)
    mp = MixedPrecisionPolicy(param_dtype=_dtype(plan.param_dtype), reduce_dtype=_dtype(plan.reduce_dtype))
    offload = CPUOffloadPolicy() if plan.cpu_offload else OffloadPolicy()
    reshard = plan.reshard_after_forward
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=reshard)
    # The root (embeddings, head) is used again right after forward: keep it gathered.
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=False)
    _set_prefetch(units, fsdp)
    log.debug("fully_shard: %d units + root, mesh %s, reshard_after_forward=%s", len(units), mesh, reshard)
    return model


def _set_prefetch(units: list[torch.nn.Module], fsdp: FSDPConfig) -> None:
    if len(units) < 2:
        return
    if fsdp.forward_prefetch:
        for cur, nxt in itertools.pairwise(units):
            cur.set_modules_to_forward_prefetch([nxt])  # type: ignore[operator]
    for cur, prev in zip(units[1:], units, strict=False):
        # FSDP2 has a single backward prefetch (issued before the current unit's gradient computation),
        # so BACKWARD_PRE and BACKWARD_POST both map onto it; NONE disables it.
        cur.set_modules_to_backward_prefetch([] if fsdp.backward_prefetch == "NONE" else [prev])  # type: ignore[operator]


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float | None) -> float:
    """Global gradient norm over every shard (a DTensor norm is reduced across the mesh), then clip.

    Returns the norm before clipping. With ``max_norm=None`` only the norm is computed.
    """
    import torch
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False, foreach=None)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, total)
    return float(total)
