"""The contract an exported tabular model records in ``model.json`` (``contract``), written and read back.

Training records the contract its training set was prepared under (:func:`contract_meta`); serving validates
requests by what :func:`contract_of` reads back. Kept apart from :mod:`mlops_model.contract` (the declared
fallback), which the data stages of ``dvc.yaml`` depend on: how an export records a contract is not theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from mlops_config import ContractConfig
from mlops_model.errors import ExportedModelError


def contract_meta(contract: ContractConfig) -> dict[str, Any]:
    """``contract`` as ``model.json`` records it: its JSON form with ``fields`` as ``[name, type]`` pairs, so the
    declared field order survives the file's sorted keys."""
    return {**contract.model_dump(mode="json"), "fields": [[name, kind] for name, kind in contract.fields.items()]}


def contract_of(meta: Mapping[str, Any], *, source: str) -> ContractConfig | None:
    """The contract an exported tabular model records (``model.json``'s ``contract``, :func:`contract_meta`'s
    form); ``None`` for an export made before models carried one (the caller falls back to
    `mlops_model.DEFAULT_CONTRACT` and says so).

    Raises:
        ExportedModelError: the entry is not a valid contract; the message names ``source`` and the bad field.
    """
    raw = meta.get("contract")
    if raw is None:
        return None
    try:
        if isinstance(raw, Mapping) and isinstance(raw.get("fields"), list):
            raw = {**raw, "fields": _pairs(raw["fields"], source)}
        return ContractConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"contract.{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                             for e in exc.errors())
        raise ExportedModelError(f"{source} records an invalid contract ({problems}); expected the model's "
                                 "declared contract (configs/models/<m>.yaml, section contract)") from None


def _pairs(fields: list[Any], source: str) -> dict[str, Any]:
    bad = [f for f in fields if not (isinstance(f, list) and len(f) == 2 and isinstance(f[0], str))]
    if bad:
        raise ExportedModelError(f"{source} records contract.fields entries {bad!r:.200}; expected [name, type] "
                                 "pairs")
    return dict(fields)
