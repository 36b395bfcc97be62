"""``training``: the trainer, its FSDP knobs (FSDP1 vocabulary, mapped onto FSDP2) and checkpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mlops_config._base import Section

DType = Literal["float32", "bfloat16", "float16"]


class MixedPrecisionConfig(Section):
    param_dtype: DType = "float32"
    """Dtype parameters are gathered and computed in."""

    reduce_dtype: DType = "float32"
    """Dtype gradients are reduced in."""

    buffer_dtype: DType = "float32"
    """Dtype of buffers (FSDP1 knob; FSDP2 leaves buffers as the model has them, the doctor checks)."""


class WrapPolicyConfig(Section):
    kind: Literal["transformer", "size"] = "transformer"
    """``transformer``: shard each instance of the named layer classes; ``size``: any module with at least
    ``min_num_params`` parameters of its own subtree."""

    transformer_layer_cls: tuple[str, ...] = ("LlamaDecoderLayer",)
    """Layer class names to wrap (``kind: transformer``); checked against the real model."""

    min_num_params: int = Field(default=100_000, ge=1)
    """Smallest subtree wrapped as its own unit (``kind: size``)."""


class FSDPConfig(Section):
    parallelism: Literal["fsdp", "ddp"] = "fsdp"
    """``fsdp`` (FSDP2 ``fully_shard``) or plain DDP as the baseline."""

    sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"] = "FULL_SHARD"
    """FSDP1 name of the strategy; mapped to FSDP2 meshes and ``reshard_after_forward``."""

    hybrid_shard_group_size: int | None = Field(default=None, ge=1)
    """Ranks per shard group for HYBRID_SHARD (default: ranks per node); must divide the world size."""

    mixed_precision: MixedPrecisionConfig = MixedPrecisionConfig()
    """Mixed-precision policy."""

    wrap_policy: WrapPolicyConfig = WrapPolicyConfig()
    """Which submodules become their own FSDP unit."""

    backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST", "NONE"] = "BACKWARD_PRE"
    """Prefetch of the next unit's all-gather in backward (FSDP2: explicit backward prefetch list)."""

    forward_prefetch: bool = False
    """Prefetch of the next unit's all-gather in forward (FSDP2: explicit forward prefetch list)."""

    cpu_offload: bool = False
    """Keep sharded parameters, gradients and optimizer state on CPU (FSDP2 ``CPUOffloadPolicy``)."""

    activation_checkpointing: bool = False
    """Recompute each wrapped unit's activations in backward instead of storing them."""

    reshard_after_forward: bool | None = None
    """Override the strategy's resharding after forward (``None``: FULL_SHARD/HYBRID reshard, others don't)."""


class CheckpointConfig(Section):
    dir: str = ".mlops/checkpoints"
    """Root folder of sharded (DCP) checkpoints; each run gets a subfolder."""

    every_steps: int = Field(default=50, ge=0)
    """Save every N optimizer steps (0: only at the end)."""

    keep_last: int = Field(default=2, ge=1)
    """Checkpoints kept; older ones are deleted after a newer one is complete."""

    async_save: bool = False
    """Save with ``torch.distributed.checkpoint.async_save`` while training goes on."""


class TabularModelConfig(Section):
    hidden_sizes: tuple[int, ...] = (64, 32)
    """Hidden layer widths of the fraud MLP."""

    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout between hidden layers."""

    positive_weight: float | None = Field(default=None, gt=0)
    """Weight of the positive class in the loss (``None``: negatives/positives of the training set)."""


class LoRAConfig(Section):
    r: int = Field(default=8, ge=1)
    """Rank of the low-rank update ``B @ A``."""

    alpha: int = Field(default=16, ge=1)
    """Scale numerator: the update is multiplied by ``alpha / r``."""

    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input."""

    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Names of the linear layers that get an adapter (peft ``target_modules``)."""


class CausalLMConfig(Section):
    preset: str = "llama-tiny"
    """Named LLaMA shape: ``llama-tiny``, ``llama-small``, ``llama2-7b``, ``llama2-13b``, ``llama2-70b``."""

    seq_len: int = Field(default=128, ge=8)
    """Training sequence length in tokens (bytes for the preset models; with ``dataset``, every example is padded
    to this length and longer ones are quarantined by the data gate)."""

    corpus_max_bytes: int = Field(default=2_000_000, ge=1024)
    """Bytes of the standard library's source read as the corpus."""

    checkpoint: str | None = None
    """Pretrained Hugging Face folder (config, safetensors, tokenizer) to fine-tune: a local path (relative to the
    repo root), an MLflow artifact (``runs:/...``, ``models:/...``) or an fsspec URL (``s3://...``). ``None``:
    train ``preset`` from random weights."""

    load_method: Literal["dcp", "broadcast"] = "dcp"
    """How pretrained weights reach the shards: ``dcp`` (each rank reads only its slices with DCP's
    ``HuggingFaceStorageReader``) or ``broadcast`` (rank 0 reads the file, ``set_model_state_dict`` with
    ``broadcast_from_rank0``)."""

    dataset: str | None = None
    """Instruction/completion JSONL (``prompt``, ``completion`` per line) to fine-tune on, relative to the repo
    root; it passes the instruction data gate first. ``None``: next-token training on the standard library."""

    finetune: Literal["full", "lora"] = "full"
    """``full``: every weight trains; ``lora``: only peft LoRA adapters train (the base stays frozen)."""

    lora: LoRAConfig = LoRAConfig()
    """LoRA adapters (``finetune: lora``)."""

    val_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Share of the accepted instruction examples held out for validation (fixed by hashing each example)."""

    export_adapter_only: bool = False
    """With LoRA, export the adapter alone (peft folder) instead of the merged model."""

    candidate_steps: int | None = Field(default=None, ge=1)
    """Steps of a candidate that continues from the champion (``mlops pipeline run``'s LM loop, once a champion
    exists: it fine-tunes ``models:/<model>/<version>``, the champion alias pinned to its version, instead of
    ``checkpoint``, with the trainer's schedule over these steps). ``None``: every candidate trains from
    ``checkpoint`` for ``max_steps``, as the first champion does."""

    @model_validator(mode="after")
    def _checkpoint_for_finetuning(self) -> CausalLMConfig:
        if self.checkpoint is None and (self.dataset is not None or self.finetune == "lora"):
            what = f"dataset={self.dataset!r}" if self.dataset is not None else "finetune='lora'"
            raise ValueError(f"{what} fine-tunes a pretrained model: set checkpoint to its Hugging Face folder or URI")
        if self.export_adapter_only and self.finetune != "lora":
            raise ValueError("export_adapter_only=True needs finetune='lora' (a full fine-tune has no adapter)")
        return self


class DecisionThresholdConfig(Section):
    """How training chooses the tabular model's decision threshold on the validation split (the scores the
    export serves, calibrated if it is); recorded in ``model.json`` (``mlops_model.threshold``) and read by the
    gates, the monitor and the canary's estimate (``evaluation`` / ``monitoring.decision_threshold`` and
    ``delivery.tabular.canary_estimate_threshold`` only override it, and their reasons say so)."""

    criterion: Literal["f1", "fixed"] = "f1"
    """``f1``: the validation score that maximises F1 (ties: the highest); ``fixed``: :attr:`value`."""

    value: float = Field(default=0.5, gt=0, lt=1)
    """The threshold of ``criterion: fixed`` (unused by ``f1``)."""


class TrainingConfig(Section):
    model: Literal["tabular", "causal_lm"] = "tabular"
    """Model family."""

    calibration: Literal["none", "isotonic", "platt"] = "platt"
    """Calibrate the tabular model's scores on the older half of the validation split (the newer half measures
    ECE before and after); recorded in ``model.json`` and applied by ``ExportedModel``. ``none``: raw sigmoid
    (the scores claim no probabilities: the performance estimate is then not to be trusted). ``platt`` by
    default: on the fraud sample (holdout halves of ~2,000 rows, ~28 frauds each) both maps cut the raw scores'
    ECE of 0.035–0.043 to 0.005–0.010, but isotonic's map has ~11 steps there, so it ties rows and loses ranking
    (ROC AUC 0.807 → 0.760) and its F1-optimal threshold jumps between steps (0.50, 0.67); Platt's is strictly
    monotone (AUC unchanged) and its threshold moves smoothly (0.24, 0.27)."""

    decision_threshold: DecisionThresholdConfig = Field(default_factory=DecisionThresholdConfig)
    """The per-version decision threshold chosen at training (tabular models)."""

    nproc: int = Field(default=2, ge=1)
    """Processes per node that torchrun starts."""

    nnodes: int = Field(default=1, ge=1)
    """Nodes in the job (multi-node needs ``rdzv_endpoint``)."""

    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous for multi-node runs."""

    max_restarts: int = Field(default=0, ge=0)
    """torchrun ``--max-restarts``: a failed worker group restarts from the last checkpoint."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Process-group backend; ``auto`` picks NCCL on CUDA and gloo on CPU."""

    max_steps: int = Field(default=200, ge=1)
    """Optimizer steps to train for (``epochs`` caps it when set)."""

    epochs: int | None = Field(default=None, ge=1)
    """Passes over the training set; ``None``: train for ``max_steps``."""

    stop_after_steps: int | None = Field(default=None, ge=1)
    """Stop after this many steps without changing the LR schedule (set by the reproducibility gate to replay
    the first steps of a recorded run); ``None``: train to the end. Not part of the recipe's hash."""

    batch_size: int = Field(default=256, ge=1)
    """Global batch size per optimizer step, split across ranks and accumulation steps."""

    grad_accum_steps: int = Field(default=1, ge=1)
    """Micro-batches accumulated per optimizer step."""

    lr: float = Field(default=3e-3, gt=0)
    """Peak learning rate of AdamW."""

    weight_decay: float = Field(default=0.01, ge=0)
    """AdamW weight decay."""

    warmup_steps: int = Field(default=20, ge=0)
    """Linear warm-up steps before cosine decay."""

    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm (computed across shards); ``None`` disables clipping."""

    eval_every: int = Field(default=50, ge=0)
    """Evaluate on the validation split every N steps (0: only at the end)."""

    deterministic: bool = True
    """Use deterministic algorithms so the same seed gives bit-identical weights on CPU."""

    fsdp: FSDPConfig = FSDPConfig()
    """FSDP / DDP settings."""

    checkpoint: CheckpointConfig = CheckpointConfig()
    """Sharded checkpoint settings."""

    tabular: TabularModelConfig = TabularModelConfig()
    """The fraud MLP (``model: tabular``)."""

    causal_lm: CausalLMConfig = CausalLMConfig()
    """The LLaMA-architecture LM (``model: causal_lm``)."""

    export_dir: str = ".mlops/models"
    """Where the exported safetensors model is written before it is logged to MLflow."""

    @model_validator(mode="after")
    def _batch_divides(self) -> TrainingConfig:
        if self.batch_size % self.grad_accum_steps:
            raise ValueError(
                f"batch_size={self.batch_size!r} must be a multiple of grad_accum_steps={self.grad_accum_steps!r}"
            )
        return self
