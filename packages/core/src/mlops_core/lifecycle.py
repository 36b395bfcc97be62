"""Model lifecycle on MLflow aliases: the one place that moves ``candidate → staging → canary → champion``.

Stages are deprecated in MLflow; aliases are not, and an alias names exactly one version of a model, so
"two champions" cannot exist in the registry. What can go wrong is a *sequence* of moves (champion and
fallback, plus the ledger) interleaving with another process's. Every move therefore runs under the
registry-held lock of :mod:`mlops_core.registry_lock` and is journalled in the ledger
(:mod:`mlops_core.ledger`): the entry is written ``pending`` with the full target state, the aliases
move, the entry becomes ``applied``. A process killed in between leaves a pending entry that the next
move rolls forward before doing anything else, so no reader ever acts on a half-applied state for long.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_config import TrackingConfig
from mlops_core.errors import PlatformError
from mlops_core.ledger import (
    ChainVerdict,
    LedgerEntry,
    aliases_at,
    chain_link,
    mark_applied,
    now_iso,
    parse_time,
    read_entries,
    report_hash,
    verify_chain,
    write_entry,
)
from mlops_core.lineage import git_info
from mlops_core.registry_lock import registry_lock
from mlops_core.tracking import mlflow_client, registered_model_name

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

LIFECYCLE = ("candidate", "staging", "canary", "champion")
FALLBACK = "fallback"
ALIASES = (*LIFECYCLE, FALLBACK)
PREVIOUS = {"staging": "candidate", "canary": "staging", "champion": "canary"}
DEFAULT_REQUIRED_GATES: dict[str, tuple[str, ...]] = {
    "staging": ("quality", "reproducibility", "latency", "contract"),
}
MODEL_DIGEST_TAG = "mlops.model_digest"
"""Registry version tag holding the signed model's manifest digest (set at registration)."""
GATE_REPORT_ARTIFACT = "evaluation/evaluation.json"
"""Where ``mlops evaluate run`` logs its JSON on the candidate's run; promote reads it from there."""


class LifecycleError(PlatformError):
    """An alias move is not allowed (wrong order, unknown version or alias, nothing to roll back to)."""


class GateNotPassedError(LifecycleError):
    """The gates required for this step did not pass (or were not run): the promotion is blocked."""

    exit_code = 1


def default_actor() -> str:
    """Who is acting: ``$GITHUB_ACTOR`` in CI, else the login name."""
    return os.environ.get("GITHUB_ACTOR") or getpass.getuser()


def _client(tracking: TrackingConfig, root: Path) -> MlflowClient:
    return mlflow_client(tracking, root)


def _registered(client: MlflowClient, name: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise LifecycleError(
                f"registered model {name!r} does not exist; train and register a version first"
            ) from None
        raise


def _version(client: MlflowClient, name: str, version: str | int) -> ModelVersion:
    from mlflow.exceptions import MlflowException

    text = str(version).strip()
    if not text.isdigit():
        raise LifecycleError(f"version {version!r} of {name!r} is not a version number; expected e.g. '3'")
    try:
        return client.get_model_version(name, text)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            known = sorted(int(v.version) for v in client.search_model_versions(f"name = '{name}'"))
            raise LifecycleError(f"{name!r} has no version {text!r}; known versions: {known}") from None
        raise


def _lifecycle_aliases(registered: Any) -> dict[str, str]:
    return {a: str(v) for a, v in registered.aliases.items() if a in ALIASES}


def _apply(client: MlflowClient, name: str, current: Mapping[str, str], target: Mapping[str, str]) -> None:
    """Move the lifecycle aliases from ``current`` to ``target`` (idempotent: safe to repeat)."""
    for alias in ALIASES:
        want = target.get(alias)
        if want is not None and current.get(alias) != want:
            client.set_registered_model_alias(name, alias, want)
        elif want is None and alias in current:
            client.delete_registered_model_alias(name, alias)


def _recover(client: MlflowClient, name: str, actor: str) -> list[LedgerEntry]:
    """Roll forward any entry a crashed process left pending; return the ledger (under the lock)."""
    registered = _registered(client, name)
    entries = read_entries(registered.tags)
    for i, entry in enumerate(entries):
        if entry.status == "pending":
            log.warning("rolling forward pending ledger entry %d of %s (%s)", entry.seq, name, entry.reason)
            _apply(client, name, _lifecycle_aliases(_registered(client, name)), entry.aliases_after)
            entries[i] = mark_applied(client, name, entry, recovered_by=actor, recovered_at=now_iso())
    return entries


def check_gates(report: Mapping[str, Any] | None, model: str, version: str, required: Sequence[str]) -> None:
    """Raise :class:`GateNotPassedError` unless ``report`` is this version's and every required gate passed."""
    if not required:
        return
    if report is None:
        raise GateNotPassedError(
            f"no gate report for {model!r} version {version!r}; run `mlops evaluate run --model {model} "
            f"--candidate {version}` first (gates required: {list(required)})"
        )
    got_model = report.get("model")
    got_version = str((report.get("candidate") or {}).get("version"))
    if got_model != model or got_version != version:
        raise GateNotPassedError(
            f"gate report is for model {got_model!r} version {got_version!r}, not {model!r} version {version!r}"
        )
    gates = {g.get("name"): g for g in report.get("gates", []) if isinstance(g, Mapping)}
    missing = [g for g in required if g not in gates]
    failed = [f"{g}: {gates[g].get('reason')}" for g in required if g in gates and gates[g].get("passed") is not True]
    if missing or failed:
        raise GateNotPassedError(
            f"{model!r} version {version!r} is blocked: "
            + "; ".join([*(f"gate {g!r} was not run" for g in missing), *failed])
        )


def fetch_gate_report(client: MlflowClient, mv: ModelVersion) -> dict[str, Any] | None:
    """The gate report ``mlops evaluate run`` logged on the version's run, ``None`` when there is none."""
    from mlflow.exceptions import MlflowException

    if not mv.run_id:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(mv.run_id, GATE_REPORT_ARTIFACT, tmp)
        except (MlflowException, OSError):
            return None
        return dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _run_tag(client: MlflowClient, mv: ModelVersion, key: str) -> str | None:
    from mlflow.exceptions import MlflowException

    if not mv.run_id:
        return None
    try:
        return client.get_run(mv.run_id).data.tags.get(key)
    except MlflowException:
        return None


def promote(
    tracking: TrackingConfig,
    root: Path,
    model: str,
    version: str | int,
    to: str,
    *,
    reason: str,
    actor: str,
    gate_report: Mapping[str, Any] | None = None,
    required_gates: Mapping[str, Sequence[str]] | None = None,
    lock_timeout_s: float = 30.0,
    overlay_commit: str | None = None,
) -> LedgerEntry:
    """Move ``version`` of ``model`` to alias ``to``, after checking the gates that step requires.

    Order is enforced: ``to=staging`` needs the version to be ``candidate``, ``canary`` needs ``staging``,
    ``champion`` needs ``canary`` (the previous champion becomes ``fallback``); ``candidate`` takes any
    version that holds no later alias. The version leaves the alias it came from.

    Args:
        tracking: tracking section (where the registry is).
        root: repo root (relative tracking paths resolve against it; git commit read from it).
        model: model config name, e.g. ``fraud`` (the registry name adds the configured prefix).
        version: registry version number.
        to: one of ``candidate``, ``staging``, ``canary``, ``champion``.
        reason: why, for the ledger (required).
        actor: who, for the ledger.
        gate_report: the evaluation JSON; default: the one logged on the version's run.
        required_gates: per target alias, gate names that must have passed (default
            :data:`DEFAULT_REQUIRED_GATES`, i.e. all four gates before ``staging``).
        lock_timeout_s: how long to wait for a concurrent move to finish.
        overlay_commit: the GitOps overlay commit that deploys this move, when it was made first.

    Raises:
        LifecycleError: unknown alias/version, or out of order. GateNotPassedError: gates missing or failed.
    """
    if to not in LIFECYCLE:
        raise LifecycleError(f"cannot promote to {to!r}; expected one of {list(LIFECYCLE)} (use rollback for fallback)")
    if not reason or not reason.strip():
        raise LifecycleError("a promotion needs a reason (it goes in the ledger); pass --reason")
    client = _client(tracking, root)
    name = registered_model_name(tracking, model)
    mv = _version(client, name, version)
    version = str(mv.version)
    required = tuple((DEFAULT_REQUIRED_GATES if required_gates is None else required_gates).get(to, ()))
    report = gate_report if gate_report is not None or not required else fetch_gate_report(client, mv)
    check_gates(report, model, version, required)
    data_hash = _run_tag(client, mv, "mlops.data_hash")
    commit = git_info(root).commit
    with registry_lock(client, name, timeout_s=lock_timeout_s):
        entries = _recover(client, name, actor)
        before = _lifecycle_aliases(_registered(client, name))
        held = sorted(a for a, v in before.items() if v == version)
        if before.get(to) == version:
            raise LifecycleError(f"{name!r} version {version!r} already is {to!r}; nothing to do")
        source = PREVIOUS.get(to)
        if source is not None and before.get(source) != version:
            raise LifecycleError(
                f"{name!r} version {version!r} is not {source!r} (it holds {held or 'no alias'}; {source!r} is "
                f"{before.get(source)!r}); promote in order candidate → staging → canary → champion"
            )
        if source is None and set(held) & {"staging", "canary", "champion"}:
            raise LifecycleError(f"{name!r} version {version!r} already holds {held}; it cannot go back to candidate")
        after = dict(before)
        if source is not None:
            after.pop(source, None)
        after[to] = version
        if to == "champion":  # the old champion is the fallback; a version is never its own fallback
            if before.get("champion"):
                after[FALLBACK] = before["champion"]
            if after.get(FALLBACK) == version:
                after.pop(FALLBACK)
        entry = LedgerEntry(
            seq=(entries[-1].seq if entries else 0) + 1, model=name, action="promote", version=version,
            from_alias=source, to_alias=to, actor=actor, reason=reason.strip(), ts=now_iso(),
            aliases_before=before, aliases_after=after,
            gate_report_sha256=report_hash(report) if report is not None else None,
            data_hash=data_hash, git_commit=commit, model_digest=(mv.tags or {}).get(MODEL_DIGEST_TAG),
            overlay_commit=overlay_commit, prev_sha256=chain_link(entries),
        )
        entry = write_entry(client, name, entry)
        _apply(client, name, before, after)
        done = mark_applied(client, name, entry)
    log.info("%s version %s → %s (ledger #%d)", name, version, to, done.seq)
    return done


def _rollback_done(entries: Sequence[LedgerEntry], replacing: str, target: str | None) -> LedgerEntry | None:
    """The applied rollback entry that replaced ``replacing`` (with ``target``, when given), newest first."""
    for entry in reversed(entries):
        if entry.action != "rollback" or entry.status != "applied":
            continue
        if str(entry.extra.get("replaced")) == replacing and (target is None or entry.version == target):
            return entry
    return None


def restore_champion(
    tracking: TrackingConfig, root: Path, model: str, *, reason: str, actor: str, lock_timeout_s: float = 30.0,
    replacing: str | int | None = None, to_version: str | int | None = None, extra: Mapping[str, Any] | None = None,
) -> LedgerEntry:
    """Make the ``fallback`` version ``champion`` again and record it (a ``rollback`` ledger entry); the replaced
    version keeps no alias. ``mlops registry rollback``, and the registry half of the monitor's drift rollback.

    With ``replacing`` the call is idempotent, for callers that may run twice or at once (a monitor
    re-run after a crash, two monitors firing together): under the lock, if a rollback that replaced
    ``replacing`` (by ``to_version``, when given) is already applied and its target is still champion, that
    entry is returned and nothing moves; if ``replacing`` is not champion any more, it is refused.
    ``to_version`` must then be the fallback, and ``extra`` is stored on the entry (e.g. the GitOps commit).

    Raises:
        LifecycleError: there is no fallback to restore, or the registry is not in the state named.
    """
    if not reason or not reason.strip():
        raise LifecycleError("a rollback needs a reason (it goes in the ledger); pass --reason")
    client = _client(tracking, root)
    name = registered_model_name(tracking, model)
    commit = git_info(root).commit
    replaced_v = None if replacing is None else str(replacing)
    target_v = None if to_version is None else str(to_version)
    with registry_lock(client, name, timeout_s=lock_timeout_s):
        entries = _recover(client, name, actor)
        before = _lifecycle_aliases(_registered(client, name))
        if replaced_v is not None:
            done = _rollback_done(entries, replaced_v, target_v)
            if done is not None and before.get("champion") == done.version:
                log.info("%s: rollback of version %s already recorded (ledger #%d)", name, replaced_v, done.seq)
                return done
            if before.get("champion") != replaced_v:
                raise LifecycleError(
                    f"{name!r}: cannot roll back version {replaced_v!r}: champion is {before.get('champion')!r} "
                    f"(aliases: {before}); the registry moved since the rollback was decided"
                )
        target = before.get(FALLBACK)
        if target is None:
            raise LifecycleError(
                f"{name!r} has no {FALLBACK!r} version to roll back to (aliases: {before}); "
                "a fallback exists once a second version has become champion"
            )
        if target_v is not None and target != target_v:
            raise LifecycleError(f"{name!r}: the {FALLBACK!r} version is {target!r}, not {target_v!r} as decided")
        after = {a: v for a, v in before.items() if a != FALLBACK}
        after["champion"] = target
        entry = LedgerEntry(
            seq=(entries[-1].seq if entries else 0) + 1, model=name, action="rollback", version=target,
            from_alias=FALLBACK, to_alias="champion", actor=actor, reason=reason.strip(), ts=now_iso(),
            aliases_before=before, aliases_after=after, git_commit=commit,
            extra={**dict(extra or {}), "replaced": before.get("champion")},
            model_digest=(_version(client, name, target).tags or {}).get(MODEL_DIGEST_TAG),
            overlay_commit=(extra or {}).get("gitops_commit"), prev_sha256=chain_link(entries),
        )
        entry = write_entry(client, name, entry)
        _apply(client, name, before, after)
        done = mark_applied(client, name, entry)
    log.warning("%s rolled back: champion %s → %s (ledger #%d)", name, before.get("champion"), target, done.seq)
    return done


def record_deploy(
    tracking: TrackingConfig, root: Path, model: str, version: str | int, *, stage: str, overlay_commit: str,
    actor: str, reason: str, extra: Mapping[str, Any] | None = None, lock_timeout_s: float = 30.0,
) -> LedgerEntry:
    """Append a ``deploy`` entry: the GitOps overlay commit that put ``version`` in front of ``stage``'s traffic.

    Alias moves happen in the registry first and the manifest commit after it, so the commit cannot ride on
    the promote entry; this entry carries it (with the version's model digest), chained like any other. The
    aliases do not move (``aliases_before == aliases_after``). Idempotent: an applied ``deploy`` entry of the
    same version, stage and commit is returned as it is.

    Raises:
        LifecycleError: the version does not exist, or ``overlay_commit`` / ``reason`` is empty.
    """
    if not overlay_commit or not overlay_commit.strip():
        raise LifecycleError(f"a deploy of version {version!r} to {stage!r} needs the overlay commit that made it")
    if not reason or not reason.strip():
        raise LifecycleError("a deploy needs a reason (it goes in the ledger)")
    client = _client(tracking, root)
    name = registered_model_name(tracking, model)
    mv = _version(client, name, version)
    version = str(mv.version)
    with registry_lock(client, name, timeout_s=lock_timeout_s):
        entries = _recover(client, name, actor)
        for done in reversed(entries):
            if (done.action == "deploy" and done.version == version and done.to_alias == stage
                    and done.overlay_commit == overlay_commit and done.status == "applied"):
                return done
        now = _lifecycle_aliases(_registered(client, name))
        entry = LedgerEntry(
            seq=(entries[-1].seq if entries else 0) + 1, model=name, action="deploy", version=version,
            from_alias=None, to_alias=stage, actor=actor, reason=reason.strip(), ts=now_iso(),
            aliases_before=now, aliases_after=dict(now), git_commit=git_info(root).commit, status="applied",
            extra=dict(extra or {}), model_digest=(mv.tags or {}).get(MODEL_DIGEST_TAG),
            overlay_commit=overlay_commit.strip(), prev_sha256=chain_link(entries),
        )
        done = write_entry(client, name, entry)
    log.info("%s version %s deployed to %s by overlay commit %s (ledger #%d)", name, version, stage,
             overlay_commit[:12], done.seq)
    return done


def history(
    tracking: TrackingConfig, root: Path, model: str, at: str | datetime | None = None
) -> list[LedgerEntry]:
    """Applied ledger entries of ``model``, oldest first; with ``at``, only those made at or before it."""
    client = _client(tracking, root)
    entries = [e for e in read_entries(_registered(client, registered_model_name(tracking, model)).tags)
               if e.status == "applied"]
    if at is None:
        return entries
    when = parse_time(at)
    return [e for e in entries if e.time <= when]


def verify_ledger(tracking: TrackingConfig, root: Path, model: str) -> ChainVerdict:
    """Walk ``model``'s ledger hash chain as stored in the registry (pending entries included)."""
    client = _client(tracking, root)
    return verify_chain(_registered(client, registered_model_name(tracking, model)).tags)


def aliases(tracking: TrackingConfig, root: Path, model: str, at: str | datetime | None = None) -> dict[str, str]:
    """Lifecycle aliases → version: live from the registry, or with ``at`` as the ledger says they were then."""
    client = _client(tracking, root)
    registered = _registered(client, registered_model_name(tracking, model))
    if at is None:
        return _lifecycle_aliases(registered)
    return aliases_at(read_entries(registered.tags), at)


def versions(tracking: TrackingConfig, root: Path, model: str) -> list[dict[str, Any]]:
    """Every registered version of ``model`` with its aliases, run id, status and creation time (newest first)."""
    client = _client(tracking, root)
    name = registered_model_name(tracking, model)
    current = _lifecycle_aliases(_registered(client, name))
    out = []
    for mv in client.search_model_versions(f"name = '{name}'"):
        out.append({
            "version": str(mv.version), "aliases": sorted(a for a, v in current.items() if v == str(mv.version)),
            "run_id": mv.run_id, "status": mv.status, "source": mv.source,
            "created": datetime.fromtimestamp(mv.creation_timestamp / 1000, UTC).isoformat(),
        })
    return sorted(out, key=lambda r: -int(r["version"]))
