"""Moving kustomizations to new container images by digest (what the release workflow commits).

The manifests name our images by a readable reference (``ghcr.io/mlops-platform/trainer:0.1.0``); each
kustomization's ``images:`` list overrides it with the digest the release built and scanned, so what a
cluster pulls is exactly those bytes. Edits are ruamel round-trips: comments, key order and quoting stay.
"""

from __future__ import annotations

import difflib
import io
import logging
import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from mlops_delivery.errors import ManifestError
from mlops_delivery.git import commit_files
from mlops_delivery.manifest import round_trip_yaml

logger = logging.getLogger(__name__)

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_NAME = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


@dataclass(frozen=True)
class ImagesChange:
    """The edit of some kustomizations' ``images:`` lists, with the diff and the commit that recorded it."""

    paths: tuple[Path, ...]
    images: dict[str, str]
    diff: str
    commit: str | None = None

    @property
    def changed(self) -> bool:
        """Whether any file's text changed."""
        return bool(self.diff)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready form."""
        return {"paths": [str(p) for p in self.paths], "images": self.images, "changed": self.changed,
                "diff": self.diff, "commit": self.commit}


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


def set_images(paths: Sequence[Path], refs: Sequence[str] | Mapping[str, str], *, root: Path, commit: bool = False,
               author: str = "mlops-bot <mlops-bot@users.noreply.github.com>") -> ImagesChange:
    """Pin images by digest in each kustomization of ``paths`` and, with ``commit``, record it as one commit.

    Args:
        paths: Kustomization files (absolute or relative to ``root``).
        refs: ``NAME@sha256:…`` references, or a ``{name: digest}`` mapping.
        root: The git working tree.
        commit: Commit the edited files (only those) with the message ``release: pin images …``.
        author: ``Name <email>`` of the commit.

    Raises:
        ManifestError: a bad reference, or a file that is missing or not a kustomization.
    """
    images = dict(refs) if isinstance(refs, Mapping) else parse_image_refs(refs)
    if isinstance(refs, Mapping):
        parse_image_refs([f"{n}@{d}" for n, d in images.items()])  # the same checks for either form
    if not images:
        raise ManifestError("no image given; expected at least one NAME@sha256:<digest>")
    files = tuple(p if p.is_absolute() else root / p for p in paths)
    diffs, edited = [], []
    for f in files:
        if not f.is_file():
            raise ManifestError(f"kustomization {str(f)!r} does not exist")
        old = f.read_text(encoding="utf-8")
        new = edit_images(old, images, path=f)
        if new != old:
            rel = f.relative_to(root) if f.is_relative_to(root) else f
            diffs.append("".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                      fromfile=f"a/{rel}", tofile=f"b/{rel}")))
            edited.append((f, new))
    for f, new in edited:
        f.write_text(new, encoding="utf-8")
    sha = None
    if commit and edited:
        sha = _commit(root, [f for f, _ in edited], images, author)
    return ImagesChange(paths=files, images=images, diff="".join(diffs), commit=sha)


def _commit(root: Path, files: Sequence[Path], images: Mapping[str, str], author: str) -> str:
    short = ", ".join(f"{n.rsplit('/', 1)[-1]}@{d[7:19]}" for n, d in sorted(images.items()))
    return commit_files(root, list(files), f"release: pin images {short}", author)
