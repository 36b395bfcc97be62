"""The shadow stage of the promotion flow: candidate (staging) → shadow → canary → production, each a commit.

Production's overlay holds ``shadow-<model>.yaml`` (``SHADOW_MANIFEST``): a ConfigMap ``<model>-shadow-env`` with
the share of live requests the transformer mirrors (``MLOPS__SERVING__TABULAR__SHADOW__FRACTION``, read
through ``envFrom``) and the URL of the shadow predictor, and the InferenceService ``<model>-shadow`` (predictor only)
that serves the candidate. Starting a shadow pins the candidate's immutable ``storageUri`` there, scales the
shadow predictor to one replica and sets the fraction; stopping it sets the fraction to 0 and scales it to zero.
Both also set (or drop) ``mlops.platform/shadow-version`` on the model manifest: a change of the
InferenceService's annotations gives the transformer a new revision, which reads the new ConfigMap.
The two files change in one commit. A shadow cannot start while a canary runs; the promote workflow stops the
shadow (its own commit, after ``mlops shadow analyze`` passed) before the canary starts.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from mlops_config import DeliveryConfig, TrackingConfig
from mlops_delivery.errors import ManifestError, PromotionRefusedError
from mlops_delivery.ledger import registry_version, require_gates_passed
from mlops_delivery.manifest import ModelManifest, round_trip_yaml, storage_uri
from mlops_delivery.overlay import write_local, write_planned
from mlops_delivery.promotion import load_manifest, stage_env, text_diff
from mlops_delivery.publish import publish_model

logger = logging.getLogger(__name__)

SHADOW_MANIFEST = "shadow-{model}.yaml"
SHADOW_VERSION = "mlops.platform/shadow-version"
OLD_PREFIX, PREFIX = "MLOPS__SERVING__SHADOW__", "MLOPS__SERVING__TABULAR__SHADOW__"
"""The ConfigMap's variables before ``serving.shadow`` moved to ``serving.tabular.shadow``, and after."""
FRACTION = f"{PREFIX}FRACTION"


@dataclass(frozen=True)
class ShadowPlacement:
    """What production's shadow files say: the candidate in shadow (``None``: none) and the mirrored share."""

    env: str
    version: int | None
    fraction: float
    storage_uri: str

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "version": self.version, "fraction": self.fraction, "storage_uri": self.storage_uri}


@dataclass(frozen=True)
class ShadowChange:
    """One shadow start or stop: both files' new text, the diff, and the commit that recorded it."""

    model: str
    env: str
    action: str
    before: ShadowPlacement
    after: ShadowPlacement
    diff: str
    message: str
    texts: dict[Path, str] = field(default_factory=dict)
    commit: str | None = None
    pushed: bool = False
    branch: str | None = None
    """Branch holding the commit in pull-request mode (``None``: committed on the current branch)."""
    pull_request: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.diff)

    @property
    def branch_name(self) -> str:
        """The branch that holds the change in pull-request mode."""
        what = f"v{self.after.version}" if self.after.version is not None else "stop"
        return f"gitops/{self.model}-{self.env}-shadow-{what}"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "env": self.env, "action": self.action, "changed": self.changed,
                "before": self.before.to_dict(), "after": self.after.to_dict(), "diff": self.diff,
                "message": self.message, "paths": [str(p) for p in self.texts], "commit": self.commit,
                "pushed": self.pushed, "branch": self.branch, "pull_request": self.pull_request,
                "evidence": self.evidence}


class ShadowManifest:
    """``shadow-<model>.yaml`` of one overlay, edited round-trip (comments and order kept)."""

    def __init__(self, path: Path, env: str, model: str) -> None:
        self.path, self.env, self.model = path, env, model
        if not path.is_file():
            raise ManifestError(f"no shadow manifest for {model!r} in {env!r}: {str(path)!r} does not exist (copy "
                                "infra/overlays/production/shadow-fraud.yaml, list it under the overlay's resources)")
        self.original = path.read_text(encoding="utf-8")
        try:
            self.docs = [d for d in round_trip_yaml().load_all(self.original) if d is not None]
        except Exception as exc:  # ruamel raises many unrelated types for bad YAML
            raise ManifestError(f"{str(path)!r} is not valid YAML: {exc}") from exc
        self.config = self._find("ConfigMap", f"{model}-shadow-env")
        self.isvc = self._find("InferenceService", f"{model}-shadow")
        for keys in (("data",), ("metadata", "annotations"), ("spec", "predictor", "model")):
            doc = self.config if keys == ("data",) else self.isvc
            for key in keys:
                doc = doc.get(key) if isinstance(doc, dict) else None
            if not isinstance(doc, CommentedMap):
                raise ManifestError(f"{str(path)!r} lacks the mapping {'.'.join(keys)!r}")
        stale = sorted(str(k) for k in self.config["data"] if str(k).startswith(OLD_PREFIX))
        if stale:  # the transformer refuses them at load; a start or stop must not write the new name beside them
            raise ManifestError(f"{str(path)!r}: {stale} name serving.shadow.*, which has moved to "
                                f"serving.tabular.shadow.*; rename them {PREFIX}…")
        self.placement()

    def _find(self, kind: str, name: str) -> CommentedMap:
        for doc in self.docs:
            if isinstance(doc, CommentedMap) and doc.get("kind") == kind and (doc.get("metadata") or {}).get(
                    "name") == name:
                return doc
        raise ManifestError(f"{str(self.path)!r} holds no {kind} named {name!r}")

    def placement(self) -> ShadowPlacement:
        raw_fraction = self.config["data"].get(FRACTION, "0")
        raw_version = self.isvc["metadata"]["annotations"].get(SHADOW_VERSION, "0")
        try:
            fraction, version = float(str(raw_fraction)), int(str(raw_version))
        except ValueError:
            raise ManifestError(f"{str(self.path)!r}: {FRACTION}={raw_fraction!r} / {SHADOW_VERSION}="
                                f"{raw_version!r}; expected a share in [0, 1] and a version number") from None
        if not 0 <= fraction <= 1 or version < 0:
            raise ManifestError(f"{str(self.path)!r}: {FRACTION}={raw_fraction!r} must be in [0, 1] and "
                                f"{SHADOW_VERSION}={raw_version!r} >= 0")
        return ShadowPlacement(self.env, version if fraction > 0 and version > 0 else None, fraction,
                               str(self.isvc["spec"]["predictor"]["model"]["storageUri"]))

    def set(self, version: int, fraction: float, uri: str | None) -> None:
        self.config["data"][FRACTION] = DoubleQuotedScalarString(_share(fraction))
        self.isvc["metadata"]["annotations"][SHADOW_VERSION] = DoubleQuotedScalarString(str(version))
        predictor = self.isvc["spec"]["predictor"]
        predictor["minReplicas"] = 1 if fraction > 0 else 0
        if uri is not None:
            predictor["model"]["storageUri"] = uri

    def dump(self) -> str:
        buf = io.StringIO()
        round_trip_yaml().dump_all(self.docs, buf)
        return buf.getvalue()


def _share(fraction: float) -> str:
    return "0" if fraction == 0 else ("1" if fraction == 1 else repr(float(fraction)))


def shadow_manifest(delivery: DeliveryConfig, root: Path, model: str) -> ShadowManifest:
    env = stage_env(delivery, "canary")
    return ShadowManifest(root / delivery.infra_dir / "overlays" / env / SHADOW_MANIFEST.format(model=model), env,
                          model)


def shadow_status(delivery: DeliveryConfig, root: Path, model: str) -> ShadowPlacement:
    """Which candidate runs in shadow in production, and its share (from the files in git)."""
    return shadow_manifest(delivery, root, model).placement()


def plan_shadow(delivery: DeliveryConfig, root: Path, model: str, version: int | None, *,
                fraction: float = 1.0) -> ShadowChange:
    """Edit both files in memory to start a shadow of ``version`` (``None``: stop the running one).

    Refused: a version that does not run in staging (the candidate stage before shadow), one that already
    serves production, a start while a canary runs, and a share outside (0, 1].
    """
    shadow = shadow_manifest(delivery, root, model)
    prod = load_manifest(delivery, root, model, shadow.env)
    before = shadow.placement()
    if version is None:
        action = f"stop the shadow of {model} v{before.version} in {shadow.env}" if before.version else \
            f"no shadow of {model} runs in {shadow.env}"
        if before.version is not None or before.fraction:
            shadow.set(before.version or 0, 0.0, None)
        _set_model_annotation(prod, None)
    else:
        if not 0 < fraction <= 1:
            raise PromotionRefusedError(f"shadow fraction {fraction!r} must be in (0, 1]")
        if version < 1:
            raise PromotionRefusedError(f"version must be a registry version >= 1, got {version!r}")
        placed = prod.placement()
        staged = load_manifest(delivery, root, model, stage_env(delivery, "staging")).placement()
        if staged.stable_version != version:
            raise PromotionRefusedError(f"cannot shadow {model} v{version}: {staged.env} serves "
                                        f"v{staged.stable_version}; promote it to staging first")
        if placed.stable_version == version:
            raise PromotionRefusedError(f"{model} v{version} already serves {placed.env}; nothing to shadow")
        if placed.canary_version is not None:
            raise PromotionRefusedError(f"a canary of {model} v{placed.canary_version} runs in {placed.env}; the "
                                        "shadow comes before the canary: finish or roll it back first")
        if before.version not in (None, version):
            raise PromotionRefusedError(f"{model} v{before.version} is in shadow; stop it first "
                                        "(mlops gitops shadow --stop)")
        action = f"shadow {model} v{version} with {_share(fraction)} of live requests in {shadow.env}"
        shadow.set(version, fraction, storage_uri(delivery.storage_uri_template, model, version))
        _set_model_annotation(prod, version)
    texts = {shadow.path: shadow.dump(), prod.path: prod.dump()}
    originals = {shadow.path: shadow.original, prod.path: prod.original}
    diff = "".join(text_diff(originals[p], t, p.relative_to(root) if p.is_relative_to(root) else p)
                   for p, t in texts.items())
    return ShadowChange(model=model, env=shadow.env, action=action, before=before, after=shadow.placement(),
                        diff=diff, message=f"gitops: {action}", texts=texts)


def _set_model_annotation(prod: ModelManifest, version: int | None) -> None:
    annotations = prod.doc["metadata"]["annotations"]
    if version is None:
        annotations.pop(SHADOW_VERSION, None)
    else:
        annotations[SHADOW_VERSION] = DoubleQuotedScalarString(str(version))


def apply_shadow(change: ShadowChange, delivery: DeliveryConfig, root: Path, *, commit: bool = False,
                 push: bool = False) -> ShadowChange:
    """Write both files through the overlay writer (:func:`mlops_delivery.overlay.write_overlay`) and, when asked,
    commit them as one commit per ``delivery.commit_mode`` (and push). A push the remote rejects because the
    branch moved is refused: this change was planned on the old HEAD (:func:`start_shadow` re-plans)."""

    return write_planned(delivery, root, change, commit=commit, push=push)


def start_shadow(delivery: DeliveryConfig, tracking: TrackingConfig, root: Path, model: str, version: int | None, *,
                 fraction: float = 1.0, commit: bool = False, push: bool = False) -> ShadowChange:
    """Gates checked, the candidate published to its ``storageUri``, then the shadow started (``version=None``: the
    registry's ``staging`` version)."""
    if version is None:
        version = registry_version(tracking, root, model, "staging")
    gate = require_gates_passed(tracking, root, model, version)

    def edit(at: Path) -> ShadowChange:
        return plan_shadow(delivery, at, model, version, fraction=fraction)

    change = edit(root)
    evidence: dict[str, Any] = {"gates": gate}
    if change.changed:
        uri = storage_uri(delivery.storage_uri_template, model, version)
        evidence["published"] = publish_model(tracking, root, model, version, uri).to_dict()
    return replace(write_local(delivery, root, edit, change, commit=commit, push=push), evidence=evidence)


def stop_shadow(delivery: DeliveryConfig, root: Path, model: str, *, commit: bool = False,
                push: bool = False) -> ShadowChange:
    """End the running shadow (fraction 0, shadow predictor scaled to zero)."""

    def edit(at: Path) -> ShadowChange:
        return plan_shadow(delivery, at, model, None)

    return write_local(delivery, root, edit, edit(root), commit=commit, push=push)

