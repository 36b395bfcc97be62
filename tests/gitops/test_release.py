"""The release workflow builds, scans and pushes the four service images, then pins every kustomization to
the pushed digests through `mlops gitops set-images`, whose round-trip edit renders with kustomize."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_delivery import ManifestError
from mlops_delivery.images import parse_image_refs, set_images

from .conftest import REPO, render

SERVICES = sorted(p.parent.name for p in (REPO / "services").glob("*/Dockerfile"))
KUSTOMIZATIONS = ("infra/overlays/staging", "infra/overlays/production", "infra/platform")


def _digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _images(text: str) -> set[str]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(docs)
    return found


def test_release_workflow_builds_each_service_once_scans_that_digest_then_pins_it() -> None:
    doc = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    steps = doc["jobs"]["release"]["steps"]
    assert SERVICES == ["monitor", "predictor", "trainer", "transformer"]
    for service in SERVICES:
        dockerfile = f"services/{service}/Dockerfile"
        built = [i for i, s in enumerate(steps) if "build-push-action" in s.get("uses", "")
                 and s["with"]["file"] == dockerfile]
        scans = [i for i, s in enumerate(steps) if "trivy-action" in s.get("uses", "")
                 and service in s["with"]["image-ref"]]
        assert len(built) == 1 and len(scans) == 1, f"{service}: built {len(built)} times (once: scan what is pushed)"
        build = steps[built[0]]
        assert build["with"].get("push") is True and build.get("id") == service
        assert built[0] < scans[0], f"{service}: scanned before it was built"
        # the scan reads the very digest the build pushed, not a tag or a second build
        assert steps[scans[0]]["with"]["image-ref"].endswith(f"@${{{{ steps.{service}.outputs.digest }}}}")
        assert steps[scans[0]]["with"]["exit-code"] == "1"  # a finding fails the release
        assert scans[0] < len(steps) - 1  # every scan before the pin step
    pin = steps[-1]
    assert pin["run"].startswith(".venv/bin/mlops gitops set-images") and "--commit --push" in pin["run"]
    for service in SERVICES:
        assert f"steps.{service}.outputs.digest" in pin["env"][service.upper()]


def test_set_images_pins_every_target_by_digest_and_renders(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "infra", root / "infra")
    before = {t: (root / t / "kustomization.yaml").read_text() for t in KUSTOMIZATIONS}
    ours = {f"ghcr.io/mlops-platform/{s}": _digest(s) for s in SERVICES}
    refs = [f"{n}@{d}" for n, d in ours.items()]
    change = set_images([root / t / "kustomization.yaml" for t in KUSTOMIZATIONS], refs, root=root)
    assert change.changed
    for target in KUSTOMIZATIONS:
        text = (root / target / "kustomization.yaml").read_text()
        # Round trip: the file's leading comment block and every former line survive.
        assert text.startswith(before[target].split("\n", 1)[0])
        assert all(line in text for line in before[target].splitlines())
        images = _images(render(root / target))
        mine = {i for i in images if i.startswith("ghcr.io/mlops-platform/")}
        assert mine, target
        for image in mine:
            name, _, digest = image.partition("@")
            assert digest == ours[name], f"{target}: {image} is not pinned to the released digest"
    # Again with the same digests: nothing changes.
    assert not set_images([root / t / "kustomization.yaml" for t in KUSTOMIZATIONS], refs, root=root).changed


def test_set_images_commits_only_the_kustomizations(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "infra", root / "infra")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "i"],
                   check=True)
    (root / "untracked.txt").write_text("not part of the release commit")
    paths = [root / t / "kustomization.yaml" for t in KUSTOMIZATIONS]
    change = set_images(paths, [f"ghcr.io/mlops-platform/trainer@{_digest('x')}"], root=root, commit=True)
    files = subprocess.run(["git", "-C", str(root), "show", "--name-only", "--format=", change.commit or "HEAD"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert sorted(files) == sorted(f"{t}/kustomization.yaml" for t in KUSTOMIZATIONS)


@pytest.mark.parametrize(("ref", "why"), [
    ("ghcr.io/mlops-platform/trainer:0.2.0", "not pinned by digest"),
    ("ghcr.io/mlops-platform/trainer@sha256:abc", "not pinned by digest"),
    ("ghcr.io/mlops-platform/trainer:0.2.0@sha256:" + "a" * 64, "without a tag"),
    ("GHCR.io/Upper@sha256:" + "a" * 64, "not a repository name"),
])
def test_bad_image_references_are_refused_by_name(ref: str, why: str) -> None:
    with pytest.raises(ManifestError, match=why) as err:
        parse_image_refs([ref])
    assert repr(ref) in str(err.value) or repr(ref.partition("@")[0]) in str(err.value)
