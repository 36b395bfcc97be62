"""FSDP memory and speed: DDP vs FULL_SHARD vs SHARD_GRAD_OP on the same LLaMA-architecture model.

Model: preset ``llama-small`` (hidden 512, 8 layers, SwiGLU 1376, byte vocabulary: ~25.4M parameters),
trained for ``--steps`` (20) steps on the standard library's bytes, global batch ``--batch`` (8) × 128 tokens,
AdamW, fp32, clipping at 1.0, by ``--nproc`` (2) torchrun processes: gloo on CPU, NCCL on CUDA (``backend:
auto``). Each strategy is a separate ``mlops_training.launch`` with the same seed, so the three see the
same initial weights and the same batches.

Per strategy:

- ``model_state_bytes_per_rank``: bytes of the storages the largest rank holds for parameters, gradients
  and AdamW state after the first optimizer step (each storage counted once);
- ``peak_bytes_per_rank``: the largest rank's peak RSS on CPU (``ru_maxrss``: the whole process, Python and
  torch included) or ``torch.cuda.max_memory_allocated`` on CUDA;
- ``step_s``: mean optimizer-step wall time on rank 0, the first (warm-up) step left out;
- ``losses``: the training loss of every step (all-reduced over ranks).

``max_rel_loss_diff_vs_ddp``: max over steps and sharded strategies of ``|loss - loss_ddp| / loss_ddp``.
Targets: FULL_SHARD model state ≤ 0.55 × DDP per rank, losses within 1e-5 relative, step time ≤ 1.5 × DDP.
Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = {
    "ddp": ("training.fsdp.parallelism=ddp",),
    "full_shard": ("training.fsdp.sharding_strategy=FULL_SHARD",),
    "shard_grad_op": ("training.fsdp.sharding_strategy=SHARD_GRAD_OP",),
}


def run_one(root: Path, name: str, sets: tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    from mlops_config import load_config
    from mlops_training import launch

    overrides = [
        "training.causal_lm.preset=llama-small", "training.causal_lm.seq_len=128",
        f"training.nproc={args.nproc}", f"training.max_steps={args.steps}", f"training.batch_size={args.batch}",
        "training.eval_every=0", "training.checkpoint.every_steps=0", "training.warmup_steps=5",
        "training.causal_lm.corpus_max_bytes=1000000", *sets,
    ]
    config = load_config(model="llm-tiny", config_dir=root / "configs", overrides=overrides, environ={}).config
    result = launch(config, root, run_name=name, track=False)
    assert result is not None
    newest = sorted(result.run_dir.glob("step_*"))[-1]
    history = json.loads((newest / "trainer_state.json").read_text())["history"]
    steps = [v for _, v in history["step_seconds"]]
    out = {
        "model_state_bytes_per_rank": int(result.system["model_state_bytes_max_rank"]),
        "peak_bytes_per_rank": int(result.system["peak_bytes_max_rank"]),
        "step_s": sum(steps[1:]) / max(len(steps) - 1, 1),
        "losses": [v for _, v in history["train_loss"]],
    }
    shutil.rmtree(result.run_dir, ignore_errors=True)  # hundreds of MB of checkpoints per strategy
    shutil.rmtree(result.export_dir, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fsdp-bench-") as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "configs", root / "configs")
        for name, sets in STRATEGIES.items():
            print(f"== {name}", file=sys.stderr)
            figures[name] = run_one(root, name, sets, args)
    ddp = figures["ddp"]
    diffs = [abs(a - b) / abs(b) for s in ("full_shard", "shard_grad_op")
             for a, b in zip(figures[s]["losses"], ddp["losses"], strict=True)]
    figures["max_rel_loss_diff_vs_ddp"] = max(diffs)
    figures["full_shard_state_vs_ddp"] = (figures["full_shard"]["model_state_bytes_per_rank"]
                                          / ddp["model_state_bytes_per_rank"])
    figures["full_shard_step_vs_ddp"] = figures["full_shard"]["step_s"] / ddp["step_s"]
    figures["shard_grad_op_step_vs_ddp"] = figures["shard_grad_op"]["step_s"] / ddp["step_s"]
    import torch

    figures["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    figures["nproc"] = args.nproc
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
