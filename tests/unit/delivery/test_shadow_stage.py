"""The shadow stage as manifest edits on a copy of the real infra/ tree: order, exact text, one commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mlops_config import DeliveryConfig
from mlops_delivery import ManifestError, PromotionRefusedError, plan_promotion, plan_shadow, shadow_status
from mlops_delivery.promotion import apply_change
from mlops_delivery.shadow_stage import apply_shadow

CFG = DeliveryConfig()
PROD = Path("infra/overlays/production")


@pytest.fixture
def root(tmp_path: Path, repo_root: Path) -> Path:
    shutil.copytree(repo_root / "infra", tmp_path / "infra")
    apply_change(plan_promotion(CFG, tmp_path, "fraud", 7, "staging"), CFG, tmp_path)
    return tmp_path


def read(root: Path, name: str) -> str:
    return (root / PROD / name).read_text()


def test_start_edits_exactly_the_shadow_lines_and_stop_restores_the_model_manifest(root: Path) -> None:
    shadow0, model0 = read(root, "shadow-fraud.yaml"), read(root, "model-fraud.yaml")
    change = apply_shadow(plan_shadow(CFG, root, "fraud", 7, fraction=0.25), CFG, root)
    assert change.after.version == 7 and change.after.fraction == 0.25 and change.before.version is None
    # expected text by hand from the originals
    assert read(root, "shadow-fraud.yaml") == shadow0.replace(
        'SHADOW__FRACTION: "0"', 'SHADOW__FRACTION: "0.25"').replace(
        'shadow-version: "0"', 'shadow-version: "7"').replace(
        "minReplicas: 0  # scaled", "minReplicas: 1  # scaled").replace(
        "models/fraud/v1/  # immutable: the candidate", "models/fraud/v7/  # immutable: the candidate")
    assert read(root, "model-fraud.yaml") == model0.replace(
        '# serves all traffic not sent to the canary\n',
        '# serves all traffic not sent to the canary\n    mlops.platform/shadow-version: "7"\n')
    assert shadow_status(CFG, root, "fraud").version == 7
    assert plan_shadow(CFG, root, "fraud", 7, fraction=0.25).diff == ""  # idempotent

    stopped = apply_shadow(plan_shadow(CFG, root, "fraud", None), CFG, root)
    assert stopped.before.version == 7 and stopped.after.version is None and stopped.after.fraction == 0
    assert read(root, "model-fraud.yaml") == model0
    assert 'SHADOW__FRACTION: "0"' in read(root, "shadow-fraud.yaml")
    assert "minReplicas: 0  # scaled" in read(root, "shadow-fraud.yaml")


def test_order_is_enforced(root: Path) -> None:
    with pytest.raises(PromotionRefusedError, match="staging serves v7; promote it to staging first"):
        plan_shadow(CFG, root, "fraud", 8)
    with pytest.raises(PromotionRefusedError, match=r"shadow fraction 1\.5 must be in \(0, 1\]"):
        plan_shadow(CFG, root, "fraud", 7, fraction=1.5)
    apply_shadow(plan_shadow(CFG, root, "fraud", 7), CFG, root)
    apply_change(plan_promotion(CFG, root, "fraud", 8, "staging"), CFG, root)
    with pytest.raises(PromotionRefusedError, match="fraud v7 is in shadow; stop it first"):
        plan_shadow(CFG, root, "fraud", 8)
    apply_shadow(plan_shadow(CFG, root, "fraud", None), CFG, root)
    apply_change(plan_promotion(CFG, root, "fraud", 8, "canary", percent=10), CFG, root)
    with pytest.raises(PromotionRefusedError, match="the shadow comes before the canary"):
        plan_shadow(CFG, root, "fraud", 8)


def test_a_shadow_change_is_one_commit_of_both_files(root: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "base")
    change = apply_shadow(plan_shadow(CFG, root, "fraud", 7), CFG, root, commit=True)
    assert change.commit == git("rev-parse", "HEAD").strip()
    assert sorted(git("show", "--name-only", "--format=", "HEAD").split()) == [
        f"{PROD}/model-fraud.yaml", f"{PROD}/shadow-fraud.yaml"]
    assert git("log", "-1", "--format=%s").strip() == "gitops: shadow fraud v7 with 1 of live requests in production"
    # pull-request mode (refused before the shared overlay writer): the same one commit, on a branch of its own
    head, before = git("rev-parse", "HEAD").strip(), read(root, "shadow-fraud.yaml")
    stop = apply_shadow(plan_shadow(CFG, root, "fraud", None), DeliveryConfig(commit_mode="pull_request"), root,
                        commit=True)
    assert stop.branch == "gitops/fraud-production-shadow-stop" and stop.commit and not stop.pushed
    assert git("rev-parse", "HEAD").strip() == head and read(root, "shadow-fraud.yaml") == before
    assert git("rev-parse", stop.branch).strip() == stop.commit and git("rev-parse", f"{stop.commit}~1").strip() == head
    assert sorted(git("show", "--name-only", "--format=", stop.commit).split()) == [
        f"{PROD}/model-fraud.yaml", f"{PROD}/shadow-fraud.yaml"]


def test_a_shadow_file_with_the_variables_named_before_the_move_is_refused_naming_the_new(root: Path) -> None:
    path = root / PROD / "shadow-fraud.yaml"
    path.write_text(path.read_text().replace("MLOPS__SERVING__TABULAR__SHADOW__", "MLOPS__SERVING__SHADOW__"))
    with pytest.raises(ManifestError, match=r"has moved to serving\.tabular\.shadow\.\*; rename them "
                                            r"MLOPS__SERVING__TABULAR__SHADOW__"):
        shadow_status(CFG, root, "fraud")
