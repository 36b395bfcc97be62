"""Data lineage of a training run: the DVC lock entries of the folders it read, bound to the bytes it read.

``dvc.lock`` is the wrong thing to compare with later: the demo's own ``dvc repro`` rewrites it after every
retrain, so "the lock at the training commit" and "the lock now" differ for honest reasons. What binds a model
to its data is recorded at training instead: for every DVC-tracked folder the run read, the MD5 of each file
(DVC 3's ``hash: md5`` is the MD5 of the bytes, which is also the file's name in the DVC cache) and, when the
current ``dvc.lock`` describes exactly those files, that lock entry's ``.dir`` digest. The check later finds
each recorded file's bytes, in the workspace or in the DVC cache, and hashes them again; the cache's ``.dir``
listing of the recorded lock entry must name the same files. Everything here is read-only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

CACHE_DIR = Path(".dvc/cache/files/md5")
"""DVC 3's local cache of ``hash: md5`` objects (``<md5[:2]>/<md5[2:]>``, folders as ``….dir`` listings)."""
LOCK = "dvc.lock"

Status = Literal["verified", "not verifiable", "broken"]


@dataclass(frozen=True)
class LineageVerdict:
    """The check of a recorded data lineage: a status and the evidence or what differs."""

    status: Status
    detail: str


def md5_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """MD5 of the file's bytes (DVC 3's ``md5`` hash)."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _lock_outs(root: Path) -> dict[str, str]:
    """``{out path: md5}`` of every stage output in ``dvc.lock`` (empty without one)."""
    import yaml

    lock = root / LOCK
    if not lock.is_file():
        return {}
    doc = yaml.safe_load(lock.read_text(encoding="utf-8")) or {}
    outs: dict[str, str] = {}
    for stage in (doc.get("stages") or {}).values():
        for out in stage.get("outs") or []:
            if out.get("md5"):
                outs[str(out["path"]).rstrip("/")] = str(out["md5"])
    return outs


def _cache_listing(root: Path, dir_md5: str) -> dict[str, str] | None:
    """``{relpath: md5}`` of a ``….dir`` object in the DVC cache, or None when it is not there."""
    obj = root / CACHE_DIR / dir_md5[:2] / dir_md5[2:]
    if not obj.is_file():
        return None
    return {str(e["relpath"]): str(e["md5"]) for e in json.loads(obj.read_text(encoding="utf-8"))}


def data_lineage(root: str | Path, folders: Iterable[str]) -> dict[str, Any]:
    """Record what a run reads: per folder (relative to ``root``), every file's MD5 and the DVC lock entry.

    Returns:
        ``{"outs": [{"path", "files": {relpath: md5}, "dvc_md5"}]}``; ``dvc_md5`` is the ``dvc.lock`` digest of
        the folder when the lock's ``.dir`` listing in the cache is exactly these files, else None (trained
        outside ``dvc repro``, or on a workspace that differs from the lock).
    """
    root = Path(root)
    lock = _lock_outs(root)
    outs = []
    for rel in folders:
        folder = root / rel
        files = {f.relative_to(folder).as_posix(): md5_file(f)
                 for f in sorted(folder.rglob("*")) if f.is_file()} if folder.is_dir() else {}
        want = lock.get(str(rel).rstrip("/"))
        dvc_md5 = want if want and want.endswith(".dir") and _cache_listing(root, want) == files else None
        outs.append({"path": str(rel), "files": files, "dvc_md5": dvc_md5})
    return {"outs": outs}


def _find_bytes(root: Path, path: str, rel: str, md5: str) -> str | None:
    """None when the recorded bytes are found (workspace or cache) and hash as recorded; else what differs."""
    work = root / path / rel
    if work.is_file() and md5_file(work) == md5:
        return None
    obj = root / CACHE_DIR / md5[:2] / md5[2:]
    if obj.is_file():
        got = md5_file(obj)
        return None if got == md5 else f"{path}/{rel}: the DVC cache object {md5[:12]}… now hashes to {got[:12]}…"
    found = f"the workspace copy hashes to {md5_file(work)[:12]}…" if work.is_file() else "no workspace copy"
    return f"{path}/{rel}: recorded md5 {md5[:12]}…, {found} and the DVC cache does not hold the recorded bytes"


def check_data_lineage(root: str | Path, recorded: dict[str, Any] | None) -> LineageVerdict:
    """Check a :func:`data_lineage` record against the DVC cache and the data in ``root``.

    ``verified`` when every recorded file's bytes are found and hash as recorded and each recorded lock
    entry's listing in the cache names the same files; ``broken`` naming the first file that differs;
    ``not verifiable`` when nothing was recorded.
    """
    root = Path(root)
    outs = list((recorded or {}).get("outs") or [])
    if not outs:
        return LineageVerdict("not verifiable", "the run recorded no data lineage (trained before it was)")
    lock_now = _lock_outs(root)
    notes, pinned = [], 0
    for out in outs:
        path, files, dvc_md5 = str(out["path"]), dict(out.get("files") or {}), out.get("dvc_md5")
        if not files:
            return LineageVerdict("broken", f"{path}: the run recorded no files (it read an empty folder)")
        if dvc_md5:
            listing = _cache_listing(root, str(dvc_md5))
            if listing is None:
                notes.append(f"{path}: lock entry {str(dvc_md5)[:12]}… is not in this DVC cache (dvc pull)")
            elif listing != files:
                diff = sorted(set(listing.items()) ^ set(files.items()))
                return LineageVerdict("broken", f"{path}/{diff[0][0]}: the recorded file does not match dvc.lock "
                                                f"entry {str(dvc_md5)[:12]}… in the DVC cache")
            else:
                pinned += 1
            if lock_now.get(path) not in (None, dvc_md5):
                notes.append(f"{path}: dvc.lock has moved on to {lock_now[path][:12]}… since (a later dvc repro)")
        for rel, md5 in sorted(files.items()):
            problem = _find_bytes(root, path, rel, str(md5))
            if problem:
                return LineageVerdict("broken", problem)
    n = sum(len(o.get("files") or {}) for o in outs)
    where = ", ".join(f"{o['path']} @ {str(o['dvc_md5'])[:12]}…" if o.get("dvc_md5") else o["path"] for o in outs)
    detail = f"{n} files of {where} hash as recorded at training; {pinned}/{len(outs)} pinned by dvc.lock entries"
    return LineageVerdict("verified", detail + (f" ({'; '.join(notes)})" if notes else ""))
