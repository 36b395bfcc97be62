"""Supervised fine-tuning of a pretrained Hugging Face causal LM on instruction data (full or LoRA).

Data: the instruction JSONL (``training.causal_lm.dataset``) passes the gate of :mod:`mlops_features`
(quarantine with reasons, ``max_tokens = seq_len``) on rank 0 into ``<run_dir>/data``; every rank reads the
accepted examples. Each example is held out for validation by a hash of its text (``val_fraction``), so the split
does not move when other lines are added or removed.

Batches: **padding**, not packing. Each example is right-padded to ``seq_len`` with the pad token; labels are
``-100`` on prompt and padding, so the loss is on completion tokens (and ``eos``) only. Right padding needs no
attention mask in a causal model (no real token attends to a later pad) and keeps every batch the same shape,
which keeps runs bit-reproducible and resumable; packing would save the padded compute (examples here are 10-30
tokens of 128) at the price of cross-example attention masks. The loss of a step is the mean over every
completion token of the global batch, whatever the world size or accumulation: each rank sums its tokens' losses
and scales by ``world × accum / tokens in the global batch`` (FSDP averages gradients over ranks, the trainer
divides by ``accum``), so 1 and 2 ranks train the same objective.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_model import ModelKind
from mlops_training import sampling
from mlops_training.errors import TrainingError
from mlops_training.zoo import BuiltModel

if TYPE_CHECKING:
    import torch

    from mlops_config import PlatformConfig, TrainingConfig
    from mlops_features import InstructionGateResult

log = logging.getLogger(__name__)

EVAL_BATCH = 32


def gate_instruction_data(training: TrainingConfig, root: Path, checkpoint: Path,
                          out_dir: Path) -> InstructionGateResult:
    """Run the instruction-data gate on ``training.causal_lm.dataset`` with the checkpoint's tokenizer.

    Raises:
        TrainingError: no dataset configured.
        DataError: the dataset cannot be read.
    """
    from mlops_features import validate_instructions

    lm = training.causal_lm
    if lm.dataset is None:
        raise TrainingError("training.causal_lm.dataset is not set; name the instruction JSONL to fine-tune on")
    source = Path(lm.dataset) if Path(lm.dataset).is_absolute() else root / lm.dataset
    return validate_instructions(source, out_dir, load_tokenizer(checkpoint), max_tokens=lm.seq_len)


def gate_instructions(config: PlatformConfig, root: Path, out_dir: Path) -> InstructionGateResult:
    """``mlops data validate-instructions``: fetch the configured checkpoint (for its tokenizer) and gate the data.

    Raises:
        TrainingError: no checkpoint or dataset configured, or the checkpoint cannot be fetched.
        DataError: the dataset cannot be read.
    """
    from mlops_training.pretrained import resolve_checkpoint

    training = config.training
    if training.causal_lm.checkpoint is None:
        raise TrainingError(f"model {config.project.model!r} names no training.causal_lm.checkpoint; the gate counts "
                            "tokens with the checkpoint's tokenizer")
    ckpt_root = Path(training.checkpoint.dir)
    cache = (ckpt_root if ckpt_root.is_absolute() else root / ckpt_root) / "_pretrained"
    folder = resolve_checkpoint(training.causal_lm.checkpoint, root, cache, config.tracking)
    return gate_instruction_data(training, root, folder, out_dir)


def load_tokenizer(checkpoint: Path) -> Any:
    """The checkpoint's ``transformers`` tokenizer (it must have a pad token)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(checkpoint))
    if tok.pad_token_id is None:
        raise TrainingError(f"the tokenizer of {str(checkpoint)!r} has no pad_token; set one in its "
                            "tokenizer_config.json (padding needs it)")
    return tok


def held_out(example: dict[str, str], fraction: float) -> bool:
    """Whether ``example`` is in the validation split (a stable hash of its text, not its position)."""
    digest = hashlib.sha256(f"{example['prompt']}\x00{example['completion']}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def encode_padded(tokenizer: Any, examples: list[dict[str, str]], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``[n, seq_len]`` input ids (right-padded) and labels (``-100`` on prompt and padding)."""
    from mlops_features import IGNORE_INDEX, encode_example

    ids = np.full((len(examples), seq_len), tokenizer.pad_token_id, dtype=np.int64)
    labels = np.full((len(examples), seq_len), IGNORE_INDEX, dtype=np.int64)
    for i, ex in enumerate(examples):
        seq, prompt_len = encode_example(tokenizer, ex["prompt"], ex["completion"])
        if len(seq) > seq_len:  # the gate quarantines these; a hand-made file could still hold one
            raise TrainingError(f"example {i} has {len(seq)} tokens > seq_len {seq_len}; run the data gate first")
        ids[i, : len(seq)] = seq
        # Position t predicts token t+1: the label of t is the next token when that token is learned.
        nxt = np.array(seq[1:], dtype=np.int64)
        learned = np.arange(1, len(seq)) >= prompt_len
        labels[i, : len(seq) - 1] = np.where(learned, nxt, IGNORE_INDEX)
    return ids, labels


@dataclass
class SFTTask:
    """Fine-tune the checkpoint at ``checkpoint`` on the gated examples in ``accepted`` (see the module doc)."""

    training: TrainingConfig
    seed: int
    device: torch.device
    checkpoint: Path
    accepted: Path
    gate: dict[str, Any]
    tokenizer: Any = field(init=False)
    scale: float = field(init=False, default=1.0)
    """``world × accum / completion tokens`` of the step :meth:`batch` last cut; :meth:`loss` applies it (the
    trainer always calls ``loss`` right after ``batch`` for the same micro-batch)."""

    def __post_init__(self) -> None:
        from mlops_features import read_examples

        lm = self.training.causal_lm
        self.tokenizer = load_tokenizer(self.checkpoint)
        examples = read_examples(self.accepted)
        train = [e for e in examples if not held_out(e, lm.val_fraction)]
        val = [e for e in examples if held_out(e, lm.val_fraction)]
        if len(train) < self.training.batch_size or not val:
            raise TrainingError(f"{len(examples)} accepted examples give {len(train)} to train and {len(val)} to "
                                f"validate; batch_size is {self.training.batch_size}: add examples or lower it")
        self.train_ids, self.train_labels = encode_padded(self.tokenizer, train, lm.seq_len)
        self.val_ids, self.val_labels = encode_padded(self.tokenizer, val, lm.seq_len)
        self.data_hash = str(self.gate["accepted_sha256"])
        self.samples_per_step = self.training.batch_size
        self.tokens_per_sample = lm.seq_len
        self.steps_per_epoch = sampling.steps_per_epoch(len(train), self.training.batch_size)

    def build(self) -> BuiltModel:
        from mlops_training.lora import apply_lora, lora_init, lora_key_map
        from mlops_training.pretrained import build_on_meta, load_hf_config, load_into_shards, materialize

        lm = self.training.causal_lm
        config = load_hf_config(self.checkpoint)
        module = build_on_meta(config)
        if lm.finetune == "lora":
            module = apply_lora(module, lm.lora)
        device, folder, seed = self.device, self.checkpoint, self.seed

        def fill(model: torch.nn.Module) -> None:
            materialize(model, device)
            extra = lora_init(model, seed) if lm.finetune == "lora" else None
            key_map = lora_key_map(model) if lm.finetune == "lora" else None
            load_into_shards(model, folder, method=lm.load_method, key_map=key_map, extra=extra)

        arch = {**config.to_dict(), "finetune": lm.finetune}
        return BuiltModel(module, ModelKind.HF_CAUSAL_LM, arch, materialize=fill)

    def batch(self, step: int, micro: int, rank: int, world: int, accum: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        from mlops_features import IGNORE_INDEX

        idx = sampling.epoch_batch_indices(len(self.train_ids), self.training.batch_size, step, self.seed)
        tokens = int((self.train_labels[idx] != IGNORE_INDEX).sum())
        self.scale = world * accum / max(tokens, 1)
        mine = sampling.rank_slice(idx, micro, rank, world, accum)
        return (torch.from_numpy(self.train_ids[mine]).to(self.device),
                torch.from_numpy(self.train_labels[mine]).to(self.device))

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return token_loss_sum(model, x, y) * self.scale

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """Mean loss per completion token over the whole validation split (every rank runs every batch)."""
        import torch

        from mlops_features import IGNORE_INDEX

        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(self.val_ids), EVAL_BATCH):
                x = torch.from_numpy(self.val_ids[i : i + EVAL_BATCH]).to(self.device)
                y = torch.from_numpy(self.val_labels[i : i + EVAL_BATCH]).to(self.device)
                total += float(token_loss_sum(model, x, y))
                count += int((y != IGNORE_INDEX).sum())
        loss = total / max(count, 1)
        return {"val_loss": loss, "val_perplexity": float(np.exp(min(loss, 50.0))), "val_tokens": float(count)}

    def features_meta(self) -> dict[str, Any]:
        lm = self.training.causal_lm
        return {"tokenizer": "checkpoint", "dataset": lm.dataset, "checkpoint": lm.checkpoint,
                "finetune": lm.finetune, "seq_len": lm.seq_len, "val_fraction": lm.val_fraction, "gate": self.gate,
                "train_examples": len(self.train_ids), "val_examples": len(self.val_ids)}


def token_loss_sum(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sum of next-token cross-entropy over the learned positions of ``y`` (float32 logits)."""
    from torch.nn import functional

    from mlops_features import IGNORE_INDEX

    logits = model(input_ids=x).logits
    return functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                                    ignore_index=IGNORE_INDEX, reduction="sum")
