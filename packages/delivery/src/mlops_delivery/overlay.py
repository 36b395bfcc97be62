"""The one way an overlay changes in git: promote, revert, shadow, the drift rollback and the release's image pins
(``mlops gitops set-images``) all write through here.

A change is an *edit function*: given a checkout's root, it reads the overlay files there and plans the change
(the files' new text, the message, the diff), or raises :class:`PromotionRefusedError` when the overlay is no
longer in a state it applies to. :func:`write_overlay` runs it at the checkout's HEAD, writes the files
atomically (Argo CD may sync them at any moment) and, with ``commit``, records them as one commit:

- ``delivery.commit_mode == "commit"``: on the checked-out branch. ``push`` is a plain (non-force) push, git's
  compare-and-swap on the branch (:func:`mlops_delivery.git.push_compare_and_swap`): the remote takes it only
  as a fast-forward of the HEAD the edit read. A rejected push means another writer moved the branch: the
  commit is dropped, the checkout fast-forwarded to the remote's tip, and the edit run again there (so it
  refuses, or finds its change already made, instead of overwriting what it did not read), up to
  :data:`MAX_ATTEMPTS` times; then :class:`~mlops_delivery.errors.PushRejectedError` names the race.
- ``"pull_request"``: on a branch of its own (the change's ``branch_name``) made at HEAD; the checked-out branch
  is left as it was. ``push`` pushes that branch without force and opens a pull request; a branch already at
  the remote that holds the very same files (a re-run) is reported, not pushed or opened again.

Checkouts come two ways: the caller's working copy (:func:`local_checkout`: ``mlops gitops promote|rollback|
shadow`` in CI, pushing to ``delivery.git_remote``) or a fresh shallow clone of ``delivery.gitops_repo`` at
``delivery.git_branch`` (:func:`cloned_checkout`: the monitor's rollback, which runs where no working copy is).
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from mlops_config import DeliveryConfig
from mlops_core import atomic_write_text
from mlops_delivery.errors import GitError, PromotionRefusedError, PushRejectedError
from mlops_delivery.git import commit_files, current_branch, push_compare_and_swap, run_git, switch_branch
from mlops_delivery.pull_request import open_pull_request, pull_request_endpoint

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
HISTORY_DEPTH = 50
"""Commits a clone fetches: enough to find the commit that already made a change on a re-run."""


class OverlayChange(Protocol):
    """What an edit function plans: the files' new text (absolute paths under the checkout) and how to record it."""

    @property
    def changed(self) -> bool: ...

    @property
    def texts(self) -> dict[Path, str]: ...

    @property
    def message(self) -> str: ...

    @property
    def diff(self) -> str: ...

    @property
    def branch_name(self) -> str: ...


C = TypeVar("C", bound=OverlayChange)


@dataclass(frozen=True)
class Checkout:
    """A git working tree to edit, and where its branch is pushed (``env``: git's environment, e.g. a token)."""

    root: Path
    remote: str
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class OverlayWrite:
    """How a change landed: its commit (``None``: not committed, or already in place), where and whether pushed."""

    commit: str | None = None
    pushed: bool = False
    """``True``: this call moved the remote branch (``False`` also when the remote already held the commit)."""
    branch: str | None = None
    """Branch holding the commit in pull-request mode (``None``: the checked-out branch)."""
    pull_request: str | None = None
    attempts: int = 1

    def fields(self) -> dict[str, Any]:
        """The fields a change record carries (``commit``, ``pushed``, ``branch``, ``pull_request``)."""
        return {"commit": self.commit, "pushed": self.pushed, "branch": self.branch, "pull_request": self.pull_request}


def local_checkout(delivery: DeliveryConfig, root: Path) -> Checkout:
    """The caller's working copy at ``root``, pushing to ``delivery.git_remote``."""
    return Checkout(root, delivery.git_remote)


@contextmanager
def cloned_checkout(delivery: DeliveryConfig, repo: str) -> Iterator[Checkout]:
    """A shallow clone of ``repo`` at ``delivery.git_branch`` in a temporary folder, removed afterwards."""
    env = git_env(repo, delivery.github_token_var)
    with tempfile.TemporaryDirectory(prefix="mlops-overlay-") as tmp:
        clone = Path(tmp) / "repo"
        proc = run_git(None, "clone", "--quiet", "--depth", str(HISTORY_DEPTH), "--single-branch", "--branch",
                       delivery.git_branch, repo, str(clone), env=env)
        if proc.returncode != 0:
            detail = proc.stderr.strip().splitlines()
            raise GitError(f"cannot clone the GitOps repository {repo!r} (branch {delivery.git_branch!r}): "
                           f"{detail[-1] if detail else proc.returncode}; check delivery.gitops_repo / git_branch")
        yield Checkout(clone, "origin", env)


def git_env(repo: str, token_var: str) -> dict[str, str]:
    """The environment for git: an https remote gets the token as a header, never on a command line."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    token = os.environ.get(token_var)
    if repo.startswith("https://") and token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"})
    return env


def write_overlay(delivery: DeliveryConfig, checkout: Checkout, edit: Callable[[Path], C], *, commit: bool = False,
                  push: bool = False, planned: C | None = None) -> tuple[C, OverlayWrite]:
    """Plan ``edit`` at the checkout's HEAD, write its files and, when asked, commit and push them per
    ``delivery.commit_mode``.

    Args:
        delivery: ``commit_mode``, ``git_author``, ``github_token_var`` (pull requests).
        checkout: Where to edit and push (:func:`local_checkout`, :func:`cloned_checkout`).
        edit: Plans the change from the files under a root; raises when the overlay no longer admits it.
        commit: Record the files as one commit (else only write them).
        push: Push the commit (compare-and-swap) or, in pull-request mode, its branch, and open the pull request.
        planned: ``edit(checkout.root)`` when the caller already ran it at this HEAD (it is not run again
            unless the remote moved).

    Returns:
        The change as last planned, and how it landed (``commit`` is ``None`` when nothing needed writing).

    Raises:
        PromotionRefusedError: the edit refused (also after the remote moved under it).
        PushRejectedError: the push kept losing the race (:data:`MAX_ATTEMPTS` times), the local branch has
            commits the moved remote lacks, or a pull request's branch exists with other content.
        GitError: git failed.
    """
    if commit and push and delivery.commit_mode == "pull_request":
        pull_request_endpoint(delivery.github_token_var)  # a missing token fails before any git change
    change = planned if planned is not None else edit(checkout.root)
    if not change.changed:
        logger.info("%s: already in place, nothing written", change.message)
        return change, OverlayWrite()
    if not commit:
        _write(change)
        return change, OverlayWrite()
    branch = current_branch(checkout.root)
    if delivery.commit_mode == "pull_request":
        return change, _commit_on_branch(delivery, checkout, change, branch, push)
    start, attempt = _run(checkout, "rev-parse", "HEAD"), 1
    while True:
        _write(change)
        sha = commit_files(checkout.root, list(change.texts), change.message, delivery.git_author)
        if not push:
            return change, OverlayWrite(commit=sha, attempts=attempt)
        try:
            outcome = push_compare_and_swap(checkout.root, checkout.remote, branch, env=checkout.env)
        except PushRejectedError as lost:
            if attempt == MAX_ATTEMPTS:  # the commit stays on the local branch, named in the error
                raise lost.with_hint(f"rejected {MAX_ATTEMPTS} times in a row: the branch keeps moving; retry "
                                     f"{change.message.splitlines()[0]!r}") from None
            start = _catch_up(checkout, start, branch, lost)
            change = edit(checkout.root)
            attempt += 1
            if not change.changed:  # another writer made this very change
                logger.info("%s: made by another writer meanwhile", change.message)
                return change, OverlayWrite(attempts=attempt)
            continue
        # up_to_date: a concurrent writer pushed this very commit first
        return change, OverlayWrite(commit=sha, pushed=outcome == "pushed", attempts=attempt)


def write_local(delivery: DeliveryConfig, root: Path, edit: Callable[[Path], C], planned: C, *, commit: bool = False,
                push: bool = False) -> C:
    """:func:`write_overlay` on the working copy at ``root``; the change record (a dataclass) comes back with the
    ``commit``, ``pushed``, ``branch`` and ``pull_request`` of its write."""
    change, written = write_overlay(delivery, local_checkout(delivery, root), edit, commit=commit, push=push,
                                    planned=planned)
    return cast(C, replace(cast(Any, change), **written.fields())) if written.commit else change


def write_planned(delivery: DeliveryConfig, root: Path, change: C, *, commit: bool = False, push: bool = False) -> C:
    """:func:`write_local` for a change planned by the caller, which cannot be planned again here: a push the
    remote rejects because the branch moved is refused (re-plan on the new HEAD)."""

    def stale(_: Path) -> C:
        raise PromotionRefusedError(f"{change.message.splitlines()[0]}: the remote branch moved since this change "
                                    "was planned; plan it again on the new HEAD")

    return write_local(delivery, root, stale, change, commit=commit, push=push)


def _write(change: OverlayChange) -> None:
    for path, text in change.texts.items():
        atomic_write_text(path, text)


def _run(checkout: Checkout, *args: str) -> str:
    proc = run_git(checkout.root, *args, env=checkout.env)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"`git {' '.join(args)}` failed in {str(checkout.root)!r}: "
                       f"{detail[-1] if detail else proc.returncode}")
    return proc.stdout.strip()


def _catch_up(checkout: Checkout, start: str, branch: str, lost: PushRejectedError) -> str:
    """Drop our rejected commit and fast-forward to the remote's tip; return the new HEAD.

    ``reset --keep`` keeps unrelated uncommitted edits of a working copy; a branch with commits of its own that
    the remote lacks cannot fast-forward and is refused (``lost``, with what to do) rather than reset.
    """
    _run(checkout, "reset", "--quiet", "--keep", start)
    _run(checkout, "fetch", "--quiet", checkout.remote, branch)
    proc = run_git(checkout.root, "merge", "--quiet", "--ff-only", "FETCH_HEAD", env=checkout.env)
    if proc.returncode != 0:
        raise lost.with_hint(f"{branch!r} in {str(checkout.root)!r} has commits that {checkout.remote}/{branch} "
                             "lacks and the remote moved on: pull (or rebase) first, then run the change again")
    return _run(checkout, "rev-parse", "HEAD")


def _commit_on_branch(delivery: DeliveryConfig, checkout: Checkout, change: OverlayChange, base: str,
                      push: bool) -> OverlayWrite:
    """Pull-request mode: commit on ``change.branch_name`` made at HEAD, push it, open the pull request."""
    root, branch = checkout.root, change.branch_name
    switch_branch(root, branch, create=True)
    try:
        _write(change)
        sha = commit_files(root, list(change.texts), change.message, delivery.git_author)
    finally:
        switch_branch(root, base)
    if not push:
        return OverlayWrite(commit=sha, branch=branch)
    try:
        outcome = push_compare_and_swap(root, checkout.remote, branch, source=f"refs/heads/{branch}", env=checkout.env)
    except PushRejectedError as lost:
        existing = _same_change_at_remote(checkout, change, branch)
        if existing is None:
            raise lost.with_hint(f"branch {branch!r} exists at {checkout.remote!r} with other content; merge or "
                                 "delete its pull request, then run the change again") from None
        logger.info("%s: branch %s already holds it at %s", change.message, branch, existing[:12])
        return OverlayWrite(commit=existing, branch=branch)
    if outcome == "up_to_date":  # a concurrent writer pushed this very commit and opened its pull request
        return OverlayWrite(commit=sha, branch=branch)
    title, _, rest = change.message.partition("\n")
    link = open_pull_request(head=branch, base=base, title=title, body=f"{rest.strip()}\n\n```diff\n{change.diff}```"
                             if rest.strip() else f"```diff\n{change.diff}```", token_env=delivery.github_token_var)
    return OverlayWrite(commit=sha, pushed=True, branch=branch, pull_request=link)


def _same_change_at_remote(checkout: Checkout, change: OverlayChange, branch: str) -> str | None:
    """The tip of the remote's ``branch`` when its files read exactly as ``change`` would write them."""
    _run(checkout, "fetch", "--quiet", checkout.remote, branch)
    for path, text in change.texts.items():
        shown = run_git(checkout.root, "show", f"FETCH_HEAD:{path.relative_to(checkout.root).as_posix()}")
        if shown.returncode != 0 or shown.stdout != text:
            return None
    return _run(checkout, "rev-parse", "FETCH_HEAD")
