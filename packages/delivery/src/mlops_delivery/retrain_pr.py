"""Where a retraining pull request lives: GitHub's REST API, or a bare git remote (the rehearsal's).

Both see a branch already pushed (``delivery.retrain.branch``, one per model) and only record the request on it:

- :class:`GitHubPulls`: the open pull request with that head (``GET /pulls?head=owner:branch&state=open``) gets
  the new title and body (``PATCH``); without one, one is opened (``POST``, :func:`open_pull_request`).
- :class:`GitRecordPulls`: a bare remote has no pull requests, so the record is a JSON document
  (``record.json``) in a commit on ``refs/retrain-prs/<model>``, each update a child of the last (``git log``
  of that ref is the request's history). It stays off ``refs/heads/``, so it never lands on a branch and no
  workflow sees it. ``merge`` fast-forwards the base branch to the pull request's branch.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlops_delivery.errors import GitError, PushRejectedError
from mlops_delivery.git import push_compare_and_swap, run_git
from mlops_delivery.pull_request import open_pull_request, pull_request_endpoint

logger = logging.getLogger(__name__)

RECORD_REF = "refs/retrain-prs/{model}"
RECORD_FILE = "record.json"


@dataclass(frozen=True)
class PullRequestRef:
    """One retraining pull request as its backend names it."""

    url: str
    """Its address: the GitHub page, or ``<remote>#refs/retrain-prs/<model>`` for a bare remote."""

    action: str
    """``opened`` or ``updated``."""

    number: int | None = None
    """GitHub's pull-request number (``None`` on a bare remote)."""


class PullRequests(Protocol):
    """What the retraining flow needs of a pull-request host."""

    def publish(self, *, model: str, branch: str, base: str, title: str, body: str,
                record: Mapping[str, Any]) -> PullRequestRef:
        """Open the pull request of ``branch`` → ``base``, or update the open one (title, body, record)."""
        ...

    def merge(self, *, model: str, branch: str, base: str) -> str:
        """Merge the open pull request of ``model``; returns the base branch's new commit."""
        ...


class GitHubPulls:
    """Pull requests of ``$GITHUB_REPOSITORY`` through the REST API (``$GITHUB_API_URL`` overrides the root)."""

    def __init__(self, token_env: str, environ: Mapping[str, str] | None = None) -> None:
        self.token_env = token_env
        self.environ = dict(os.environ if environ is None else environ)
        self.url, token = pull_request_endpoint(token_env, self.environ)  # raises before anything is pushed
        self.owner = self.environ["GITHUB_REPOSITORY"].split("/", 1)[0]
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = httpx.request(method, url, headers=self.headers, timeout=30, **kwargs)
        except httpx.HTTPError as exc:
            raise GitError(f"{method} {url!r} failed: {exc}") from exc
        if response.status_code >= 300:
            raise GitError(f"GitHub answered {method} {url!r} with HTTP {response.status_code} "
                           f"{response.text[:300]!r}")
        return response.json()

    def find_open(self, branch: str) -> dict[str, Any] | None:
        """The open pull request whose head is ``branch`` of this repository, if any."""
        found = self._request("GET", self.url, params={"head": f"{self.owner}:{branch}", "state": "open"})
        if not isinstance(found, list):
            raise GitError(f"GitHub answered GET {self.url!r} with {type(found).__name__}; expected a list")
        return found[0] if found else None

    def publish(self, *, model: str, branch: str, base: str, title: str, body: str,
                record: Mapping[str, Any]) -> PullRequestRef:
        existing = self.find_open(branch)
        if existing is None:
            link = open_pull_request(head=branch, base=base, title=title, body=body, token_env=self.token_env,
                                     environ=self.environ)
            return PullRequestRef(url=link, action="opened")
        number = int(existing["number"])
        updated = self._request("PATCH", f"{self.url}/{number}", json={"title": title, "body": body})
        logger.info("updated pull request #%d of %s", number, branch)
        return PullRequestRef(url=str(updated.get("html_url", existing.get("html_url", ""))), action="updated",
                              number=number)

    def merge(self, *, model: str, branch: str, base: str) -> str:
        existing = self.find_open(branch)
        if existing is None:
            raise GitError(f"no open pull request has head {branch!r}; nothing to merge for model {model!r}")
        merged = self._request("PUT", f"{self.url}/{int(existing['number'])}/merge", json={"merge_method": "merge"})
        return str(merged.get("sha", ""))


class GitRecordPulls:
    """Pull requests on a bare remote: the branch plus a record commit on ``refs/retrain-prs/<model>``.

    Args:
        clone: A clone of the remote (the flow's scratch clone) to build record commits in.
        remote: The remote's name in ``clone``.
        author: ``Name <email>`` of record commits.
        env: Environment of git commands (the flow fixes commit dates so the rate limit reads them back).
    """

    def __init__(self, clone: Path, remote: str, author: str, env: dict[str, str] | None = None) -> None:
        self.clone, self.remote, self.author, self.env = clone, remote, author, env

    def _git(self, *args: str, stdin: str | None = None) -> str:
        if stdin is None:
            proc = run_git(self.clone, *args, env=self.env)
        else:
            proc = subprocess.run(["git", "-C", str(self.clone), *args], input=stdin, capture_output=True,
                                  text=True, check=False, env=self.env)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise GitError(f"`git {' '.join(args)}` failed in {str(self.clone)!r}: "
                           f"{detail[-1] if detail else proc.returncode}")
        return proc.stdout.strip()

    def read(self, model: str) -> tuple[dict[str, Any] | None, str | None]:
        """The record of ``model``'s pull request on the remote and its commit (``None, None``: never opened)."""
        ref = RECORD_REF.format(model=model)
        listed = self._git("ls-remote", self.remote, ref)
        if not listed:
            return None, None
        self._git("fetch", "--quiet", self.remote, f"+{ref}:{ref}")
        sha = self._git("rev-parse", ref)
        return json.loads(self._git("show", f"{sha}:{RECORD_FILE}")), sha

    def _write(self, model: str, record: Mapping[str, Any], parent: str | None, message: str) -> str:
        name, _, email = self.author.partition("<")
        blob = self._git("hash-object", "-w", "--stdin", stdin=json.dumps(record, indent=2, sort_keys=True) + "\n")
        tree = self._git("mktree", stdin=f"100644 blob {blob}\t{RECORD_FILE}\n")
        commit = self._git("-c", f"user.name={name.strip()}", "-c", f"user.email={email.rstrip('>').strip()}",
                           "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)
        ref = RECORD_REF.format(model=model)
        try:
            push_compare_and_swap(self.clone, self.remote, ref, source=commit, lease=parent or "", env=self.env)
        except PushRejectedError as lost:
            raise lost.with_hint("another trigger wrote the retraining record meanwhile; run again") from None
        return commit

    def publish(self, *, model: str, branch: str, base: str, title: str, body: str,
                record: Mapping[str, Any]) -> PullRequestRef:
        previous, parent = self.read(model)
        doc = {**record, "model": model, "head": branch, "base": base, "title": title, "body": body, "state": "open",
               "opened_at": record.get("requested_at"), "updates": 0}
        is_open = previous is not None and previous.get("state") == "open"
        if previous is not None and is_open:  # the same pull request, updated; a merged one is followed by a new one
            doc.update(opened_at=previous.get("opened_at"), updates=int(previous.get("updates", 0)) + 1)
        self._write(model, doc, parent, title)
        url = f"{self._git('remote', 'get-url', self.remote)}#{RECORD_REF.format(model=model)}"
        return PullRequestRef(url=url, action="updated" if is_open else "opened")

    def merge(self, *, model: str, branch: str, base: str) -> str:
        record, parent = self.read(model)
        if record is None or record.get("state") != "open":
            state = None if record is None else record.get("state")
            raise GitError(f"model {model!r} has no open retraining pull request on {self.remote!r} (record state "
                           f"{state!r}); expected one opened by `mlops retrain request`")
        self._git("fetch", "--quiet", self.remote, f"+refs/heads/{branch}:refs/remotes/{self.remote}/{branch}",
                  f"+refs/heads/{base}:refs/remotes/{self.remote}/{base}")
        head = self._git("rev-parse", f"refs/remotes/{self.remote}/{branch}")
        if head != record.get("head_sha"):
            raise GitError(f"branch {branch!r} is at {head[:12]}, the record at {str(record.get('head_sha'))[:12]}: "
                           "something else moved it; trigger again to rebuild the pull request")
        ancestor = run_git(self.clone, "merge-base", "--is-ancestor", f"refs/remotes/{self.remote}/{base}", head)
        if ancestor.returncode != 0:
            raise GitError(f"{base!r} moved on since {branch!r} was built, so it cannot fast-forward; trigger again "
                           "to rebuild the pull request on the new base")
        self._git("checkout", "--quiet", "--detach", head)
        try:
            push_compare_and_swap(self.clone, self.remote, base, env=self.env)
        except PushRejectedError as lost:
            raise lost.with_hint(f"{base!r} moved on while merging {branch!r}; trigger again to rebuild the pull "
                                 "request") from None
        self._write(model, {**record, "state": "merged", "merged_sha": head}, parent, f"merge {branch} into {base}")
        logger.info("fast-forwarded %s to %s (%s)", base, branch, head[:12])
        return head
