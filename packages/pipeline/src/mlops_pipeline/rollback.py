"""A CRITICAL drift verdict carried out: monitoring decides, this layer rolls back in git and the registry.

Monitoring must not import delivery (they are on one floor), so :func:`mlops_monitoring.run_monitor`
only *decides* (a :class:`~mlops_monitoring.RollbackDecision`) and this module, one floor up, executes
it. A rollback is one operation in a fixed order:

1. **GitOps commit** (``mlops_delivery.serve_fallback``): the environment overlay serves the fallback's
   ``storageUri``, written to ``delivery.gitops_repo`` through the one overlay writer per ``delivery.commit_mode``
   (a commit pushed without force, or a branch and a pull request). This is what Argo CD deploys, so it comes
   first: the manifest is the truth.
2. **Alias + ledger** (``mlops_core.restore_champion``): ``champion`` moves to the fallback and the ledger
   entry records the GitOps commit (and, in pull-request mode, its branch and pull request); journalled under
   the registry lock.

Both steps are idempotent and check the state they expect, so a re-run after a crash between them does
only what is missing (the commit is found, not made again), and two monitors firing at once produce
one commit (the loser's push is rejected and it finds the winner's) and one ledger entry (the second
finds the first under the lock). With no ``delivery.gitops_repo`` (the local profile: nothing deploys
from git) step 1 is skipped and says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import DeliveryConfig, LoadedConfig, TrackingConfig
from mlops_model import kind_of
from mlops_monitoring import (
    ActionResult,
    MonitorResult,
    MonitorRun,
    RollbackDecision,
    RollbackExecutor,
    run_monitor,
)
from mlops_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RollbackOutcome:
    """What a carried-out rollback did: the overlay commit (if any), the alias move and its ledger entry."""

    model: str
    from_version: str
    to_version: str
    env: str | None
    commit: str | None
    """GitOps commit whose overlay serves ``to_version`` (``None``: no GitOps repository configured)."""
    commit_created: bool
    storage_uri: str | None
    ledger_seq: int
    """The ledger entry recording it (the same entry when a re-run or a concurrent monitor found it done)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return dict(self.__dict__)


def roll_back_to_fallback(
    decision: RollbackDecision, delivery: DeliveryConfig, tracking: TrackingConfig, root: Path, *,
    env: str | None = None, lock_timeout_s: float = 60.0,
) -> RollbackOutcome:
    """Carry ``decision`` out: GitOps commit on the overlay, then the registry alias and the ledger entry.

    Args:
        decision: From the monitor: model, the drifted version, the fallback, the reason, the actor.
        delivery: ``gitops_repo`` (``None``: registry only), branch, overlay layout, author, token variable.
        tracking: The registry.
        root: Repository root (relative tracking paths resolve against it).
        env: Overlay to roll back (default: the last environment, production).
        lock_timeout_s: How long to wait for the registry lock held by a concurrent move.

    Raises:
        PipelineError: the decision names no version to roll back from or to.
        PromotionRefusedError, GitError: the overlay is not in the state decided on, or git failed.
        LifecycleError: the registry is not in the state decided on.
    """
    from mlops_core import restore_champion
    from mlops_delivery import serve_fallback

    if decision.from_version is None or decision.to_version is None:
        raise PipelineError(f"rollback of {decision.model} needs both versions, got from {decision.from_version!r} "
                            f"to {decision.to_version!r}: {decision.problem or 'no reason given'}")
    git = None
    if delivery.gitops_repo:
        git = serve_fallback(delivery, decision.model, from_version=int(decision.from_version),
                             to_version=int(decision.to_version), reason=decision.reason, env=env)
    else:
        log.warning("delivery.gitops_repo is not set: rolling back %s in the registry only", decision.model)
    extra: dict[str, Any] = {}
    if git:
        extra = {"gitops_commit": git.commit, "env": git.env, "storage_uri": git.storage_uri}
        if git.branch:  # pull-request mode: the commit waits on its branch for the review
            extra.update(branch=git.branch, pull_request=git.pull_request)
    entry = restore_champion(tracking, root, decision.model, reason=decision.reason, actor=decision.actor,
                             lock_timeout_s=lock_timeout_s, replacing=decision.from_version,
                             to_version=decision.to_version, extra=extra)
    return RollbackOutcome(
        model=decision.model, from_version=decision.from_version, to_version=decision.to_version,
        env=git.env if git else None, commit=entry.extra.get("gitops_commit") or (git.commit if git else None),
        commit_created=bool(git and git.created), storage_uri=git.storage_uri if git else None,
        ledger_seq=entry.seq,
    )


def fallback_executor(delivery: DeliveryConfig, tracking: TrackingConfig, root: Path, *,
                      env: str | None = None) -> RollbackExecutor:
    """The executor :func:`mlops_monitoring.run_monitor` hands its decision to."""

    def execute(decision: RollbackDecision) -> ActionResult:
        done = roll_back_to_fallback(decision, delivery, tracking, root, env=env)
        where = f"{done.env} overlay at {done.commit[:12]}" if done.commit else "registry only (no gitops_repo)"
        return ActionResult("rollback", True, f"champion -> v{done.to_version} ({where}; ledger #{done.ledger_seq})",
                            {"version": done.to_version, "seq": done.ledger_seq, "replaced": done.from_version,
                             **done.to_dict()})

    return execute


def run_monitoring(loaded: LoadedConfig, *, window: str | None = None, current: Path | None = None,
                   reference: Path | None = None, labels: Path | None = None, dry_run: bool = False,
                   html: bool | None = None) -> MonitorResult:
    """``mlops monitor run``: one monitoring run whose CRITICAL rollback is carried out (git, then registry),
    followed by a retraining request (``delivery.retrain``'s drift / performance triggers) and, with
    ``delivery.retrain.on_data``, the data trigger (:func:`mlops_pipeline.triggers.run_data_trigger`): the drift
    job is where git and the repository token are.

    Call ``.check()`` on the result: it raises when an alert was not delivered, the rollback failed or the
    retraining request failed.
    """
    from mlops_pipeline.triggers import outcome_action, retrain_requester, run_data_trigger

    cfg = loaded.config
    dataset = cfg.training.causal_lm.dataset
    result = run_monitor(MonitorRun(
        cfg.monitoring, cfg.serving, cfg.tracking, cfg.project, loaded.root, cfg.project.model, window=window,
        current=current, reference=reference, labels=labels, dry_run=dry_run, html=html,
        execute=fallback_executor(cfg.delivery, cfg.tracking, loaded.root), features=cfg.features,
        retrain=retrain_requester(loaded), kind=kind_of(cfg.training),
        prompts=None if dataset is None else loaded.root / dataset, contract=cfg.contract))
    data = None if dry_run or current is not None else run_data_trigger(loaded)
    if data is not None:  # the data trigger the ingestion job cannot run (no git there): delivery.retrain.on_data
        result.actions.append(outcome_action(data))
    return result

