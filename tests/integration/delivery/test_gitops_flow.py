"""GitOps promotion end to end on a real MLflow registry (SQLite) with the real promotion ledger, a real git
repository and the real `mlops` command: gates are read from the ledger, every move is one commit of one
file, and a rollback commit restores the manifest byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlops_config import TrackingConfig, load_config
from mlops_delivery import PromotionRefusedError, promote_version

pytestmark = pytest.mark.integration

MLOPS = [sys.executable, "-m", "mlops_cli"]
PROD = "infra/overlays/production/model-fraud.yaml"
STAGING = "infra/overlays/staging/model-fraud.yaml"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def mlops(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real `mlops` in a process of its own (exit code and stderr as a user sees them)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLOPS", "GITHUB_"))}
    return subprocess.run([*MLOPS, *args], cwd=root, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The same `mlops` app run in this process (one import of MLflow for the whole test)."""
    from typer.testing import CliRunner

    from mlops_cli.app import app

    for key in [k for k in os.environ if k.startswith(("MLOPS", "GITHUB_"))]:
        monkeypatch.delenv(key)
    runner = CliRunner()

    def run(root: Path, *args: str, env: dict[str, str] | None = None) -> Any:
        monkeypatch.chdir(root)
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    return run


def gate_report(version: str, passed: bool) -> dict[str, Any]:
    """A gate report in the shape the lifecycle checks (model, candidate version, named gates)."""
    gates = [{"name": n, "passed": passed or n != "quality", "reason": "hand-made"}
             for n in ("quality", "reproducibility", "latency", "contract")]
    return {"model": "fraud", "candidate": {"version": version}, "gates": gates}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, repo_root: Path, register_exported: Any) -> Path:
    """A git repo holding infra/ and configs/, with a SQLite registry (under .mlops/) where fraud v1 passed its
    gates and moved to staging, and v2 is a candidate whose gates failed. Built once; each test gets a copy."""
    from mlops_core import lifecycle

    root = tmp_path_factory.mktemp("seeded") / "repo"
    shutil.copytree(repo_root / "infra", root / "infra")
    shutil.copytree(repo_root / "configs", root / "configs")
    bucket = (root.parent / "bucket").as_uri()
    base = root / "configs" / "base.yaml"
    base.write_text(base.read_text().replace(
        "delivery:\n", f"delivery:\n  storage_uri_template: {bucket}/models/{{model}}/v{{version}}/\n", 1))
    for manifest in (PROD, STAGING):  # the manifests name what the template names
        (root / manifest).write_text((root / manifest).read_text().replace("s3://mlops-artifacts/models",
                                                                           f"{bucket}/models"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    tracking = TrackingConfig()
    for seed in (1, 2):
        register_exported(root, "fraud", seed)
    lifecycle.promote(tracking, root, "fraud", "1", "candidate", reason="trained", actor="test")
    lifecycle.promote(tracking, root, "fraud", "1", "staging", reason="gates passed", actor="test",
                      gate_report=gate_report("1", True))
    lifecycle.promote(tracking, root, "fraud", "2", "candidate", reason="trained", actor="test")
    with pytest.raises(lifecycle.GateNotPassedError):
        lifecycle.promote(tracking, root, "fraud", "2", "staging", reason="try", actor="test",
                          gate_report=gate_report("2", False))
    return root


@pytest.fixture
def repo(seeded: Path, tmp_path: Path) -> tuple[Path, TrackingConfig]:
    root = tmp_path / "repo"
    shutil.copytree(seeded, root)
    return root, TrackingConfig()


def test_gates_come_from_the_ledger_and_promotion_is_idempotent(repo: tuple[Path, TrackingConfig]) -> None:
    root, tracking = repo
    cfg = load_config(config_dir=root / "configs", environ={}).config.delivery  # the bucket the manifests name
    before = (root / STAGING).read_text()
    with pytest.raises(PromotionRefusedError, match="fraud v2 has not passed its gates"):
        promote_version(cfg, tracking, root, "fraud", 2, "staging", commit=True)
    assert (root / STAGING).read_text() == before
    head = git(root, "rev-parse", "HEAD")
    # v1's staging manifest already names v1 (the repo's initial state); v3 does not exist in the ledger.
    with pytest.raises(PromotionRefusedError, match="fraud v3 has not passed its gates"):
        promote_version(cfg, tracking, root, "fraud", 3, "canary")
    first = promote_version(cfg, tracking, root, "fraud", None, "staging", commit=True)
    assert first.evidence["gates"]["ledger_seq"] >= 1
    assert not first.changed and git(root, "rev-parse", "HEAD") == head  # staging already pins v1


def test_cli_walks_canary_steps_as_commits_and_rollback_reverts_them(repo: tuple[Path, TrackingConfig],
                                                                    cli: Any) -> None:
    root, _ = repo
    # staging serves v1 (seed); production is moved back to v0 by hand so that v1 has something to replace.
    prod_before = (root / PROD).read_text()
    (root / PROD).write_text(prod_before.replace('stable-version: "1"', 'stable-version: "0"')
                             .replace("fraud/v1", "fraud/v0"))
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "production on v0")
    refused = mlops(root, "gitops", "promote", "--version", "1", "--to", "production")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: cannot promote fraud v1 to production: production runs no canary")
    seeded = (root / PROD).read_text()
    commits = []
    for pct in ("10", "50"):
        res = cli(root, "gitops", "promote", "--version", "1", "--to", "canary", "--percent", pct, "--commit",
                    "--json")
        assert res.exit_code == 0, res.output
        change = json.loads(res.stdout)
        assert change["changed"] and change["after"]["canary_percent"] == int(pct)
        assert change["evidence"]["gates"]["gate_report_sha256"]
        commits.append(change["commit"])
        assert git(root, "show", "--name-only", "--format=", change["commit"]) == PROD
    again = cli(root, "gitops", "promote", "--version", "1", "--to", "canary", "--percent", "50", "--commit")
    assert again.exit_code == 0 and "already in place, nothing changed" in again.stdout
    assert git(root, "rev-parse", "HEAD") == commits[-1]
    status = json.loads(cli(root, "gitops", "status", "--json").stdout)["environments"]["production"]
    assert (status["stable_version"], status["canary_version"], status["stable_percent"]) == (0, 1, 50)
    rollback = cli(root, "gitops", "rollback", "--env", "production", "--commit")
    assert rollback.exit_code == 0, rollback.output
    assert "-    canaryTrafficPercent: 50" in rollback.stdout
    assert (root / PROD).read_text() == seeded
    assert git(root, "log", "-1", "--format=%s") == "gitops: revert: roll back canary fraud v1 in production to v0"
    assert git(root, "diff", f"{commits[0]}~1", "HEAD", "--", PROD) == ""


def test_resolve_writes_the_step_output(repo: tuple[Path, TrackingConfig], tmp_path: Path, cli: Any) -> None:
    root, _ = repo
    out = tmp_path / "github_output"
    res = cli(root, "gitops", "resolve", "--alias", "staging", env={"GITHUB_OUTPUT": str(out)})
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "1" and out.read_text() == "version=1\n"
    newest = cli(root, "gitops", "resolve", env={"GITHUB_OUTPUT": str(out)})
    assert newest.stdout.strip() == "2" and out.read_text().splitlines()[-1] == "version=2"
    missing = mlops(root, "gitops", "resolve", "--alias", "champion")
    assert missing.returncode == 2
    assert missing.stderr == "error: no version of fraud holds the registry alias 'champion' (aliases: " \
        "{'candidate': '2', 'staging': '1'})\n"


def test_summary_appends_reports_and_fails_without_them(tmp_path: Path, repo_root: Path, cli: Any) -> None:
    root = tmp_path / "repo"
    shutil.copytree(repo_root / "configs", root / "configs")
    (root / "reports" / "evaluation").mkdir(parents=True)
    (root / "reports" / "evaluation" / "evaluation.md").write_text("# Gates\n\nall passed\n")
    summary = tmp_path / "summary.md"
    summary.write_text("previous\n")
    res = cli(root, "gitops", "summary", "reports/evaluation/*.md", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.exit_code == 0, res.output
    assert summary.read_text() == "previous\n# Gates\n\nall passed\n\n"
    res = cli(root, "gitops", "summary", "reports/none/*.md")
    assert res.exit_code == 2 and "error: no report matches 'reports/none/*.md'" in res.output


def test_cli_candidate_shadow_canary_each_a_commit(repo: tuple[Path, TrackingConfig], cli: Any) -> None:
    root, _ = repo
    shadow_file = "infra/overlays/production/shadow-fraud.yaml"
    (root / PROD).write_text((root / PROD).read_text().replace('stable-version: "1"', 'stable-version: "0"')
                             .replace("fraud/v1", "fraud/v0"))
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "production on v0")
    refused = mlops(root, "gitops", "shadow", "--version", "2")
    assert refused.returncode == 2 and "fraud v2 has not passed its gates" in refused.stderr
    started = cli(root, "gitops", "shadow", "--version", "1", "--fraction", "0.5", "--commit", "--json")
    assert started.exit_code == 0, started.output
    change = json.loads(started.stdout)
    assert change["after"] == {"env": "production", "version": 1, "fraction": 0.5,
                               "storage_uri": change["evidence"]["published"]["uri"]}
    assert change["evidence"]["gates"]["gate_report_sha256"]
    assert sorted(git(root, "show", "--name-only", "--format=", change["commit"]).split()) == [PROD, shadow_file]
    stopped = cli(root, "gitops", "shadow", "--stop", "--commit", "--json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout)["after"]["version"] is None
    canary = cli(root, "gitops", "promote", "--version", "1", "--to", "canary", "--percent", "10", "--commit", "--json")
    assert canary.exit_code == 0, canary.output
    subjects = git(root, "log", "-3", "--format=%s").splitlines()
    assert subjects == ["gitops: canary fraud v1 at 10% in production",
                        "gitops: stop the shadow of fraud v1 in production",
                        "gitops: shadow fraud v1 with 0.5 of live requests in production"]
    again = mlops(root, "gitops", "shadow", "--version", "1")
    assert again.returncode == 2 and "the shadow comes before the canary" in again.stderr


def test_a_committed_promotion_is_a_deploy_entry_that_registry_verify_walks(repo: tuple[Path, TrackingConfig]) -> None:
    from mlops_core import history, record_deploy, verify_ledger
    from mlops_pipeline import verify_version

    root, tracking = repo
    loaded = load_config(config_dir=root / "configs", environ={}, overrides=[f"delivery.gitops_repo={root}"])
    cfg = loaded.config
    (root / PROD).write_text((root / PROD).read_text().replace('stable-version: "1"', 'stable-version: "0"')
                             .replace("fraud/v1", "fraud/v0"))
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "production on v0")
    before = len(history(tracking, root, "fraud"))
    change = promote_version(cfg.delivery, tracking, root, "fraud", 1, "canary", percent=10, commit=True,
                             actor="release-bot")
    head = git(root, "rev-parse", "HEAD")
    assert change.commit == head
    entries = history(tracking, root, "fraud")
    deploy = entries[-1]
    assert len(entries) == before + 1 and change.evidence["ledger_seq"] == deploy.seq
    assert (deploy.action, deploy.version, deploy.to_alias, deploy.overlay_commit, deploy.actor) == (
        "deploy", "1", "canary", head, "release-bot")
    assert deploy.aliases_before == deploy.aliases_after == entries[-2].aliases_after  # no alias moved
    assert deploy.extra["path"] == PROD and deploy.extra["env"] == "production"
    assert verify_ledger(tracking, root, "fraud").ok
    again = promote_version(cfg.delivery, tracking, root, "fraud", 1, "canary", percent=10, commit=True)
    assert not again.changed and len(history(tracking, root, "fraud")) == before + 1  # nothing deployed

    # A deploy entry naming a commit whose manifest serves another version is broken, naming both.
    (root / PROD).write_text((root / PROD).read_text().replace('canary-version: "1"', 'canary-version: "2"'))
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "canary v2 by hand")
    forged = git(root, "rev-parse", "HEAD")
    record_deploy(tracking, root, "fraud", 1, stage="canary", overlay_commit=forged, actor="someone",
                  reason="claims v1", extra={"env": "production", "path": PROD})
    links = [link for link in verify_version(cfg, root, 1).links if link.name == "overlay commit"]
    assert [link.status for link in links] == ["verified", "broken"], links
    assert head[:12] in links[0].detail and "serves v1 (canary at 10%)" in links[0].detail
    assert forged[:12] in links[1].detail and "canary v2" in links[1].detail and "not v1" in links[1].detail
