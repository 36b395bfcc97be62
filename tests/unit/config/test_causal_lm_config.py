"""The fine-tuning keys of ``training.causal_lm``: a dataset or LoRA needs a checkpoint; the LLM config loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import ConfigError, load_config


def test_the_llm_sft_config_names_a_checkpoint_a_dataset_a_full_fine_tune_and_a_task_floor(config_dir: Path) -> None:
    loaded = load_config(model="llm-sft", config_dir=config_dir, environ={}).config
    cfg = loaded.training
    assert cfg.causal_lm.finetune == "full" and cfg.causal_lm.load_method == "dcp"
    assert loaded.evaluation.lm.min_exact_match == 0.9  # the model's own floor, above the schema default
    assert cfg.causal_lm.dataset == "datasets/instructions.jsonl" and cfg.causal_lm.checkpoint
    assert cfg.fsdp.mixed_precision.param_dtype == "bfloat16" and cfg.fsdp.activation_checkpointing


@pytest.mark.parametrize(("sets", "message"), [
    (["training.causal_lm.dataset=d.jsonl"], "dataset='d.jsonl' fine-tunes a pretrained model: set checkpoint"),
    (["training.causal_lm.finetune=lora"], "finetune='lora' fine-tunes a pretrained model"),
    (["training.causal_lm.checkpoint=c", "training.causal_lm.export_adapter_only=true"],
     "export_adapter_only=True needs finetune='lora'"),
    (["training.causal_lm.load_method=scatter"], "load_method"),
])
def test_fine_tuning_keys_without_what_they_need_are_refused(config_dir: Path, sets: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(model="llm-tiny", config_dir=config_dir, environ={}, overrides=sets)
