"""Moving kustomizations to new container images by digest (what the release workflow commits).

The manifests name our images by a readable reference (``ghcr.io/mlops-platform/trainer:0.1.0``); each
kustomization's ``images:`` list overrides it with the digest the release built and scanned, so what a
cluster pulls is exactly those bytes. Edits are ruamel round-trips: comments, key order and quoting stay.
They are recorded like every overlay change, through the one overlay writer (``delivery.commit_mode``).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import logging
import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from mlops_config import DeliveryConfig
from mlops_delivery.errors import ManifestError
from mlops_delivery.manifest import round_trip_yaml
from mlops_delivery.overlay import write_local

logger = logging.getLogger(__name__)

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_NAME = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


@dataclass(frozen=True)
class ImagesChange:
    """The edit of some kustomizations' ``images:`` lists: their new text, the diff, and how it was recorded."""

    paths: tuple[Path, ...]
    images: dict[str, str]
    diff: str
    texts: dict[Path, str] = field(default_factory=dict, repr=False)
    """The new text of each kustomization that changes (what the overlay writer writes)."""
    commit: str | None = None
    pushed: bool = False
    branch: str | None = None
    """Pull-request mode: the branch holding the commit (``None``: the checked-out branch)."""
    pull_request: str | None = None

    @property
    def changed(self) -> bool:
        """Whether any file's text changed."""
        return bool(self.diff)

    @property
    def message(self) -> str:
        """The commit message: ``release: pin images trainer@<digest prefix>, …``."""
        short = ", ".join(f"{n.rsplit('/', 1)[-1]}@{d[7:19]}" for n, d in sorted(self.images.items()))
        return f"release: pin images {short}"

    @property
    def branch_name(self) -> str:
        """Pull-request mode's branch: one per set of digests, so a re-run finds its own branch."""
        key = ",".join(f"{n}@{d}" for n, d in sorted(self.images.items()))
        return f"release/pin-images-{hashlib.sha256(key.encode()).hexdigest()[:12]}"

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready form."""
        return {"paths": [str(p) for p in self.paths], "images": self.images, "changed": self.changed,
                "diff": self.diff, "commit": self.commit, "pushed": self.pushed, "branch": self.branch,
                "pull_request": self.pull_request}


def parse_image_refs(refs: Sequence[str]) -> dict[str, str]:
    """``["ghcr.io/o/trainer@sha256:…", …]`` → ``{"ghcr.io/o/trainer": "sha256:…"}``.

    Raises:
        ManifestError: a reference without a well-formed sha256 digest, a bad name, or a name given twice.
    """
    out: dict[str, str] = {}
    for ref in refs:
        name, sep, digest = ref.partition("@")
        if not sep or not DIGEST.match(digest):
            raise ManifestError(f"image {ref!r} is not pinned by digest; expected NAME@sha256:<64 hex digits>")
        if not IMAGE_NAME.match(name) or ":" in name.rsplit("/", 1)[-1]:
            raise ManifestError(f"image name {name!r} in {ref!r} is not a repository name without a tag "
                                f"(e.g. ghcr.io/mlops-platform/trainer)")
        if name in out:
            raise ManifestError(f"image {name!r} is given twice ({out[name]} and {digest})")
        out[name] = digest
    return out


def _base_name(entry: Mapping[str, object]) -> str:
    return str(entry.get("name", ""))


def edit_images(text: str, images: Mapping[str, str], *, path: Path) -> str:
    """``text`` (a kustomization) with ``images:`` pinning each of ``images`` by digest; other entries kept."""
    y = round_trip_yaml()
    doc = y.load(text)
    if not isinstance(doc, CommentedMap) or doc.get("kind") != "Kustomization":
        raise ManifestError(f"{str(path)!r} is not a kustomization (kind: Kustomization); cannot set images in it")
    entries = doc.get("images")
    if entries is None:
        entries = CommentedSeq()
        doc["images"] = entries
    if not isinstance(entries, list):
        raise ManifestError(f"{str(path)!r}: images must be a list, got {type(entries).__name__}")
    for name, digest in images.items():
        found = [e for e in entries if isinstance(e, MutableMapping) and _base_name(e) == name]
        if found:
            entry = found[0]
            entry.pop("newTag", None)  # a tag beside a digest is ignored by kustomize: drop it, don't mislead
            entry["digest"] = digest
        else:
            entries.append(CommentedMap([("name", name), ("digest", digest)]))
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


def plan_images(paths: Sequence[Path], images: Mapping[str, str], root: Path) -> ImagesChange:
    """The kustomizations of ``paths`` (relative paths resolve under ``root``) pinning ``images``, in memory.

    Raises:
        ManifestError: a file that is missing or not a kustomization.
    """
    files = tuple(p if p.is_absolute() else root / p for p in paths)
    diffs, texts = [], {}
    for f in files:
        if not f.is_file():
            raise ManifestError(f"kustomization {str(f)!r} does not exist")
        old = f.read_text(encoding="utf-8")
        new = edit_images(old, images, path=f)
        if new != old:
            rel = f.relative_to(root) if f.is_relative_to(root) else f
            diffs.append("".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                      fromfile=f"a/{rel}", tofile=f"b/{rel}")))
            texts[f] = new
    return ImagesChange(paths=files, images=dict(images), diff="".join(diffs), texts=texts)


def set_images(paths: Sequence[Path], refs: Sequence[str] | Mapping[str, str], *, root: Path,
               delivery: DeliveryConfig | None = None, commit: bool = False, push: bool = False) -> ImagesChange:
    """Pin images by digest in each kustomization of ``paths`` through the overlay writer
    (:func:`mlops_delivery.overlay.write_overlay`): written, and with ``commit`` recorded as one commit per
    ``delivery.commit_mode`` (on the checked-out branch, or on a branch of its own with a pull request), pushed
    with the one compare-and-swap push. A push that loses the race is planned again on the remote's new tip.

    Args:
        paths: Kustomization files (absolute or relative to ``root``).
        refs: ``NAME@sha256:…`` references, or a ``{name: digest}`` mapping.
        root: The git working tree.
        delivery: ``commit_mode``, ``git_author``, ``git_remote``, ``github_token_var`` (default: the defaults).
        commit: Commit the edited files (only those) with the message ``release: pin images …``.
        push: Push the commit (or its branch, and open the pull request).

    Raises:
        ManifestError: a bad reference, or a file that is missing or not a kustomization.
        PushRejectedError: the push kept losing the race, or a pull request's branch holds other content.
    """
    images = dict(refs) if isinstance(refs, Mapping) else parse_image_refs(refs)
    if isinstance(refs, Mapping):
        parse_image_refs([f"{n}@{d}" for n, d in images.items()])  # the same checks for either form
    if not images:
        raise ManifestError("no image given; expected at least one NAME@sha256:<digest>")
    relative = [p.relative_to(root) if p.is_absolute() and p.is_relative_to(root) else p for p in paths]

    def edit(at: Path) -> ImagesChange:
        return plan_images(relative, images, at)

    return write_local(delivery or DeliveryConfig(), root, edit, edit(root), commit=commit, push=push)
