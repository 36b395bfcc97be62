"""Promotion as a manifest edit: staging → canary (each step of ``canary_steps``) → production.

Each call edits exactly one file, the model manifest of the target environment (see
:mod:`mlops_delivery.manifest`), refuses to skip a stage, and is idempotent: promoting what already
runs changes nothing. ``promote_version`` also checks the promotion ledger (gates passed) and can
record the edit as a git commit, so Argo CD deploys it and the history says who moved what when.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from mlops_config import DeliveryConfig, TrackingConfig
from mlops_delivery.errors import PromotionRefusedError
from mlops_delivery.ledger import registry_version, require_gates_passed
from mlops_delivery.manifest import ModelManifest, Placement, manifest_path, storage_uri
from mlops_delivery.overlay import write_local, write_planned
from mlops_delivery.publish import publish_model

logger = logging.getLogger(__name__)

Stage = Literal["staging", "canary", "production"]
STAGES: tuple[str, ...] = ("staging", "canary", "production")


@dataclass(frozen=True)
class ManifestChange:
    """One edit of one model manifest: before and after, its diff, and the commit that recorded it."""

    model: str
    env: str
    path: Path
    action: str
    before: Placement
    after: Placement
    diff: str
    message: str
    commit: str | None = None
    pushed: bool = False
    branch: str | None = None
    """Branch holding the commit in pull-request mode (``None``: committed on the current branch)."""
    pull_request: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    new_text: str = ""
    """The file's text after the change."""

    @property
    def changed(self) -> bool:
        """Whether the file's text changes (``False``: already in the requested state)."""
        return bool(self.diff)

    @property
    def texts(self) -> dict[Path, str]:
        """The one file this change writes, with its new text."""
        return {self.path: self.new_text}

    @property
    def branch_name(self) -> str:
        """The branch that holds the change in pull-request mode."""
        after = self.after
        return f"gitops/{self.model}-{self.env}-v{after.canary_version or after.stable_version}" + (
            f"-{after.canary_percent}pct" if after.canary_version else "")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return {
            "model": self.model, "env": self.env, "path": str(self.path), "action": self.action,
            "changed": self.changed, "before": self.before.to_dict(), "after": self.after.to_dict(),
            "diff": self.diff, "message": self.message, "commit": self.commit, "pushed": self.pushed,
            "branch": self.branch, "pull_request": self.pull_request, "evidence": self.evidence,
        }


def stage_env(delivery: DeliveryConfig, stage: str) -> str:
    """The overlay a stage edits: staging is the first environment, canary and production the last."""
    if stage not in STAGES:
        raise PromotionRefusedError(f"unknown stage {stage!r}; expected one of {list(STAGES)}")
    return delivery.environments[0] if stage == "staging" else delivery.environments[-1]


def load_manifest(delivery: DeliveryConfig, root: Path, model: str, env: str) -> ModelManifest:
    """The model manifest of ``model`` in ``env`` under ``root``."""
    if env not in delivery.environments:
        raise PromotionRefusedError(f"unknown environment {env!r}; expected one of {list(delivery.environments)}")
    path = manifest_path(root, delivery.infra_dir, delivery.model_manifest, env, model)
    return ModelManifest(path, env, model)


def gitops_status(delivery: DeliveryConfig, root: Path, model: str) -> dict[str, Placement]:
    """Which version runs where, with which traffic split, per environment (from the manifests in git)."""
    return {env: load_manifest(delivery, root, model, env).placement() for env in delivery.environments}


def plan_promotion(
    delivery: DeliveryConfig, root: Path, model: str, version: int, to: str, *, percent: int | None = None
) -> ManifestChange:
    """Edit the manifest in memory for promoting ``version`` to ``to``; refuse skipped stages.

    Args:
        delivery: The delivery section (environments, canary steps, file names).
        root: Repository root holding ``delivery.infra_dir``.
        model: Model name (the InferenceService's name).
        version: Registry version to promote.
        to: ``staging``, ``canary`` or ``production``.
        percent: Canary traffic share; must be the next of ``delivery.canary_steps`` (default: the next).

    Returns:
        The planned change (``changed`` is ``False`` when the target already runs that state).
    """
    if version < 1:
        raise PromotionRefusedError(f"version must be a registry version >= 1, got {version!r}")
    if percent is not None and to != "canary":
        raise PromotionRefusedError(f"--percent applies to --to canary only, got --to {to!r} with percent {percent!r}")
    env = stage_env(delivery, to)
    manifest = load_manifest(delivery, root, model, env)
    before = manifest.placement()
    uri = storage_uri(delivery.storage_uri_template, model, version)
    if to == "staging":
        action = f"serve {model} v{version} in {env}"
        manifest.set_stable(version, uri)
    else:
        staged = load_manifest(delivery, root, model, stage_env(delivery, "staging")).placement()
        if to == "canary":
            percent = _check_canary_step(delivery, model, version, before, staged, percent)
            if percent == 100:
                to = "production"
            else:
                action = f"canary {model} v{version} at {percent}% in {env}"
                manifest.set_canary(version, percent, uri)
        if to == "production":
            _check_production(delivery, model, version, before, staged)
            action = f"promote {model} v{version} to 100% in {env}"
            if before.stable_version == version and before.canary_version is None:
                pass  # already there: idempotent
            else:
                manifest.set_stable(version, uri)
    return manifest_change(manifest, root, action, before, f"gitops: {action}")


def manifest_change(manifest: ModelManifest, root: Path, action: str, before: Placement,
                    message: str) -> ManifestChange:
    """The change an in-memory edit of ``manifest`` makes to its file (read under ``root``), as a record."""
    text = manifest.dump()
    diff = text_diff(manifest.original, text, _relative(manifest.path, root))
    return ManifestChange(model=manifest.model, env=manifest.env, path=manifest.path, action=action, before=before,
                          after=manifest.placement(), diff=diff, message=message, new_text=text)


def _check_canary_step(
    delivery: DeliveryConfig, model: str, version: int, prod: Placement, staged: Placement, percent: int | None
) -> int:
    steps = delivery.canary_steps
    if prod.stable_version == version and prod.canary_version is None:
        raise PromotionRefusedError(f"{model} v{version} already serves 100% in {prod.env}; nothing to canary")
    if prod.canary_version is None:
        if staged.stable_version != version:
            raise PromotionRefusedError(
                f"cannot canary {model} v{version}: {staged.env} serves v{staged.stable_version}; "
                f"promote it to staging first (mlops gitops promote --to staging)"
            )
        allowed = steps[0]
    elif prod.canary_version != version:
        raise PromotionRefusedError(
            f"a canary of {model} v{prod.canary_version} is running at {prod.canary_percent}% in {prod.env}; "
            f"finish it or roll it back (mlops gitops rollback) before starting v{version}"
        )
    else:
        current = prod.canary_percent
        if percent == current:
            return current  # idempotent
        if current not in steps:
            raise PromotionRefusedError(f"canary runs at {current}%, which is not one of delivery.canary_steps {steps}")
        allowed = steps[steps.index(current) + 1]
    if percent is None:
        return allowed
    if percent not in steps:
        raise PromotionRefusedError(f"--percent {percent!r} is not a canary step; expected one of {list(steps)}")
    if percent != allowed:
        raise PromotionRefusedError(
            f"--percent {percent} would skip a stage: the next canary step for {model} v{version} is {allowed}%"
        )
    return percent


def _check_production(delivery: DeliveryConfig, model: str, version: int, prod: Placement, staged: Placement) -> None:
    if prod.stable_version == version and prod.canary_version is None:
        return
    steps = delivery.canary_steps
    if len(steps) == 1:  # no canary stages configured: production follows staging directly
        if staged.stable_version != version:
            raise PromotionRefusedError(
                f"cannot promote {model} v{version} to production: {staged.env} serves v{staged.stable_version}"
            )
        return
    last = steps[-2]
    if prod.canary_version != version or prod.canary_percent != last:
        running = (f"v{prod.canary_version} at {prod.canary_percent}%" if prod.canary_version is not None
                   else "no canary")
        raise PromotionRefusedError(
            f"cannot promote {model} v{version} to production: {prod.env} runs {running}; the canary must "
            f"reach {last}% first (steps {list(steps)})"
        )


def plan_revert(delivery: DeliveryConfig, root: Path, model: str, env: str) -> ManifestChange:
    """Edit the manifest in memory to undo the last promotion in ``env``.

    Two reverts, one per state: a running canary is reverted (all traffic back to the stable version);
    without a canary the stable version goes back to ``previous-version``. The result is the file as it was
    before that promotion. (Moving the registry's ``champion`` back is :func:`mlops_core.restore_champion`; the
    monitor's drift rollback is :func:`mlops_delivery.serve_fallback` plus that.)
    """
    manifest = load_manifest(delivery, root, model, env)
    before = manifest.placement()
    if before.canary_version is not None:
        action = f"roll back canary {model} v{before.canary_version} in {env} to v{before.stable_version}"
        manifest.clear_canary()
        manifest.restore_stable(before.stable_version, storage_uri(delivery.storage_uri_template, model,
                                                                   before.stable_version), before.previous_version)
    elif before.previous_version is not None:
        action = f"roll back {model} v{before.stable_version} in {env} to v{before.previous_version}"
        manifest.restore_stable(before.previous_version,
                                storage_uri(delivery.storage_uri_template, model, before.previous_version), None)
    else:
        raise PromotionRefusedError(
            f"nothing to roll back in {env}: {model} v{before.stable_version} runs with no canary and no "
            f"previous version recorded ({str(manifest.path)!r})"
        )
    return manifest_change(manifest, root, action, before, f"gitops: revert: {action}")


def apply_change(change: ManifestChange, delivery: DeliveryConfig, root: Path, *, commit: bool = False,
                 push: bool = False) -> ManifestChange:
    """Write a change planned at ``root``'s HEAD through the overlay writer (:func:`mlops_delivery.overlay.
    write_overlay`): on disk only, or committed (and pushed) per ``delivery.commit_mode``.

    The change cannot be planned again here, so a push the remote rejects because the branch moved is refused;
    :func:`promote_version` and :func:`revert_promotion` re-plan instead.
    """
    return write_planned(delivery, root, change, commit=commit, push=push)


def promote_version(
    delivery: DeliveryConfig,
    tracking: TrackingConfig,
    root: Path,
    model: str,
    version: int | None,
    to: str,
    *,
    percent: int | None = None,
    commit: bool = False,
    push: bool = False,
    actor: str | None = None,
) -> ManifestChange:
    """Check the ledger (gates passed), plan the edit, write it, and optionally commit and push it.

    ``version=None`` takes the version that holds the stage's registry alias (``staging``, ``canary``,
    ``champion``), so a workflow can pin what the registry step just moved.

    Before the manifest is written, the version's exported model is published to the ``storageUri`` the
    manifest will name (:func:`mlops_delivery.publish.publish_model`: immutable, verified by hash), so the
    overlay never names a path that KServe's storage initializer would find empty. A commit is recorded in the
    promotion ledger as a ``deploy`` entry (:func:`mlops_core.record_deploy`, by ``actor``, default the commit
    author), so ``mlops registry verify`` can walk every overlay commit that deployed a version.
    """
    if version is None:
        version = registry_version(tracking, root, model, to)
    gate = require_gates_passed(tracking, root, model, version)

    def edit(at: Path) -> ManifestChange:
        return plan_promotion(delivery, at, model, version, to, percent=percent)

    change = edit(root)
    evidence: dict[str, Any] = {"gates": gate}
    if change.changed:
        uri = storage_uri(delivery.storage_uri_template, model, version)
        evidence["published"] = publish_model(tracking, root, model, version, uri).to_dict()
    change = write_local(delivery, root, edit, change, commit=commit, push=push)
    if change.commit:
        from mlops_core import record_deploy

        entry = record_deploy(tracking, root, model, version, stage=to, overlay_commit=change.commit,
                              actor=actor or delivery.git_author, reason=change.message,
                              extra={"env": change.env, "path": _relative(change.path, root), "branch": change.branch,
                                     "pull_request": change.pull_request, "pushed": change.pushed})
        evidence["ledger_seq"] = entry.seq
    return replace(change, evidence=evidence)


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def revert_promotion(delivery: DeliveryConfig, root: Path, model: str, env: str, *, commit: bool = False,
                     push: bool = False) -> ManifestChange:
    """Plan, write and optionally commit (per ``delivery.commit_mode``) the revert of the last promotion in
    ``env`` (:func:`plan_revert`): ``mlops gitops rollback``."""

    def edit(at: Path) -> ManifestChange:
        return plan_revert(delivery, at, model, env)

    return write_local(delivery, root, edit, edit(root), commit=commit, push=push)


def text_diff(old: str, new: str, name: Path | str) -> str:
    """A unified diff of a file's text, ``a/<name>`` → ``b/<name>`` (what git shows)."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}"))
