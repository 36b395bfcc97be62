"""What is trained: a task owns its data, builds its model, cuts batches and scores itself.

Two tasks share one loop (:mod:`mlops_training.trainer`): :class:`LMTask` (LLaMA on standard-library bytes)
and :class:`TabularTask` (the fraud MLP over the FeatureService's encoded features).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mlops_training import sampling
from mlops_training.corpus import load_corpus
from mlops_training.zoo import BuiltModel, build_model

if TYPE_CHECKING:
    import torch

    from mlops_config import TrainingConfig
    from mlops_training.tabular_data import TabularData


class Task(Protocol):
    """The trainer's view of a model family."""

    data_hash: str
    samples_per_step: int
    tokens_per_sample: int

    @property
    def steps_per_epoch(self) -> int | None: ...  # read-only, so a task may hold it as ``int`` or ``None``
    def build(self) -> BuiltModel: ...
    def batch(self, step: int, micro: int, rank: int, world: int, accum: int) -> tuple[torch.Tensor, torch.Tensor]: ...
    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...
    def evaluate(self, model: torch.nn.Module) -> dict[str, float]: ...
    def features_meta(self) -> dict[str, Any]: ...


@dataclass
class LMTask:
    """Next-byte prediction on the standard library's source with a LLaMA-architecture model."""

    training: TrainingConfig
    seed: int
    device: torch.device
    eval_windows: int = 16
    corpus: Any = field(init=False)

    def __post_init__(self) -> None:
        self.corpus = load_corpus(self.training.causal_lm.corpus_max_bytes)
        self.data_hash = self.corpus.sha256
        self.samples_per_step = self.training.batch_size
        self.tokens_per_sample = self.training.causal_lm.seq_len
        self.steps_per_epoch = None

    def build(self) -> BuiltModel:
        return build_model("causal_lm", preset=self.training.causal_lm.preset)

    def _windows(self, data: np.ndarray, offsets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        seq = self.training.causal_lm.seq_len
        rows = np.stack([data[o : o + seq + 1] for o in offsets]).astype(np.int64)
        t = torch.from_numpy(rows).to(self.device)
        return t[:, :-1], t[:, 1:]

    def batch(self, step: int, micro: int, rank: int, world: int, accum: int) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = sampling.window_offsets(len(self.corpus.train), self.training.causal_lm.seq_len,
                                          self.training.batch_size, step, self.seed)
        return self._windows(self.corpus.train, sampling.rank_slice(offsets, micro, rank, world, accum))

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional

        logits = model(input_ids=x).logits
        return functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        import torch

        offsets = sampling.window_offsets(len(self.corpus.val), self.training.causal_lm.seq_len,
                                          self.eval_windows, 0, self.seed + 7919)
        x, y = self._windows(self.corpus.val, offsets)
        with torch.no_grad():
            loss = float(self.loss(model, x, y))
        return {"val_loss": loss, "val_perplexity": float(np.exp(min(loss, 50.0)))}

    def features_meta(self) -> dict[str, Any]:
        return {"tokenizer": "bytes", "vocab_size": 256, "corpus": "python-stdlib", "corpus_files": self.corpus.files}


@dataclass
class TabularTask:
    """Fraud classification: the shared MLP over the encoded FeatureService features, BCE with class weight."""

    training: TrainingConfig
    seed: int
    device: torch.device
    data: TabularData

    def __post_init__(self) -> None:
        self.data_hash = self.data.data_hash
        self.samples_per_step = self.training.batch_size
        self.tokens_per_sample = 1
        self.steps_per_epoch = sampling.steps_per_epoch(len(self.data.train_y), self.training.batch_size)
        pos = float(self.data.train_y.sum())
        neg = float(len(self.data.train_y) - pos)
        self.pos_weight = self.training.tabular.positive_weight or (neg / pos if pos else 1.0)
        from mlops_training.tabular_data import check_calibration_split

        check_calibration_split(self.data.val_y, self.training.calibration)  # now, not after every training step

    def build(self) -> BuiltModel:
        cfg = self.training.tabular
        return build_model("tabular", input_dim=self.data.train_x.shape[1], hidden_sizes=cfg.hidden_sizes,
                           dropout=cfg.dropout)

    def batch(self, step: int, micro: int, rank: int, world: int, accum: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        idx = sampling.epoch_batch_indices(len(self.data.train_y), self.training.batch_size, step, self.seed)
        idx = sampling.rank_slice(idx, micro, rank, world, accum)
        return (torch.from_numpy(self.data.train_x[idx]).to(self.device),
                torch.from_numpy(self.data.train_y[idx]).to(self.device))

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        import torch
        from torch.nn import functional

        logits = model(x).squeeze(-1).float()
        weight = torch.tensor(self.pos_weight, dtype=torch.float32, device=logits.device)
        return functional.binary_cross_entropy_with_logits(logits, y.float(), pos_weight=weight)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        import torch

        from mlops_training.metrics import classification_metrics

        x = torch.from_numpy(self.data.val_x).to(self.device)
        y = torch.from_numpy(self.data.val_y).to(self.device)
        with torch.no_grad():
            loss = float(self.loss(model, x, y))
            scores = torch.sigmoid(model(x).squeeze(-1).float()).cpu().numpy()
        return {"val_loss": loss, **classification_metrics(self.data.val_y, scores)}

    def features_meta(self) -> dict[str, Any]:
        return {"feature_service": self.data.feature_service, "encoder": self.data.encoder,
                "data_version": self.data.data_version}
