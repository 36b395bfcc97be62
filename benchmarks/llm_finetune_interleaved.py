"""Our FSDP2 step against Accelerate's FSDP2 step in the same two processes, one step of each in turn.

``benchmarks/llm_finetune.py`` runs each side in its own torchrun job, so the two sides' timed windows see
different load from whatever else runs on the machine. This diagnostic builds both models in one pair of torchrun
CPU workers (Accelerate's gloo group, forced to FSDP as ``llm_finetune_worker.fsdp2_accelerator`` does; ours
sharded by ``apply_parallelism`` over the same group) and alternates single steps, each between barriers, so each
pair of steps sees about the same load. Same checkpoint, data, batch, precision and optimizer as the benchmark.

Prints one JSON object on its last line::

    {"shape", "steps", "batch", "seq_len",
     "ours": {"median_step_s", "median_cpu_step_s"}, "accelerate": {same keys},
     "step_time_ratio": accelerate / ours (> 1: ours is faster), "cpu_ratio": ours / accelerate,
     "max_step_loss_abs_diff"}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("ours", "accelerate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="small", help="tests/hf_checkpoint.py SHAPES key (default: small).")
    p.add_argument("--steps", type=int, default=40, help="Timed steps of each side (default 40).")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "batch", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.batch % 2:
        p.error(f"--batch must be even (split over 2 ranks), got {args.batch}")
    return args


def worker(args: argparse.Namespace) -> None:
    """One rank: build both sides, alternate steps, rank 0 writes the per-step times and losses."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from llm_finetune_worker import fsdp2_accelerator, training_config
    from transformers import AutoModelForCausalLM

    from mlops_training.parallelize import Dist, apply_parallelism
    from mlops_training.sft import SFTTask
    from mlops_training.shard_plan import ShardPlan

    args.seed = 0
    torch.manual_seed(0)
    training = training_config(args)
    accelerator = fsdp2_accelerator(training.fsdp.wrap_policy.transformer_layer_cls[0])
    rank, world, device = accelerator.process_index, accelerator.num_processes, accelerator.device
    info = Dist(rank=rank, world_size=world, local_rank=rank, local_world_size=world, device=device, backend="gloo")
    task = SFTTask(training, 0, device, args.checkpoint, args.data, {"accepted_sha256": "benchmark"})
    built = task.build()
    ours = apply_parallelism(built.module, ShardPlan.resolve(training), training.fsdp, info)
    if built.materialize is not None:  # a pretrained checkpoint: weights into the shards (as the trainer does)
        built.materialize(ours)
    theirs = AutoModelForCausalLM.from_pretrained(str(args.checkpoint), dtype=torch.float32)
    theirs_opt = torch.optim.AdamW(theirs.parameters(), lr=args.lr, weight_decay=0.0)
    theirs, theirs_opt = accelerator.prepare(theirs, theirs_opt)
    sides = {"ours": (ours, torch.optim.AdamW(ours.parameters(), lr=args.lr, weight_decay=0.0), torch.Tensor.backward),
             "accelerate": (theirs, theirs_opt, accelerator.backward)}
    record: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": [], "loss": []} for s in SIDES}
    for step in range(args.warmup + args.steps):
        for side in SIDES if step % 2 == 0 else SIDES[::-1]:
            model, optimizer, backward = sides[side]
            model.train()
            dist.barrier()
            wall, cpu = time.perf_counter(), time.process_time()
            x, y = task.batch(step, 0, rank, world, 1)
            loss = task.loss(model, x, y)
            backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            dist.barrier()
            if step >= args.warmup:
                record[side]["wall"].append(time.perf_counter() - wall)
                record[side]["cpu"].append(time.process_time() - cpu)
            record[side]["loss"].append(float(loss.detach()))
    if rank == 0:
        args.out.write_text(json.dumps(record))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.out is not None:  # a torchrun worker
        worker(args)
        return {}
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from hf_checkpoint import make_checkpoint
    from llm_finetune import gate_data

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        checkpoint = make_checkpoint(tmp / "ckpt", args.shape)
        data = gate_data(checkpoint, args.seq_len, tmp / "gate")
        out = tmp / "record.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
               "--checkpoint", str(checkpoint), "--data", str(data), "--out", str(out), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--batch", str(args.batch), "--seq-len", str(args.seq_len),
               "--lr", str(args.lr)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"workers failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        record = json.loads(out.read_text())
    sides = {s: {"median_step_s": statistics.median(record[s]["wall"]),
                 "median_cpu_step_s": statistics.median(record[s]["cpu"])} for s in SIDES}
    report = {"shape": args.shape, "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, **sides,
              "step_time_ratio": sides["accelerate"]["median_step_s"] / sides["ours"]["median_step_s"],
              "cpu_ratio": sides["ours"]["median_cpu_step_s"] / sides["accelerate"]["median_cpu_step_s"],
              "max_step_loss_abs_diff": max(abs(a - b) for a, b in zip(record["ours"]["loss"],
                                                                       record["accelerate"]["loss"], strict=True))}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
