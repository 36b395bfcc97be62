"""The exported-model contract between training (writer) and serving / evaluation (readers).

An exported model is a folder with two files and nothing executable (never pickle):

- ``model.safetensors``: the full (unsharded) state dict;
- ``model.json``: ``{"format_version", "kind", "architecture", "features", "lineage", "weights_sha256"}``.
  ``kind`` is ``tabular_mlp`` or ``causal_lm``; ``architecture`` is what :func:`build_tabular_mlp` (or the
  LM builder) needs; ``features`` holds the FeatureService name/version and the fitted encoder
  (``mlops_features`` owns its shape); ``lineage`` holds run id, seed, data hash, git commit.

torch and safetensors are imported inside functions so importing :mod:`mlops_core` stays cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_core.atomic import atomic_dir
from mlops_core.errors import PlatformError

if TYPE_CHECKING:
    import torch

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"


class ExportedModelError(PlatformError):
    """An exported model folder is missing a file, corrupt, or of an unknown format."""


def weights_hash(state_dict: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over tensor names, dtypes, shapes and bytes in name order: equal iff weights are bit-identical."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(dtype=_byte_dtype()).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def save_exported(folder: str | Path, state_dict: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> Path:
    """Write ``model.safetensors`` + ``model.json`` (with ``weights_sha256`` added). Returns the folder."""
    from safetensors.torch import save_file

    if "kind" not in meta or "architecture" not in meta:
        raise ExportedModelError(f"model meta needs 'kind' and 'architecture', got keys {sorted(meta)!r}")
    out = Path(folder)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    full = {"format_version": FORMAT_VERSION, **meta, "weights_sha256": weights_hash(tensors)}
    with atomic_dir(out) as tmp:  # readers see the old pair or the new pair, never weights without their meta
        save_file(tensors, str(tmp / WEIGHTS_FILE))
        (tmp / META_FILE).write_text(json.dumps(full, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return out


def read_meta(folder: str | Path) -> dict[str, Any]:
    """``model.json`` of an exported model, checked for format version."""
    path = Path(folder) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportedModelError(f"{str(path)!r} is missing; expected an exported model folder") from None
    except json.JSONDecodeError as exc:
        raise ExportedModelError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise ExportedModelError(
            f"{str(path)!r} has format_version {meta.get('format_version')!r}; this platform reads {FORMAT_VERSION}"
        )
    return meta


def load_exported(folder: str | Path, *, verify: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and meta of an exported model; with ``verify``, the weights must match ``weights_sha256``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_meta(folder)
    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise ExportedModelError(f"{str(path)!r} is missing; expected the model's weights next to {META_FILE}")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ExportedModelError(f"{str(path)!r} is not a readable safetensors file: {exc}") from None
    if verify and weights_hash(tensors) != meta.get("weights_sha256"):
        raise ExportedModelError(f"{str(path)!r} does not match weights_sha256 in {META_FILE}: corrupt or edited")
    return tensors, meta


def build_tabular_mlp(architecture: Mapping[str, Any]) -> torch.nn.Module:
    """The fraud MLP: ``input_dim`` → hidden ReLU layers (``hidden_sizes``, ``dropout``) → one logit.

    The one definition of this network: training builds it here, serving rebuilds it from ``model.json``.
    """
    from torch import nn

    try:
        input_dim = int(architecture["input_dim"])
        hidden = [int(h) for h in architecture["hidden_sizes"]]
        dropout = float(architecture.get("dropout", 0.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportedModelError(
            f"tabular architecture {dict(architecture)!r} is invalid ({exc}); expected input_dim and hidden_sizes"
        ) from None
    layers: list[torch.nn.Module] = []
    width = input_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)
