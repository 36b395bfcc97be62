"""Export of a fine-tuned causal LM as a Hugging Face folder that ``transformers`` opens unchanged.

The folder (written atomically, rank 0, from the gathered full state dict):

- ``config.json`` and ``model.safetensors`` (one file, Hugging Face key names, ``{"format": "pt"}`` metadata, as
  ``save_pretrained`` writes it): ``AutoModelForCausalLM.from_pretrained(folder)``. With LoRA the adapters are
  merged into the base weights by peft (``merge_and_unload``);
- with ``export_adapter_only`` instead: ``adapter_config.json`` + ``adapter_model.safetensors`` (peft's own
  ``save_pretrained``), which ``PeftModel.from_pretrained(base, folder)`` applies to the pretrained checkpoint;
- the checkpoint's tokenizer files and ``generation_config.json`` (the checkpoint's, else one derived from the
  model config): ``AutoTokenizer.from_pretrained(folder)``;
- ``model.json``, the platform's exported-model meta (``mlops_model``): ``kind: hf_causal_lm``, the architecture
  (the model config), data and gate figures, lineage, and ``weights_sha256`` of the weights file, so the registry
  and gates check these weights as they do the fraud model's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_model import ModelKind

if TYPE_CHECKING:
    import torch

    from mlops_config import LoRAConfig

KIND = ModelKind.HF_CAUSAL_LM.value
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def export_hf(folder: Path, state: Mapping[str, torch.Tensor], architecture: Mapping[str, Any], checkpoint: Path,
              meta: Mapping[str, Any], *, lora: LoRAConfig | None, adapter_only: bool = False) -> Path:
    """Write the Hugging Face folder of the trained ``state`` (see the module doc). Returns ``folder``.

    Args:
        architecture: the model config as a dict (``config.to_dict()``), plus ``finetune``.
        checkpoint: the pretrained folder the run started from (tokenizer, generation config).
        meta: ``features`` and ``lineage`` for ``model.json``.
        lora: the adapters' config when the run trained LoRA (merged unless ``adapter_only``).
    """
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    from mlops_core import atomic_dir
    from mlops_model import FALLBACK_CHAT_TEMPLATE, WEIGHTS_FILE, save_exported
    from mlops_training.lora import adapter_state, merge_lora, peft_config

    arch = {k: v for k, v in architecture.items() if k != "finetune"}
    config = AutoConfig.for_model(arch["model_type"], **{k: v for k, v in arch.items() if k != "model_type"})
    adapter = lora is not None and adapter_only
    if adapter:
        weights = adapter_state(dict(state))
    elif lora is not None:
        weights = merge_lora(dict(architecture), dict(state), lora)
    else:
        weights = dict(state)
    tensors = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
    with atomic_dir(folder) as tmp:
        # The platform's contract first (model.json with weights_sha256 over these tensors); it replaces ``tmp``.
        save_exported(tmp, tensors, {"kind": KIND, "architecture": dict(architecture), "adapter_only": adapter,
                                     "weights_file": ADAPTER_WEIGHTS if adapter else WEIGHTS_FILE, **dict(meta)})
        (tmp / WEIGHTS_FILE).unlink()
        # Then the same tensors as save_pretrained writes them (with its metadata), under the name each reader wants.
        save_file(tensors, str(tmp / (ADAPTER_WEIGHTS if adapter else WEIGHTS_FILE)), metadata={"format": "pt"})
        if adapter:
            assert lora is not None
            adapter_cfg = peft_config(lora)
            adapter_cfg.base_model_name_or_path = str(checkpoint)
            adapter_cfg.save_pretrained(str(tmp))
        else:
            config.save_pretrained(str(tmp))
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        if tokenizer.chat_template is None:  # chat needs one; the served and gated folder carries it
            tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        tokenizer.save_pretrained(str(tmp))
        _generation_config(checkpoint, config).save_pretrained(str(tmp))
    return folder


def _generation_config(checkpoint: Path, config: Any) -> Any:
    from transformers import GenerationConfig

    if (checkpoint / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(str(checkpoint))
    return GenerationConfig.from_model_config(config)
