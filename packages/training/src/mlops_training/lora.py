"""LoRA with ``peft`` on FSDP2: adapters added on the meta device, sharded with the base, initialised on load.

``get_peft_model`` on a meta model gives meta adapters (peft moves them to the base layer's device). FSDP2 then
shards base and adapters alike; only the adapters require gradients, so the optimizer holds state for them alone
and the frozen base gets no gradient buffers. The adapters' initial values (A: Kaiming-uniform as
``nn.Linear``, B: zeros, peft's ``init_lora_weights=True``) come from a seeded generator, identical on every rank,
and are laid into the shards with the checkpoint's weights (:func:`mlops_training.pretrained.load_into_shards`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from mlops_config import LoRAConfig

ADAPTER = "default"
PEFT_PREFIX = "base_model.model."


def peft_config(cfg: LoRAConfig) -> Any:
    """The ``peft.LoraConfig`` of the config section."""
    from peft import LoraConfig

    return LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=list(cfg.target_modules),
                      bias="none", task_type="CAUSAL_LM")


def apply_lora(model: torch.nn.Module, cfg: LoRAConfig) -> torch.nn.Module:
    """``model`` wrapped by peft with adapters on ``cfg.target_modules``; only the adapters train."""
    from peft import get_peft_model

    from mlops_training.errors import TrainingError

    try:
        return get_peft_model(model, peft_config(cfg))
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise TrainingError(f"training.causal_lm.lora.target_modules {list(cfg.target_modules)!r}: {exc}") from None


def base_key(name: str) -> str:
    """The checkpoint's name for a wrapped base weight (``base_model.model.x.q_proj.base_layer.weight`` →
    ``x.q_proj.weight``)."""
    return name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def lora_key_map(model: torch.nn.Module) -> dict[str, str]:
    """State-dict key → checkpoint key for every base weight of a peft model."""
    return {name: base_key(name) for name, _ in model.named_parameters() if not is_adapter(name)}


def lora_init(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Full initial values of every adapter weight of ``model`` (shapes from the possibly sharded parameters)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    values: dict[str, torch.Tensor] = {}
    for name, param in sorted(model.named_parameters()):
        if ".lora_A." in name:
            value = torch.empty(tuple(param.shape), dtype=torch.float32)
            torch.nn.init.kaiming_uniform_(value, a=math.sqrt(5), generator=gen)
            values[name] = value
        elif ".lora_B." in name:
            values[name] = torch.zeros(tuple(param.shape), dtype=torch.float32)
    return values


def merge_lora(architecture: dict[str, Any], state: dict[str, torch.Tensor],
               cfg: LoRAConfig) -> dict[str, torch.Tensor]:
    """The plain model's weights with each adapter merged in (``W + alpha/r · B A``), by peft's own merge."""
    base = _peft_model(architecture, cfg)
    base.load_state_dict(state, strict=True, assign=True)
    merged = base.merge_and_unload()
    return {k: v.detach().contiguous() for k, v in merged.state_dict().items()}


def adapter_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter weights alone, named as ``peft`` saves them (``...q_proj.lora_A.weight``)."""
    return {k.replace(f".{ADAPTER}.", "."): v for k, v in state.items() if is_adapter(k)}


def _peft_model(architecture: dict[str, Any], cfg: LoRAConfig) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    rest = {k: v for k, v in architecture.items() if k not in ("finetune", "model_type")}
    config = AutoConfig.for_model(architecture["model_type"], **rest)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return apply_lora(model, cfg)
