"""The model zoo: the fraud MLP (from :mod:`mlops_model`) and LLaMA-architecture causal LMs.

LLaMA presets carry the real LLaMA-2 shapes for planning (built on the meta device, no weights) and two
byte-level shapes small enough to train on CPU. ``transformers`` is imported inside functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlops_model import ModelKind
from mlops_training.errors import TrainingError

if TYPE_CHECKING:
    import torch
    from transformers import LlamaConfig

BYTE_VOCAB = 256

# name -> LlamaConfig keyword arguments (hidden, MLP width, layers, heads, KV heads, vocabulary, context)
PRESETS: dict[str, dict[str, int]] = {
    "llama-tiny": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=BYTE_VOCAB, max_position_embeddings=512),
    "llama-small": dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
                        num_key_value_heads=8, vocab_size=BYTE_VOCAB, max_position_embeddings=1024),
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    "llama2-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                       num_key_value_heads=40, vocab_size=32000, max_position_embeddings=4096),
    "llama2-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                       num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096),
}


@dataclass(frozen=True)
class BuiltModel:
    """A freshly built model and what the exported ``model.json`` needs to rebuild it."""

    module: torch.nn.Module
    kind: ModelKind
    """The family; written as ``model.json``'s ``kind``."""
    architecture: dict[str, Any]
    materialize: Callable[[torch.nn.Module], None] | None = None
    """For a model built on the meta device: called on the parallelized module to give its shards storage and
    weights (a pretrained checkpoint). ``None``: the module was built with real weights."""


def llama_config(preset: str) -> LlamaConfig:
    """The ``LlamaConfig`` of a named preset.

    Raises:
        TrainingError: the preset is unknown (the message lists the known ones).
    """
    from transformers import LlamaConfig

    if preset not in PRESETS:
        raise TrainingError(f"unknown LLaMA preset {preset!r}; expected one of {sorted(PRESETS)}")
    shape: dict[str, Any] = dict(PRESETS[preset])
    return LlamaConfig(**shape, rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False,
                       attention_dropout=0.0)


def build_causal_lm(architecture: Mapping[str, Any], *, meta: bool = False) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` from a ``LlamaConfig`` dict; on the meta device (shapes only) with ``meta``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{k: v for k, v in architecture.items() if k not in {"model_type", "architectures"}})
    config._attn_implementation = "sdpa"
    if meta:
        with torch.device("meta"):
            return LlamaForCausalLM(config)
    return LlamaForCausalLM(config)


def build_model(family: str, *, preset: str = "llama-tiny", input_dim: int | None = None,
                hidden_sizes: tuple[int, ...] = (64, 32), dropout: float = 0.0, meta: bool = False) -> BuiltModel:
    """Build a model of ``family`` (``tabular`` or ``causal_lm``) with the current torch RNG.

    Raises:
        TrainingError: unknown family or preset, or a tabular model without ``input_dim``.
    """
    builder = _BUILDERS.get(family)
    if builder is None:
        raise TrainingError(f"unknown model family {family!r}; expected 'tabular' or 'causal_lm'")
    return builder(preset=preset, input_dim=input_dim, hidden_sizes=hidden_sizes, dropout=dropout, meta=meta)


def _build_tabular(*, input_dim: int | None, hidden_sizes: tuple[int, ...], dropout: float, meta: bool,
                   **_: Any) -> BuiltModel:
    import torch

    from mlops_model import build_tabular_mlp

    if not input_dim or input_dim < 1:
        raise TrainingError(f"tabular model needs input_dim >= 1 (from the fitted encoder), got {input_dim!r}")
    arch: dict[str, Any] = {"input_dim": int(input_dim), "hidden_sizes": [int(h) for h in hidden_sizes],
                            "dropout": float(dropout)}
    if meta:
        with torch.device("meta"):
            return BuiltModel(build_tabular_mlp(arch), ModelKind.TABULAR, arch)
    return BuiltModel(build_tabular_mlp(arch), ModelKind.TABULAR, arch)


def _build_byte_lm(*, preset: str, meta: bool, **_: Any) -> BuiltModel:
    arch = llama_config(preset).to_dict()
    arch["preset"] = preset
    return BuiltModel(build_causal_lm(arch, meta=meta), ModelKind.BYTE_LM, arch)


_BUILDERS: dict[str, Callable[..., BuiltModel]] = {"tabular": _build_tabular, "causal_lm": _build_byte_lm}


def module_class_names(model: torch.nn.Module) -> list[str]:
    """Sorted class names of every submodule (what a transformer wrap policy can name)."""
    return sorted({type(m).__name__ for m in model.modules()})


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (works on the meta device)."""
    return sum(p.numel() for p in model.parameters())
