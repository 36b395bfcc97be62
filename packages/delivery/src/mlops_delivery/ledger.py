"""Reading the promotion ledger (``mlops_core.lifecycle``): did this version pass its gates?

The lifecycle moves a version to the ``staging`` alias only after every required gate passed, and records
the move, with the gate report's hash, in the ledger. A version with such an applied entry has passed;
GitOps promotion of any other version is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlops_config import TrackingConfig
from mlops_delivery.errors import PromotionRefusedError

logger = logging.getLogger(__name__)

GATED_ALIAS = "staging"


def gate_evidence(entries: list[Any], version: int) -> dict[str, Any] | None:
    """The ledger entry that proves ``version`` passed its gates, as a dict; ``None`` when there is none.

    Args:
        entries: Applied ledger entries (``mlops_core.ledger.LedgerEntry``), oldest first.
        version: The registry version.
    """
    for entry in reversed(entries):
        if (entry.action == "promote" and entry.to_alias == GATED_ALIAS and str(entry.version) == str(version)
                and entry.status == "applied" and entry.gate_report_sha256):
            return {"ledger_seq": entry.seq, "gate_report_sha256": entry.gate_report_sha256, "actor": entry.actor,
                    "ts": entry.ts, "reason": entry.reason}
    return None


def require_gates_passed(tracking: TrackingConfig, root: Path, model: str, version: int) -> dict[str, Any]:
    """Return the ledger evidence that ``version`` of ``model`` passed its gates, or refuse.

    Raises:
        PromotionRefusedError: the ledger has no gated move of this version to ``staging``.
    """
    from mlops_core import history  # the registry client is only needed here

    entries = history(tracking, root, model)
    evidence = gate_evidence(entries, version)
    if evidence is None:
        seen = sorted({f"v{e.version}→{e.to_alias}" for e in entries})
        raise PromotionRefusedError(
            f"{model} v{version} has not passed its gates: the promotion ledger has no gated move of it to "
            f"{GATED_ALIAS!r} (ledger: {seen or 'empty'}); run `mlops evaluate run` and `mlops registry promote "
            f"--version {version} --to staging` first"
        )
    logger.info("%s v%s passed its gates (ledger #%s)", model, version, evidence["ledger_seq"])
    return evidence


STAGE_ALIAS = {"staging": "staging", "canary": "canary", "production": "champion"}


def registry_version(tracking: TrackingConfig, root: Path, model: str, stage: str) -> int:
    """The version that holds the registry alias of ``stage`` (``production`` is the ``champion`` alias)."""
    alias = STAGE_ALIAS.get(stage)
    if alias is None:
        raise PromotionRefusedError(f"unknown stage {stage!r}; expected one of {list(STAGE_ALIAS)}")
    return resolve_version(tracking, root, model, alias)


def resolve_version(tracking: TrackingConfig, root: Path, model: str, alias: str | None = None) -> int:
    """The version holding registry ``alias``; with no alias, the newest registered version.

    Raises:
        PromotionRefusedError: the alias is not set, or the model has no version yet.
    """
    from mlops_core import aliases, versions

    if alias is not None:
        current = aliases(tracking, root, model)
        if alias not in current:
            raise PromotionRefusedError(f"no version of {model} holds the registry alias {alias!r} "
                                        f"(aliases: {dict(sorted(current.items())) or 'none'})")
        return int(current[alias])
    known = versions(tracking, root, model)
    if not known:
        raise PromotionRefusedError(f"{model} has no registered version yet; run `mlops train run` first")
    return max(int(v["version"]) for v in known)
