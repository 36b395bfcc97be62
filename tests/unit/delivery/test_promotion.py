"""Promotion as manifest edits on a copy of the real infra/ tree: stage order, idempotence, exact round trips."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mlops_config import DeliveryConfig
from mlops_delivery import ManifestError, PromotionRefusedError, gitops_status, plan_promotion, plan_revert
from mlops_delivery.manifest import ModelManifest
from mlops_delivery.promotion import apply_change

CFG = DeliveryConfig()


@pytest.fixture
def root(tmp_path: Path, repo_root: Path) -> Path:
    shutil.copytree(repo_root / "infra", tmp_path / "infra")
    return tmp_path


def text(root: Path, env: str) -> str:
    return (root / "infra" / "overlays" / env / "model-fraud.yaml").read_text()


def promote(root: Path, version: int, to: str, percent: int | None = None, cfg: DeliveryConfig = CFG) -> str:
    change = plan_promotion(cfg, root, "fraud", version, to, percent=percent)
    apply_change(change, cfg, root)
    return change.diff


def test_every_overlay_manifest_round_trips_byte_for_byte(repo_root: Path) -> None:
    for path in sorted((repo_root / "infra" / "overlays").glob("*/model-*.yaml")):
        manifest = ModelManifest(path, path.parent.name, path.stem.removeprefix("model-"))
        assert manifest.dump() == path.read_text(), path
        assert not manifest.changed()


def test_staging_edit_changes_exactly_the_version_lines_and_keeps_comments(root: Path) -> None:
    before = text(root, "staging")
    promote(root, 7, "staging")
    # Expected text built by hand from the original: version and URI swapped, previous version recorded.
    expected = before.replace(
        'mlops.platform/stable-version: "1"  # serves all traffic\n',
        'mlops.platform/stable-version: "7"  # serves all traffic\n    mlops.platform/previous-version: "1"\n',
    ).replace("models/fraud/v1/  # immutable", "models/fraud/v7/  # immutable")
    assert text(root, "staging") == expected
    assert text(root, "production") == (root / "infra/overlays/production/model-fraud.yaml").read_text()


def test_promotion_is_idempotent(root: Path) -> None:
    assert promote(root, 7, "staging")
    once = text(root, "staging")
    assert promote(root, 7, "staging") == ""
    assert text(root, "staging") == once
    promote(root, 7, "canary", 10)
    at10 = text(root, "production")
    assert promote(root, 7, "canary", 10) == ""
    assert text(root, "production") == at10


def test_full_walk_staging_canary_production_then_status(root: Path) -> None:
    promote(root, 3, "staging")
    promote(root, 3, "canary")  # no --percent: the first step
    status = gitops_status(CFG, root, "fraud")["production"]
    assert (status.stable_version, status.canary_version, status.canary_percent) == (1, 3, 10)
    assert status.stable_percent == 90
    assert status.storage_uri == "s3://mlops-artifacts/models/fraud/v3/"
    promote(root, 3, "canary", 50)
    promote(root, 3, "production")
    prod = gitops_status(CFG, root, "fraud")["production"]
    assert (prod.stable_version, prod.canary_version, prod.canary_percent, prod.previous_version) == (3, None, 0, 1)
    assert "canaryTrafficPercent:" not in text(root, "production")


def test_canary_at_100_percent_is_the_production_step(root: Path) -> None:
    promote(root, 3, "staging")
    promote(root, 3, "canary", 10)
    promote(root, 3, "canary", 50)
    promote(root, 3, "canary", 100)
    assert gitops_status(CFG, root, "fraud")["production"].stable_version == 3


@pytest.mark.parametrize(
    ("steps", "match"),
    [
        ([("canary", 10)], "promote it to staging first"),
        ([("production", None)], "must reach 50% first"),
        ([("staging", None), ("canary", 50)], "would skip a stage: the next canary step for fraud v4 is 10%"),
        ([("staging", None), ("canary", 10), ("canary", 100)], "would skip a stage: the next canary step"),
        ([("staging", None), ("canary", 10), ("production", None)], "must reach 50% first"),
        ([("staging", None), ("canary", 30)], "--percent 30 is not a canary step"),
        ([("staging", None), ("staging", 10)], "--percent applies to --to canary only"),
    ],
)
def test_refuses_to_skip_a_stage(root: Path, steps: list[tuple[str, int | None]], match: str) -> None:
    before = {env: text(root, env) for env in CFG.environments}
    *ok, (last_to, last_pct) = steps
    for to, pct in ok:
        promote(root, 4, to, pct)
    with pytest.raises(PromotionRefusedError, match=match):
        promote(root, 4, last_to, last_pct)
    if not ok:
        assert {env: text(root, env) for env in CFG.environments} == before


def test_second_canary_is_refused_while_one_runs(root: Path) -> None:
    promote(root, 4, "staging")
    promote(root, 4, "canary", 10)
    promote(root, 5, "staging")
    with pytest.raises(PromotionRefusedError, match="a canary of fraud v4 is running at 10%"):
        promote(root, 5, "canary", 10)


def test_rollback_of_a_canary_restores_the_exact_bytes(root: Path) -> None:
    promote(root, 4, "staging")
    original = text(root, "production")
    promote(root, 4, "canary", 10)
    promote(root, 4, "canary", 50)
    change = plan_revert(CFG, root, "fraud", "production")
    apply_change(change, CFG, root)
    assert text(root, "production") == original
    assert change.before.canary_version == 4 and change.after.canary_version is None


def test_rollback_after_full_promotion_returns_to_previous_version(root: Path) -> None:
    original = text(root, "staging")
    promote(root, 9, "staging")
    apply_change(plan_revert(CFG, root, "fraud", "staging"), CFG, root)
    assert text(root, "staging") == original
    with pytest.raises(PromotionRefusedError, match="nothing to roll back in staging"):
        plan_revert(CFG, root, "fraud", "staging")


def test_unknown_stage_env_and_bad_version_are_refused(root: Path) -> None:
    with pytest.raises(PromotionRefusedError, match="unknown stage 'prod'"):
        plan_promotion(CFG, root, "fraud", 2, "prod")
    with pytest.raises(PromotionRefusedError, match="unknown environment 'qa'"):
        plan_revert(CFG, root, "fraud", "qa")
    with pytest.raises(PromotionRefusedError, match="version must be a registry version >= 1, got 0"):
        plan_promotion(CFG, root, "fraud", 0, "staging")


def test_malformed_manifests_name_the_file_and_the_problem(root: Path) -> None:
    path = root / "infra/overlays/staging/model-fraud.yaml"
    path.write_text(path.read_text().replace('stable-version: "1"', 'stable-version: "one"'))
    with pytest.raises(ManifestError, match=r"'mlops.platform/stable-version' is 'one', expected a registry version"):
        gitops_status(CFG, root, "fraud")
    path.write_text(path.read_text().replace("name: fraud", "name: other"))
    with pytest.raises(ManifestError, match="patches InferenceService 'other', expected 'fraud'"):
        gitops_status(CFG, root, "fraud")
    with pytest.raises(ManifestError, match="no model manifest for 'churn' in 'staging'"):
        gitops_status(CFG, root, "churn")


def test_canary_steps_from_config_are_followed(root: Path) -> None:
    cfg = DeliveryConfig(canary_steps=(5, 25, 100))
    promote(root, 2, "staging", cfg=cfg)
    promote(root, 2, "canary", cfg=cfg)
    assert gitops_status(cfg, root, "fraud")["production"].canary_percent == 5
    with pytest.raises(PromotionRefusedError, match="next canary step for fraud v2 is 25%"):
        promote(root, 2, "canary", 100, cfg=cfg)
    with pytest.raises(PromotionRefusedError, match="--percent 50 is not a canary step; expected one of"):
        promote(root, 2, "canary", 50, cfg=cfg)


def test_commit_records_exactly_the_manifest(root: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@e", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init")
    (root / "unrelated.txt").write_text("staged but not part of the promotion\n")
    git("add", "unrelated.txt")
    change = apply_change(plan_promotion(CFG, root, "fraud", 6, "staging"), CFG, root, commit=True)
    assert change.commit == git("rev-parse", "HEAD").strip()
    assert git("show", "--name-only", "--format=%an|%s", "HEAD").split() == [
        "mlops-bot|gitops:", "serve", "fraud", "v6", "in", "staging", "infra/overlays/staging/model-fraud.yaml"]
    assert "unrelated.txt" in git("diff", "--cached", "--name-only")
