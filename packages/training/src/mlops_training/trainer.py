"""The training loop every model family shares: AdamW, warm-up + cosine LR, gradient accumulation,
clipping across shards, eval every N steps, checkpoints, resume, export of the full state dict on rank 0.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mlops_config import TrainingConfig
from mlops_core import Progress
from mlops_training.checkpoint import Checkpointer, latest_checkpoint
from mlops_training.errors import TrainingError
from mlops_training.parallelize import Dist, apply_parallelism, clip_grad_norm

if TYPE_CHECKING:
    import torch

    from mlops_model import ManifestSeal
    from mlops_training.shard_plan import ShardPlan
    from mlops_training.tasks import Task
    from mlops_training.zoo import BuiltModel

log = logging.getLogger(__name__)


@dataclass
class TrainOutcome:
    """What one worker knows at the end; rank 0's ``full_state`` is the gathered model (others: empty)."""

    built: BuiltModel
    full_state: dict[str, torch.Tensor]
    steps: int
    resumed_from_step: int | None
    history: dict[str, list[list[float]]]
    final_metrics: dict[str, float]
    system: dict[str, float]
    manifest: dict[str, Any] | None
    per_rank: list[dict[str, float]] = field(default_factory=list)
    trajectory: dict[str, str] = field(default_factory=dict)
    """Step (as text) → SHA-256 of the full weights after it (:func:`mlops_model.weights_hash`), rank 0 only:
    the recorded ``trajectory_steps`` and the last step. The reproducibility gate replays a prefix and must
    reproduce the hash recorded at its step."""
    trajectory_sketch: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Same steps → :func:`mlops_model.weights_sketch` of the weights: what the gate compares within
    ``evaluation.repro_gpu_rtol`` on GPU, where the hash is not reproducible."""


def lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up from ``1/(warmup+1)`` to 1 over ``warmup`` steps, then cosine decay to 0.1."""

    def fn(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = (step - warmup) / max(total - warmup, 1)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return fn


def total_steps(training: TrainingConfig, steps_per_epoch: int | None) -> int:
    """``max_steps``, capped by ``epochs`` passes when both are known."""
    if training.epochs and steps_per_epoch:
        return min(training.max_steps, training.epochs * steps_per_epoch)
    return training.max_steps


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the storages this rank allocated for parameters, gradients and optimizer state.

    Counts each underlying storage once (FSDP2's padded shard buffers, DDP's gradient buckets), so it is
    what the process really holds, not what the planner assumes.
    """
    import torch
    from torch.distributed.tensor import DTensor

    seen: set[int] = set()

    def nbytes(tensors: list[torch.Tensor]) -> int:
        total = 0
        for t in tensors:
            local = t.to_local() if isinstance(t, DTensor) else t
            storage = local.untyped_storage()
            if storage.data_ptr() in seen or storage.nbytes() == 0:
                continue
            seen.add(storage.data_ptr())
            total += storage.nbytes()
        return total

    params = nbytes([p.data if not isinstance(p, DTensor) else p for p in model.parameters()])
    grads = nbytes([p.grad for p in model.parameters() if p.grad is not None])
    optim = nbytes([v for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor)])
    return {"params": params, "grads": grads, "optimizer": optim, "total": params + grads + optim}


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated bytes on CUDA; peak resident set size of the process on CPU."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _progress(enabled: bool, total: int, start: int, unit: str, every_s: float = 30.0) -> Progress:
    """Rank 0's progress (:class:`mlops_core.Progress`): a live bar on a terminal; elsewhere (a CI log, a
    pipeline's step log) a line in the worker's log every 5 % of the steps, at least every ``every_s`` seconds,
    and at the last step: ``step 5/100 loss 0.2000 samples/s 1000 eta 12s``."""
    return Progress(total, "step", start=start, enabled=enabled, emit=log.info, every_s=every_s)


def _figures(loss: float, unit: str, rate: float) -> str:
    return f"loss {loss:.4f} {unit}/s {rate:.0f}"


def run_training(training: TrainingConfig, plan: ShardPlan, task: Task, dist_info: Dist, run_dir: Path, *,
                 seed: int, describe: dict[str, Any], trajectory_steps: Sequence[int] = (),
                 seal: ManifestSeal | None = None) -> TrainOutcome:
    """Train ``task`` per ``training`` laid out by ``plan`` (resuming from the newest checkpoint in ``run_dir``)
    and gather the model; the weights hash is recorded after each of ``trajectory_steps`` and at the end.

    ``training.stop_after_steps`` ends the loop early with the schedule of the full run (a replay). ``seal`` (rank
    0's) signs each checkpoint's manifest and is checked before a resume unpickles anything."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    torch.manual_seed(seed)  # identical initial weights on every rank
    built = task.build()
    model = apply_parallelism(built.module, plan, training.fsdp, dist_info)
    if built.materialize is not None:
        built.materialize(model)  # pretrained weights straight into the shards
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=training.lr, weight_decay=training.weight_decay)
    steps = total_steps(training, task.steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(training.warmup_steps, steps))
    ckpt = Checkpointer(run_dir, dist_info, keep_last=training.checkpoint.keep_last,
                        async_save=training.checkpoint.async_save, describe=describe, seal=seal)
    torch.manual_seed(seed + 1 + dist_info.rank)  # per-rank stream (dropout); restored on resume
    history: dict[str, list[list[float]]] = {}
    step, resumed_from = 0, None
    trajectory: dict[str, str] = {}
    sketches: dict[str, dict[str, list[float]]] = {}
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        state = ckpt.load(latest, model, optimizer)
        scheduler.load_state_dict(state["scheduler"])
        step = resumed_from = int(state["step"])
        if step > steps:  # a checkpoint of another, longer run: resuming it would export its weights as this run's
            raise TrainingError(
                f"run folder {str(run_dir)!r} holds a checkpoint at step {step}, past this run's {steps} steps "
                f"(training.max_steps or the data changed since it was saved): train under a run name of its own "
                f"(--run-name, MLOPS_RUN_NAME) or remove that folder")
        history = state["history"]
        trajectory = dict(state.get("trajectory") or {})
        sketches = dict(state.get("trajectory_sketch") or {})
        if dist_info.is_main:
            log.info("resumed from %s (step %d, saved at world size %s)", latest, step,
                     state["manifest"]["world_size"])

    def record(name: str, value: float) -> None:
        history.setdefault(name, []).append([step, float(value)])

    ws, accum = dist_info.world_size, training.grad_accum_steps
    ddp = plan.ddp
    unit = "tokens" if task.tokens_per_sample > 1 else "samples"
    progress = _progress(dist_info.is_main, steps, step, unit)
    step_times: list[float] = []
    state_bytes = {"total": 0}
    stop = min(steps, training.stop_after_steps or steps)
    while step < stop:
        model.train()
        started = time.perf_counter()
        loss_sum = torch.zeros((), device=dist_info.device)
        for micro in range(accum):
            x, y = task.batch(step, micro, dist_info.rank, ws, accum)
            sync = ddp and micro < accum - 1
            with model.no_sync() if sync else nullcontext():  # type: ignore[operator]
                loss = task.loss(model, x, y) / accum
                loss.backward()
            loss_sum += loss.detach()
        grad_norm = clip_grad_norm(params, training.max_grad_norm)
        optimizer.step()
        if step == 0 or step == resumed_from:
            state_bytes = model_state_bytes(model, optimizer)
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        step += 1
        elapsed = time.perf_counter() - started
        step_times.append(elapsed)
        train_loss = float(loss_sum) / ws
        rate = task.samples_per_step * task.tokens_per_sample / elapsed
        for name, value in (("train_loss", train_loss), ("lr", lr), ("grad_norm", grad_norm),
                            ("step_seconds", elapsed), (f"{unit}_per_second", rate)):
            record(name, value)
        progress.update(step, _figures(train_loss, unit, rate))
        if step in trajectory_steps and step < stop:
            _record_weights(model, dist_info, trajectory, sketches, step)
        if training.eval_every and step % training.eval_every == 0 and step < stop:
            _evaluate(task, model, record)
        if training.checkpoint.every_steps and step % training.checkpoint.every_steps == 0 and step < stop:
            ckpt.save(step, model, optimizer, {"step": step, "scheduler": scheduler.state_dict(), "history": history,
                                               "trajectory": trajectory, "trajectory_sketch": sketches})
    progress.close()
    last_eval = _evaluate(task, model, record)
    if resumed_from != step:
        ckpt.save(step, model, optimizer, {"step": step, "scheduler": scheduler.state_dict(), "history": history,
                                           "trajectory": trajectory, "trajectory_sketch": sketches})
    ckpt.wait()
    manifest_path = latest_checkpoint(run_dir)
    peak = peak_memory_bytes(dist_info.device)  # before the export gathers a full copy on rank 0
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if state_bytes["total"] == 0:
        optimizer.zero_grad(set_to_none=True)
        state_bytes = model_state_bytes(model, optimizer)
    mine = {"peak_bytes": float(peak),
            "model_state_bytes": float(state_bytes["total"]),
            "step_seconds_mean": float(sum(step_times) / len(step_times)) if step_times else 0.0}
    per_rank: list[Any] = [None] * ws
    dist.all_gather_object(per_rank, mine)
    system = {"world_size": float(ws), "steps_this_attempt": float(len(step_times)),
              "peak_bytes_max_rank": max(r["peak_bytes"] for r in per_rank),
              "model_state_bytes_max_rank": max(r["model_state_bytes"] for r in per_rank),
              "step_seconds_mean": mine["step_seconds_mean"],
              f"{unit}_per_second": (task.samples_per_step * task.tokens_per_sample / mine["step_seconds_mean"]
                                     if mine["step_seconds_mean"] else 0.0)}
    manifest = json.loads((manifest_path / "manifest.json").read_text()) if manifest_path else None
    full_state: dict[str, Any] = dict(full) if dist_info.is_main else {}
    if dist_info.is_main:
        from mlops_model import weights_hash, weights_sketch

        trajectory[str(step)] = weights_hash(full_state)
        sketches[str(step)] = weights_sketch(full_state)
    return TrainOutcome(built=built, full_state=full_state, steps=step,
                        resumed_from_step=resumed_from, history=history, final_metrics=last_eval, system=system,
                        manifest=manifest, per_rank=per_rank, trajectory=trajectory, trajectory_sketch=sketches)


def _record_weights(model: torch.nn.Module, dist_info: Dist, trajectory: dict[str, str],
                    sketches: dict[str, dict[str, list[float]]], step: int) -> None:
    """Gather the full weights (a collective: every rank calls it) and record their hash and sketch on rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from mlops_model import weights_hash, weights_sketch

    # full_state_dict=True: every value is a (CPU) tensor, though the signature says a nested ValueType
    full = cast("dict[str, torch.Tensor]",
                get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))
    if dist_info.is_main:
        trajectory[str(step)] = weights_hash(full)
        sketches[str(step)] = weights_sketch(full)


def _evaluate(task: Task, model: torch.nn.Module, record: Any) -> dict[str, float]:
    model.eval()
    metrics = task.evaluate(model)
    for name, value in metrics.items():
        if math.isfinite(value):
            record(name, value)
    model.train()
    return metrics

