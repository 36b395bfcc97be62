"""Pushing promotions: to a real bare git remote, directly (commit mode) or as a branch plus a pull request.

GitHub cannot be reached from here, so the pull-request call goes to a small local HTTP endpoint that records
what it is sent and answers like GitHub's "create a pull request" (201 + html_url); the git side is real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mlops_config import DeliveryConfig
from mlops_delivery import GitError, plan_promotion
from mlops_delivery.promotion import apply_change

pytestmark = pytest.mark.integration

STAGING = "infra/overlays/staging/model-fraud.yaml"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path, repo_root: Path) -> Path:
    """A working copy of infra/ whose `origin` is a real bare repository."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    root = tmp_path / "work"
    shutil.copytree(repo_root / "infra", root / "infra")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "-q", "origin", "main")
    return root


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append({"path": self.path, "auth": self.headers["Authorization"], "body": body})
            payload = json.dumps({"html_url": f"https://github.example/o/r/pull/{len(calls)}"}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    yield calls
    server.shutdown()
    thread.join(5)


def test_commit_mode_pushes_the_promotion_to_the_remote(clone: Path) -> None:
    cfg = DeliveryConfig()
    change = apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert change.pushed and change.branch is None
    assert git(clone, "rev-parse", "origin/main") == git(clone, "ls-remote", "origin", "refs/heads/main").split()[0]
    assert git(clone, "ls-remote", "origin", "refs/heads/main").split()[0] == change.commit


def test_pull_request_mode_pushes_a_branch_and_opens_a_pull_request(clone: Path,
                                                                   github: list[dict[str, Any]]) -> None:
    cfg = DeliveryConfig(commit_mode="pull_request")
    before = (clone / STAGING).read_text()
    change = apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert change.branch == "gitops/fraud-staging-v4"
    assert change.pull_request == "https://github.example/o/r/pull/1"
    # the working copy is back on main, untouched; the commit lives on the pushed branch only
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (clone / STAGING).read_text() == before
    assert git(clone, "ls-remote", "origin", "refs/heads/gitops/fraud-staging-v4").split()[0] == change.commit
    assert git(clone, "show", "--name-only", "--format=", change.commit) == STAGING
    (call,) = github
    assert call["path"] == "/repos/o/r/pulls" and call["auth"] == "Bearer t0ken"
    assert call["body"]["head"] == "gitops/fraud-staging-v4" and call["body"]["base"] == "main"
    assert call["body"]["title"] == "gitops: serve fraud v4 in staging"
    assert '+    mlops.platform/stable-version: "4"' in call["body"]["body"]


def test_pull_request_mode_names_a_missing_token(clone: Path, github: list[dict[str, Any]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    cfg = DeliveryConfig(commit_mode="pull_request")
    with pytest.raises(GitError, match=r"env var 'GITHUB_TOKEN' \(delivery.github_token_var\) is not set"):
        apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert github == []
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(clone, "branch", "--list", "gitops/*") == ""  # nothing was committed or pushed
    assert git(clone, "ls-remote", "origin", "refs/heads/gitops/*") == ""
