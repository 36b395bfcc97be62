"""One rank of ``benchmarks/llm_finetune.py``: fine-tune a Hugging Face causal LM with our FSDP2 path or with
Hugging Face Accelerate's FSDP2, on the same checkpoint, data, batch, steps, optimizer and precision.

Both sides share everything but the distributed wrapping, so the comparison is the wrapping alone:

- data and loss: ``mlops_training``'s ``SFTTask`` (right padding to ``seq_len``, loss on completion tokens only,
  the global batch's token-weighted mean), the same batches in the same order on each rank;
- optimizer: ``torch.optim.AdamW(lr, weight_decay=0)``, constant LR, no clipping;
- precision: fp32 master weights, bf16 compute (``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``).

``ours``: the model is built on the meta device, sharded by ``apply_parallelism`` (one FSDP2 unit per
``LlamaDecoderLayer`` + the root) and filled with DCP's ``HuggingFaceStorageReader`` (no rank holds the whole
model), as the platform's trainer does.

``accelerate``: ``Accelerator.prepare`` with ``FullyShardedDataParallelPlugin(fsdp_version=2, TRANSFORMER_BASED_WRAP
of LlamaDecoderLayer, cpu_ram_efficient_loading=True)``, its RAM-efficient loading: ``from_pretrained`` reads the
weights on rank 0 only (the other ranks build the model empty, as ``transformers`` does when
``ACCELERATE_USE_FSDP`` and ``FSDP_CPU_RAM_EFFICIENT_LOADING`` are set, which ``accelerate launch`` would set and
this worker sets itself), and ``prepare`` shards on the meta device and broadcasts rank 0's full state dict into
the shards. Precision is the plugin's ``MixedPrecisionPolicy`` alone, as ours: the Accelerator is made with
``mixed_precision="no"``, so no bf16 autocast is added on top. What still differs: ours never materialises the
whole model on any rank (DCP reads each rank's shard from the safetensors file), while Accelerate's rank 0 holds
the whole fp32 state dict during loading and broadcasts it; and Accelerate wraps the embedding and the
[final norm, lm_head] tail as their own FSDP units (the tail not resharded after forward), ours wraps the decoder
layers and the root. Accelerate 1.15 only switches to
FSDP for accelerator devices (CUDA, XPU, NPU...): on CPU ``AcceleratorState`` resolves to ``MULTI_CPU`` (a gloo
group, DDP) and ignores the plugin. :func:`fsdp2_accelerator` creates the Accelerator on that gloo group and
then sets the state to ``DistributedType.FSDP`` with the plugin, which is what ``AcceleratorState`` itself does
on a GPU; ``prepare`` then runs Accelerate's own ``fsdp2_prepare_model`` (``fully_shard`` over the gloo mesh).
The worker checks that the parameters really are sharded DTensors before timing.

Writes ``<out>/<impl>-rank<r>.json``: ``seconds`` (timed steps, after ``warmup`` untimed ones), ``cpu_seconds``
(CPU time of the whole process, every thread, over those steps: the work done, which other load on the machine
changes far less than the wall time), ``tokens``
(padded tokens in the timed steps, all ranks), ``losses`` (every step's global mean completion-token loss),
``peak_bytes`` (the kernel's ``VmHWM`` since just before the model was built) and ``baseline_bytes`` (the
resident set at that moment).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", choices=("ours", "accelerate"), required=True)
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="Hugging Face folder (config, safetensors, tokenizer).")
    p.add_argument("--data", type=Path, required=True, help="Instruction JSONL (prompt, completion).")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=16, help="Global batch (examples per step over all ranks).")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def training_config(args: argparse.Namespace) -> Any:
    """The platform's ``llm-sft`` training section, full fine-tune, at the benchmark's sizes."""
    from mlops_config import load_config

    sets = [f"training.batch_size={args.batch}", f"training.causal_lm.seq_len={args.seq_len}",
            "training.causal_lm.finetune=full", f"training.lr={args.lr}", "training.nproc=2",
            "training.fsdp.activation_checkpointing=false", "training.causal_lm.load_method=dcp"]
    return load_config(model="llm-sft", overrides=sets).config.training


def fsdp2_accelerator(layer_cls: str) -> Any:
    """An ``Accelerator`` running Accelerate's FSDP2 on CPU processes (see the module doc for why it is forced)."""
    from accelerate import Accelerator, FullyShardedDataParallelPlugin
    from accelerate.utils import DistributedType
    from torch.distributed.fsdp import MixedPrecisionPolicy

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=[layer_cls],
        reshard_after_forward=True, state_dict_type="SHARDED_STATE_DICT", cpu_ram_efficient_loading=True,
        mixed_precision_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    # "no": the plugin's policy is the whole precision recipe, as ours; "bf16" would add autocast on top
    accelerator = Accelerator(cpu=True, mixed_precision="no", fsdp_plugin=plugin)
    state = accelerator.state
    if state.distributed_type != DistributedType.MULTI_CPU or not dist.is_initialized():
        raise RuntimeError(f"expected Accelerate's MULTI_CPU gloo group, got {state.distributed_type}")
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    if not accelerator.is_fsdp2:
        raise RuntimeError("forcing Accelerate's FSDP2 on CPU failed: accelerator.is_fsdp2 is False")
    # what `accelerate launch --use_fsdp` exports: with the plugin's FSDP_CPU_RAM_EFFICIENT_LOADING it makes
    # from_pretrained load the weights on local rank 0 only
    os.environ["ACCELERATE_USE_FSDP"] = "true"
    if os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING", "").lower() not in ("true", "1"):
        raise RuntimeError("Accelerate's plugin did not export FSDP_CPU_RAM_EFFICIENT_LOADING")
    return accelerator


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    training = training_config(args)
    from mlops_training.sft import SFTTask

    if args.impl == "ours":
        from mlops_training.parallelize import apply_parallelism, init_distributed
        from mlops_training.shard_plan import ShardPlan

        info = init_distributed("gloo")
        rank, world, device = info.rank, info.world_size, info.device
    else:
        accelerator = fsdp2_accelerator(training.fsdp.wrap_policy.transformer_layer_cls[0])
        rank, world, device = accelerator.process_index, accelerator.num_processes, accelerator.device
    task = SFTTask(training, args.seed, device, args.checkpoint, args.data, {"accepted_sha256": "benchmark"})

    baseline = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    if args.impl == "ours":
        built = task.build()
        model = apply_parallelism(built.module, ShardPlan.resolve(training), training.fsdp, info)
        if built.materialize is not None:  # a pretrained checkpoint: weights into the shards (as the trainer does)
            built.materialize(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        backward = torch.Tensor.backward
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(args.checkpoint), dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        model, optimizer = accelerator.prepare(model, optimizer)
        backward = accelerator.backward
    _check_sharded(model, world)
    model.train()

    losses: list[torch.Tensor] = []
    start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
        x, y = task.batch(step, 0, rank, world, 1)
        loss = task.loss(model, x, y)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach().float())
    dist.barrier()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    stacked = torch.stack(losses)
    dist.all_reduce(stacked)  # each rank's loss is world × its token sum / global tokens: the sum / world is the mean
    result = {"impl": args.impl, "rank": rank, "world": world, "seconds": seconds, "cpu_seconds": cpu_seconds,
              "tokens": args.batch * args.seq_len * args.steps, "losses": (stacked / world).tolist(),
              "peak_bytes": _status("VmHWM"), "baseline_bytes": baseline,
              "parameters": sum(p.numel() for p in model.parameters())}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.impl}-rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _check_sharded(model: torch.nn.Module, world: int) -> None:
    """Every parameter is a DTensor sharded over ``world`` ranks (not a replicated or single-process model)."""
    from torch.distributed.tensor import DTensor

    params = list(model.parameters())
    bad = [n for n, p in model.named_parameters() if not isinstance(p, DTensor) or p.device_mesh.size() != world]
    if not params or bad:
        raise RuntimeError(f"not sharded over {world} ranks: {bad[:5]}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
