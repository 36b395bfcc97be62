"""The exported-model format (training writes it, serving and evaluation read it) and :class:`ExportedModel`.

An exported model is a folder with two files and nothing executable (never pickle):

- ``model.safetensors``: the full (unsharded) state dict;
- ``model.json``: ``{"format_version", "kind", "architecture", "features", "lineage", "weights_sha256"}``.
  ``kind`` is ``tabular_mlp`` or ``causal_lm``; ``architecture`` is what :func:`build_tabular_mlp` (or the
  LM builder) needs; for ``tabular_mlp`` ``features`` holds the FeatureService name and the fitted
  :class:`~mlops_model.encoder.EncoderSpec`; ``lineage`` holds run id, seed, data hash, git commit; a tabular
  export also holds ``calibration`` (:mod:`mlops_model.calibration`), ``decision_threshold``
  (:mod:`mlops_model.threshold`) and ``contract`` (the model's declared :class:`~mlops_config.ContractConfig`:
  what a request carries, its entity keys, its label; absent in exports made before it was recorded).

A signed model also holds ``model.sig`` (:mod:`mlops_model.signing`): ``save_exported(sign=...)`` signs the
folder before it appears, and ``load_exported(check=...)`` / ``ExportedModel.load(check=...)`` verify it
before a byte of the weights is read.

:class:`ExportedModel` is the one load-and-score: serving's predictor and evaluation's gates both score
through it, so the scores a gate judged are the scores production returns.
torch and safetensors are imported inside functions so importing :mod:`mlops_model` stays cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_core import atomic_dir
from mlops_model.calibration import Calibration, served_scores
from mlops_model.encoder import EncoderSpec
from mlops_model.errors import ExportedModelError
from mlops_model.kind import ModelKind, kind_problem
from mlops_model.recorded_contract import contract_of
from mlops_model.threshold import recorded_threshold

if TYPE_CHECKING:
    import pandas as pd
    import torch

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"
FALLBACK_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
"""Chat template of an exported causal LM whose tokenizer has none (``role: content`` lines, then ``assistant:``):
the export writes it into the tokenizer files, the LM server applies it to a bare folder without one."""
SCORE_BATCH = 4096
"""Rows per forward pass when scoring a whole frame (bounded memory; the same for every caller)."""


def weights_hash(state_dict: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over tensor names, dtypes, shapes and bytes in name order: equal iff weights are bit-identical."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


FolderHook = Callable[[Path], object]
"""Called with an exported folder: a signer after writing (``sign=``), a verifier before reading (``check=``)."""


def save_exported(folder: str | Path, state_dict: Mapping[str, torch.Tensor], meta: Mapping[str, Any], *,
                  sign: FolderHook | None = None) -> Path:
    """Write ``model.safetensors`` + ``model.json`` (with ``weights_sha256`` added), signed by ``sign``."""
    from safetensors.torch import save_file

    if "kind" not in meta or "architecture" not in meta:
        raise ExportedModelError(f"model meta needs 'kind' and 'architecture', got keys {sorted(meta)!r}")
    out = Path(folder)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    full = {"format_version": FORMAT_VERSION, **meta, "weights_sha256": weights_hash(tensors)}
    with atomic_dir(out) as tmp:  # readers see the old pair or the new pair, never weights without their meta
        save_file(tensors, str(tmp / WEIGHTS_FILE))
        (tmp / META_FILE).write_text(json.dumps(full, indent=2, sort_keys=True, default=_json_default) + "\n",
                                     encoding="utf-8")
        if sign is not None:
            sign(tmp)
    return out


def _json_default(value: Any) -> Any:
    return value.to_dict() if isinstance(value, EncoderSpec) else str(value)


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


def load_exported(folder: str | Path, *, verify: bool = True, check: FolderHook | None = None
                  ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and meta of an exported model; with ``verify``, the weights must match ``weights_sha256``.

    ``check`` (a :class:`mlops_model.signing.ModelVerifier`) runs first and raises to refuse the folder.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if check is not None:
        check(Path(folder))
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

    The one definition of this network: training builds it here, serving and evaluation rebuild it from
    ``model.json``.
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


class ExportedModel:
    """An exported ``tabular_mlp`` loaded from its folder: hash-verified weights, validated encoder, scorer.

    Use :meth:`load`. Scores are the probability of fraud, float64 (from the float32 forward pass).
    """

    def __init__(self, folder: Path, meta: dict[str, Any], network: torch.nn.Module, encoder: EncoderSpec) -> None:
        self.folder = folder
        self.meta = meta
        self.network = network
        self.encoder = encoder
        features = meta.get("features") or {}
        self.feature_service: str | None = features.get("feature_service")
        self.weights_sha256 = str(meta.get("weights_sha256", ""))
        self.input_dim = encoder.input_dim
        raw = meta.get("calibration")  # absent in exports made before calibration existed: raw sigmoid
        self.calibration = None if raw is None else Calibration.from_dict(
            raw, source=f"{str(folder / META_FILE)!r} calibration")
        if self.calibration is not None:  # what scoring imports is imported now, not on the first request
            served_scores(np.zeros(1, np.float32), self.calibration)
        # chosen at training on validation (mlops_model.threshold); None for exports made before it was recorded
        self.decision_threshold = recorded_threshold(meta, source=repr(str(folder / META_FILE)))
        self.contract = contract_of(meta, source=repr(str(folder / META_FILE)))
        """The contract the model was trained under; ``None`` for an export made before it was recorded."""

    @classmethod
    def load(cls, folder: str | Path, *, check: FolderHook | None = None) -> ExportedModel:
        """Read ``folder``; any problem (signature, files, hash, kind, encoder, shapes) is an
        :class:`ExportedModelError`."""
        folder = Path(folder)
        tensors, meta = load_exported(folder, check=check)
        if kind_problem(meta, ModelKind.TABULAR) is not None:
            raise ExportedModelError(f"{str(folder)!r} holds a model of kind {meta.get('kind')!r}; expected "
                                     f"{ModelKind.TABULAR.value!r}")
        raw = (meta.get("features") or {}).get("encoder")
        if raw is None:
            raise ExportedModelError(f"{str(folder)!r} has no features.encoder in {META_FILE}; re-export it with "
                                     "the encoder the model was trained with")
        encoder = EncoderSpec.from_dict(raw, source=f"{str(folder / META_FILE)!r} features.encoder")
        arch_dim = (meta.get("architecture") or {}).get("input_dim")
        if arch_dim != encoder.input_dim:
            raise ExportedModelError(f"{str(folder)!r}: encoder input_dim {encoder.input_dim!r} != architecture "
                                     f"input_dim {arch_dim!r}")
        network = build_tabular_mlp(meta["architecture"])
        try:
            network.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise ExportedModelError(f"{str(folder)!r}: weights do not fit the architecture: {exc}") from None
        network.eval()
        return cls(folder, meta, network, encoder)

    def score_encoded(self, x: np.ndarray) -> np.ndarray:
        """Probability of fraud per row of encoded ``x`` (``[n, input_dim]``), in batches of :data:`SCORE_BATCH`."""
        import torch

        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ExportedModelError(f"encoded input has shape {x.shape}; the model expects [n, {self.input_dim}]")
        x = np.ascontiguousarray(x, dtype=np.float32)
        parts = []
        with torch.inference_mode():
            for i in range(0, len(x), SCORE_BATCH):
                parts.append(self.network(torch.from_numpy(x[i:i + SCORE_BATCH])).reshape(-1).numpy())
        logits = parts[0] if len(parts) == 1 else (np.concatenate(parts) if parts else np.empty(0, np.float32))
        return served_scores(logits, self.calibration)  # Platt on the logit in one step (mlops_model.calibration)

    def score_frame(self, frame: pd.DataFrame) -> np.ndarray:
        """Score DataFrame rows (evaluation)."""
        return self.score_encoded(self.encoder.encode_frame(frame))

    def score_records(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Score row dicts."""
        return self.score_encoded(self.encoder.encode_records(records))

    def score_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """Score columns of raw values (serving's hot path; :meth:`EncoderSpec.encode_columns`)."""
        return self.score_encoded(self.encoder.encode_columns(columns))
