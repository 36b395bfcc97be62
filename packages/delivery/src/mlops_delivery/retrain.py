"""Retraining as a pull request: a trigger bumps a model's data-version pin on its own branch and says why.

A CRITICAL drift, a realized or estimated performance drop beyond the policy, or a newly accepted data version
(the caller decides which; this module records it) calls :func:`request_retrain`. It works in a scratch clone
of ``delivery.retrain.repo``: the branch ``retrain/<model>`` is rebuilt from the base branch as one commit that
writes the pin (``configs/models/<model>.data_version``: the md5 ingestion publishes as ``pointers/<md5>.dvc``)
and is pushed; the backend (:mod:`mlops_delivery.retrain_pr`) opens the pull request, or updates the open one,
with the evidence as its body. ``train.yml`` watches the pin, so merging trains exactly that version.

- One pull request per model: the branch name is fixed, a second trigger rebuilds it (force-with-lease on what
  it saw) and updates the same pull request.
- Rate limit: a trigger within ``min_interval_hours`` of the branch's last commit (its commit date is the
  trigger's time) pushes nothing and is reported ``rate-limited``.
- A pin already on the base names the data the model trained on: nothing is pushed (``up_to_date``).
- Never merged here unless ``auto_merge``; :func:`merge_retrain` is the bare remote's merge button.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mlops_config import DATA_VERSION, DataConfig, DeliveryConfig, data_pin_path, parse_data_pin
from mlops_delivery.errors import DeliveryError, GitError, PushRejectedError
from mlops_delivery.git import push_compare_and_swap, run_git
from mlops_delivery.overlay import git_env
from mlops_delivery.retrain_pr import GitHubPulls, GitRecordPulls, PullRequests

logger = logging.getLogger(__name__)

REASONS = ("drift", "performance", "data")
_TITLES = {"drift": "CRITICAL drift", "performance": "performance drop beyond the policy",
           "data": "new accepted data version"}
_BODY_EVIDENCE_CHARS = 20_000  # GitHub caps a body at 65536 characters; the figures come first


@dataclass(frozen=True)
class RetrainTrigger:
    """Why a model should retrain: the kind, the caller's evidence, and optionally the data version."""

    model: str
    reason: str
    evidence: Mapping[str, Any]
    data_version: str | None = None
    """The accepted data version (md5) to pin; ``None`` or ``latest``: the newest published one."""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise DeliveryError(f"retrain reason {self.reason!r} is not known; expected one of {list(REASONS)}")
        if not isinstance(self.evidence, Mapping):
            raise DeliveryError(f"retrain evidence is a {type(self.evidence).__name__}; expected a JSON object "
                                "(figures, links, summary)")


@dataclass
class RetrainOutcome:
    """What one trigger did: ``opened``, ``updated``, ``rate-limited`` or ``up_to_date``."""

    model: str
    reason: str
    status: str
    data_version: str
    branch: str
    requested_at: str
    pushed: bool
    url: str | None = None
    head_sha: str | None = None
    merged_sha: str | None = None
    detail: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def load_evidence(path: Path) -> dict[str, Any]:
    """The evidence JSON object of ``path`` (an error names the file and what was expected)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeliveryError(f"evidence file {str(path)!r} does not exist; expected a JSON object with the trigger's "
                            "figures (e.g. `mlops monitor run --json` output)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DeliveryError(f"evidence file {str(path)!r} is not readable JSON ({exc}); expected a JSON object"
                            ) from None
    if not isinstance(doc, dict):
        raise DeliveryError(f"evidence file {str(path)!r} holds a JSON {type(doc).__name__}; expected an object")
    return doc


def resolve_data_version(data: DataConfig, root: Path, requested: str | None) -> str:
    """The accepted data version to pin: ``requested`` (checked against the published pointers when there is a
    DVC remote), or the newest published one (``pointers/latest.dvc`` of ``data.dvc_remote``)."""
    from mlops_features import accepted_md5, read_pointer

    if requested not in (None, "latest"):
        assert requested is not None
        if not DATA_VERSION.match(requested):
            raise DeliveryError(f"data version {requested!r} is not an accepted data version; expected DVC's md5 "
                                "(32 hex digits, optionally '.dir') as `mlops data ingest` reports it, or 'latest'")
        if data.dvc_remote and read_pointer(data, root, requested) is None:
            raise DeliveryError(f"data version {requested!r} is not published under {data.dvc_remote!r}/pointers/; "
                                "expected one `mlops data ingest` pushed")
        return requested
    if not data.dvc_remote:
        raise DeliveryError("no --data-version given and data.dvc_remote is not set, so there is no published "
                            "latest version to pin; pass --data-version MD5 or set data.dvc_remote")
    text = read_pointer(data, root, "latest")
    if text is None:
        raise DeliveryError(f"nothing is published under {data.dvc_remote!r}/pointers/latest.dvc; run `mlops data "
                            "ingest` first")
    with tempfile.TemporaryDirectory() as tmp:
        pointer = Path(tmp) / "latest.dvc"
        pointer.write_bytes(text)
        return accepted_md5(pointer)


def render_body(trigger: RetrainTrigger, version: str, previous: str | None, requested_at: str) -> str:
    """The pull request's markdown: the trigger, the pin change, the figures and links, the evidence."""
    ev = dict(trigger.evidence)
    lines = [f"## Retrain `{trigger.model}`: {_TITLES[trigger.reason]}", "",
             f"- **Trigger:** `{trigger.reason}` at {requested_at}",
             f"- **Data version:** `{previous or '(none pinned)'}` → `{version}`", ""]
    if isinstance(ev.get("summary"), str):
        lines += [ev["summary"], ""]
    figures = {k: v for k, v in ev.items() if _scalar(v) and k != "summary"}
    if isinstance(ev.get("figures"), Mapping):
        figures.update({k: v for k, v in ev["figures"].items() if _scalar(v)})
    if figures:
        lines += ["| figure | value |", "| --- | --- |", *(f"| {k} | {_cell(v)} |" for k, v in figures.items()), ""]
    links = ev.get("links")
    if isinstance(links, Mapping) and links:
        lines += ["**Links**", "", *(f"- [{k}]({v})" for k, v in links.items()), ""]
    dump = json.dumps(ev, indent=2, sort_keys=True, default=str)
    if len(dump) > _BODY_EVIDENCE_CHARS:
        dump = dump[:_BODY_EVIDENCE_CHARS] + "\n… (truncated)"
    lines += ["<details><summary>Evidence (JSON)</summary>", "", "```json", dump, "```", "", "</details>", "",
              "Merging this pull request trains on exactly the pinned version (`train.yml` watches the pin). "
              "The platform does not merge it unless `delivery.retrain.auto_merge` is set."]
    return "\n".join(lines)


def _scalar(v: Any) -> bool:
    return isinstance(v, str | int | float | bool) or v is None


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = run_git(root, *args, env=env)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"`git {' '.join(args)}` failed in {str(root)!r}: {detail[-1] if detail else proc.returncode}")
    return proc.stdout.strip()


def _repo(delivery: DeliveryConfig, root: Path) -> str:
    repo = delivery.retrain.repo or delivery.gitops_repo
    if not repo:
        raise DeliveryError("neither delivery.retrain.repo nor delivery.gitops_repo is set: there is no repository "
                            "to open the retraining pull request on; set delivery.retrain.repo (a git URL or path)")
    return repo if "://" in repo or repo.startswith("git@") or Path(repo).is_absolute() else str(root / repo)


def _clone(repo: str, dest: Path, base: str, env: dict[str, str] | None = None) -> Path:
    proc = run_git(None, "clone", "--quiet", "--origin", "origin", "--branch", base, repo, str(dest), env=env)
    if proc.returncode != 0:
        raise GitError(f"cannot clone {repo!r} (branch {base!r}) to open the retraining pull request: "
                       f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return dest


def _remote_branch(clone: Path, branch: str, env: dict[str, str] | None = None) -> str | None:
    listed = _git(clone, "ls-remote", "origin", f"refs/heads/{branch}", env=env)
    if not listed:
        return None
    _git(clone, "fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}", env=env)
    return listed.split()[0]


def backend_for(delivery: DeliveryConfig, clone: Path, env: dict[str, str] | None,
                environ: Mapping[str, str] | None = None) -> PullRequests:
    """The configured pull-request host (``delivery.retrain.backend``)."""
    if delivery.retrain.backend == "github":
        return GitHubPulls(delivery.github_token_var, environ)
    return GitRecordPulls(clone, "origin", delivery.git_author, env)


def request_retrain(delivery: DeliveryConfig, data: DataConfig, root: Path, trigger: RetrainTrigger, *,
                    now: datetime | None = None, environ: Mapping[str, str] | None = None,
                    ledger: Path | None = None) -> RetrainOutcome:
    """Open or update ``trigger.model``'s retraining pull request, or say why nothing was pushed.

    Args:
        delivery: ``delivery`` (``retrain``, ``git_branch`` as the base, ``git_author``, ``github_token_var``).
        data: ``data`` (its DVC remote names the published versions).
        root: The repository root (a relative ``delivery.retrain.repo`` and the DVC workspace resolve here).
        trigger: The model, reason, evidence and optional data version.
        now: The trigger's time (default: now); it is the commit date the rate limit reads back.
        environ: Environment for the GitHub backend (default: the process's).
        ledger: A JSON-lines file every outcome is appended to, rate-limited ones included.

    Raises:
        DeliveryError: bad input, no repository, an unpublished version; PushRejectedError: another trigger
            moved the branch since it was read (nothing was published); GitError: git or GitHub failed.
    """
    retrain = delivery.retrain
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    stamp = _iso(moment)
    version = resolve_data_version(data, root, trigger.data_version)
    branch, base = retrain.branch.format(model=trigger.model), delivery.git_branch
    rel_pin = retrain.pin_path.format(model=trigger.model)
    outcome = RetrainOutcome(model=trigger.model, reason=trigger.reason, status="", data_version=version,
                             branch=branch, requested_at=stamp, pushed=False, evidence=dict(trigger.evidence))
    repo = _repo(delivery, root)
    # an https remote gets the token as a header (as the rollback's pushes do), never on a command line
    env = {**git_env(repo, delivery.github_token_var), "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    with tempfile.TemporaryDirectory(prefix="mlops-retrain-") as tmp:
        clone = _clone(repo, Path(tmp) / "repo", base, env)
        backend = backend_for(delivery, clone, env, environ)  # a GitHub backend without a token fails here
        seen = _remote_branch(clone, branch, env)
        if seen is not None and trigger.reason == "data" and _pin_at(clone, seen, rel_pin) == version:
            # the data trigger runs every hour in the drift job: a branch that already pins the version is enough
            outcome.status, outcome.head_sha = "up_to_date", seen
            outcome.detail = f"{branch!r} already pins {version!r}: nothing to push"
            return _record(outcome, ledger)
        if seen is not None:
            last = datetime.fromtimestamp(int(_git(clone, "log", "-1", "--format=%ct", seen)), UTC)
            wait = last + timedelta(hours=retrain.min_interval_hours) - moment
            if wait > timedelta(0):
                outcome.status, outcome.head_sha = "rate-limited", seen
                outcome.detail = (f"the last trigger pushed {branch!r} at {_iso(last)}; "
                                  f"delivery.retrain.min_interval_hours={retrain.min_interval_hours:g} allows the "
                                  f"next after {_iso(last + timedelta(hours=retrain.min_interval_hours))}")
                return _record(outcome, ledger)
        pin = data_pin_path(retrain, clone, trigger.model)
        previous = parse_data_pin(pin.read_text(encoding="utf-8"), rel_pin) if pin.is_file() else None
        if previous == version:
            outcome.status = "up_to_date"
            outcome.detail = f"{rel_pin!r} on {base!r} already pins {version!r}: the model trained on it"
            return _record(outcome, ledger)
        _git(clone, "checkout", "--quiet", "-B", branch, f"origin/{base}")
        pin.parent.mkdir(parents=True, exist_ok=True)
        pin.write_text(version + "\n", encoding="utf-8")
        title = f"retrain {trigger.model}: {_TITLES[trigger.reason]} → data {version[:12]}"
        name, _, email = delivery.git_author.partition("<")
        _git(clone, "add", "--", rel_pin)
        _git(clone, "-c", f"user.name={name.strip()}", "-c", f"user.email={email.rstrip('>').strip()}", "commit",
             "--quiet", "-m", title, "-m", f"Trigger: {trigger.reason} at {stamp}", "--", rel_pin, env=env)
        head = _git(clone, "rev-parse", "HEAD")
        try:  # the branch is rebuilt from the base: rewritten only if still where this trigger saw it
            push_compare_and_swap(clone, "origin", branch, lease=seen or "", env=env)
        except PushRejectedError as lost:
            raise lost.with_hint("another trigger rebuilt the retraining branch meanwhile; run again") from None
        outcome.pushed, outcome.head_sha = True, head
        body = render_body(trigger, version, previous, stamp)
        ref = backend.publish(model=trigger.model, branch=branch, base=base, title=title, body=body,
                              record={"reason": trigger.reason, "data_version": version, "previous": previous,
                                      "head_sha": head, "requested_at": stamp, "evidence": dict(trigger.evidence)})
        outcome.status, outcome.url = ref.action, ref.url
        if retrain.auto_merge:
            outcome.merged_sha = backend.merge(model=trigger.model, branch=branch, base=base)
    logger.info("retrain %s: %s %s (%s)", trigger.model, outcome.status, branch, version)
    return _record(outcome, ledger)


def _pin_at(clone: Path, commit: str, rel_pin: str) -> str | None:
    """The data version the pin holds at ``commit`` (``None``: no pin there)."""
    shown = run_git(clone, "show", f"{commit}:{rel_pin}")
    return parse_data_pin(shown.stdout, f"{rel_pin} at {commit[:12]}") if shown.returncode == 0 else None


def merge_retrain(delivery: DeliveryConfig, root: Path, model: str) -> str:
    """Merge ``model``'s open retraining pull request on a bare remote (fast-forward the base to its branch).

    Raises:
        DeliveryError: the backend is GitHub (merge there); GitError: nothing open, or the base moved on.
    """
    if delivery.retrain.backend != "git":
        raise DeliveryError(f"delivery.retrain.backend is {delivery.retrain.backend!r}: merge the pull request "
                            "there; `mlops retrain merge` is the bare git remote's (backend 'git')")
    repo = _repo(delivery, root)
    env = git_env(repo, delivery.github_token_var)
    with tempfile.TemporaryDirectory(prefix="mlops-retrain-") as tmp:
        clone = _clone(repo, Path(tmp) / "repo", delivery.git_branch, env)
        backend = GitRecordPulls(clone, "origin", delivery.git_author, env)
        return backend.merge(model=model, branch=delivery.retrain.branch.format(model=model),
                             base=delivery.git_branch)


def _record(outcome: RetrainOutcome, ledger: Path | None) -> RetrainOutcome:
    if ledger is not None:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        with ledger.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(outcome.to_dict(), sort_keys=True, default=str) + "\n")
    if outcome.status == "rate-limited":
        logger.warning("retrain %s rate-limited: %s", outcome.model, outcome.detail)
    return outcome
