"""The cluster's data path: raw batches land in object storage, a scheduled ingestion validates the new ones
and versions the accepted area with DVC; training pulls exactly that version.

``ingest_landed`` (the ingestion CronJob's ``mlops data ingest``): pull the current accepted area, copy
batches under ``data.landing_uri`` (any fsspec URL) that it has not seen into ``data.raw_dir``, run the Great
Expectations gate (good rows to ``data.validated_dir``, bad rows and batches to quarantine), ``dvc add`` the
accepted area, ``dvc push`` it to ``data.dvc_remote``, and publish its ``.dvc`` pointer next to the data as
``pointers/<md5>.dvc`` and, last, ``pointers/latest.dvc``. The pointer is the data version: ``train.yml``
fetches it and pulls what it pins (``pull_accepted``, ``mlops data pull``); the run records the md5.

Why pointers in the remote rather than committed to git: the ingestion runs in the cluster from the service
image, which has neither git nor credentials to push to the repository; DVC works without an SCM
(``dvc init --no-scm``), and a pointer named by its md5 is as immutable as a commit.

DVC runs as the venv's own ``dvc`` command (its Python API is not public); the remote is configured as
``profile`` in ``.dvc/config.local`` so the URL comes from the config layer and is never committed.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlops_config import ContractConfig, DataConfig
from mlops_core import Progress
from mlops_features.errors import DataError
from mlops_features.gate import ValidationSummary, validate_batches

logger = logging.getLogger(__name__)

REMOTE_NAME = "profile"
POINTERS = "pointers"
LATEST = "latest"


@dataclass
class IngestReport:
    """What one ingestion run saw, accepted and versioned."""

    landed: list[str]
    new: list[str]
    validation: ValidationSummary | None
    dvc_file: str | None
    data_md5: str | None
    pushed: bool
    skipped: list[str] = field(default_factory=list)
    previous_md5: str | None = None
    """The version published as latest before this run (``None``: none, or ``push`` was off)."""

    @property
    def new_version(self) -> bool:
        """Whether this run published a version that was not the latest before (what the data trigger asks)."""
        return self.pushed and self.data_md5 is not None and self.data_md5 != self.previous_md5

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return {"landed": self.landed, "new": self.new, "skipped": self.skipped,
                "validation": self.validation.to_dict() if self.validation else None, "dvc_file": self.dvc_file,
                "data_md5": self.data_md5, "previous_md5": self.previous_md5, "new_version": self.new_version,
                "pushed": self.pushed}


def _dvc_bin() -> str:
    return str(Path(sys.executable).with_name("dvc"))


def run_dvc(root: Path, *args: str, timeout_s: float = 600) -> str:
    """Run ``dvc ARGS`` in ``root``; raise :class:`DataError` with DVC's own message on failure."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    try:
        proc = subprocess.run([_dvc_bin(), *args], cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DataError(f"`dvc {' '.join(args)}` did not finish within {timeout_s:.0f} s in {str(root)!r}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise DataError(f"`dvc {' '.join(args)}` failed in {str(root)!r}: {detail[-1] if detail else proc.returncode}")
    return proc.stdout


def configure_remote(data: DataConfig, root: Path) -> str:
    """Point DVC's ``profile`` remote at ``data.dvc_remote`` (local config, not committed). Returns the URL.

    A relative folder is resolved against ``root`` (DVC would resolve it against ``.dvc/``).
    """
    url = _remote_url(data, root)
    # What `dvc remote add --local --force profile URL` writes, without paying a dvc start-up for it.
    (root / ".dvc" / "config.local").write_text(f'[\'remote "{REMOTE_NAME}"\']\n    url = {url}\n', encoding="utf-8")
    return url


def dvc_file(data: DataConfig, root: Path) -> Path:
    """The ``.dvc`` pointer of the accepted area (``<validated_dir>.dvc``): the versioned data's identity."""
    return root / f"{data.validated_dir.rstrip('/')}.dvc"


def _landed(landing_uri: str) -> tuple[Any, list[str]]:
    import fsspec

    fs, base = fsspec.core.url_to_fs(landing_uri)
    if not fs.exists(base):
        raise DataError(f"data.landing_uri {landing_uri!r} does not exist; expected a folder of parquet batches")
    return fs, sorted(p for p in fs.find(base) if str(p).endswith(".parquet"))


def ingest_landed(data: DataConfig, root: str | Path, *, push: bool = True,
                  contract: ContractConfig) -> IngestReport:
    """Validate batches that landed since the last run (against ``contract``'s raw schema and expectations) and
    version the accepted area (DVC add + push).

    Batches whose accepted file already exists in ``data.validated_dir`` are skipped (ingestion is idempotent);
    the accepted area must hold the current version first (``pull_accepted`` in a fresh pod).

    Raises:
        DataError: no landing URI or DVC remote configured, the landing folder is missing, or DVC failed.
    """
    root = Path(root)
    if not data.landing_uri:
        raise DataError("data.landing_uri is not set: nothing to ingest; set it in the profile "
                        "(e.g. s3://mlops-data/<model>/landing)")
    fs, landed = _landed(data.landing_uri)
    ensure_workspace(root)
    previous = None
    if push and read_pointer(data, root, LATEST) is not None:
        # A fresh pod starts empty: build on the current version, never replace it. A run killed in this
        # workspace may have left accepted files of batches it never published, or a writer's temporary file:
        # DVC refuses to check out over those without --force. They are rebuilt from the landing area below.
        previous = pull_accepted(data, root, force=True)
    validated = root / data.validated_dir
    seen = {p.stem for p in validated.glob("*.parquet")} if validated.is_dir() else set()
    raw = root / data.raw_dir
    raw.mkdir(parents=True, exist_ok=True)
    skipped = [str(p) for p in landed if Path(str(p)).stem in seen]
    fetch = [p for p in landed if Path(str(p)).stem not in seen]
    new = []
    with Progress(len(fetch), "fetched") as progress:  # a bar on a terminal, plain lines elsewhere
        for done, path in enumerate(fetch, start=1):
            local = raw / Path(str(path)).name
            fs.get_file(path, str(local))
            new.append(str(local))
            progress.update(done, local.name)
    # its own progress, a batch at a time
    summary = validate_batches(new, data, root, contract=contract) if new else None
    if summary is not None:
        logger.info("ingested %d new batch(es): %d rows accepted, %d quarantined", len(new),
                    summary.accepted_rows, summary.quarantined_rows)
    md5, pointer, pushed = None, None, False
    if validated.is_dir() and any(validated.glob("*.parquet")):
        pointer = version_accepted(data, root, push=push)
        md5 = accepted_md5(pointer)
        pushed = push
    return IngestReport(landed=[str(p) for p in landed], new=new, validation=summary, dvc_file=str(pointer) if pointer
                        else None, data_md5=md5, pushed=pushed, skipped=skipped, previous_md5=previous)


def version_accepted(data: DataConfig, root: Path, *, push: bool = True) -> Path:
    """``dvc add`` the accepted area and (``push``) upload it to the profile's remote; returns the ``.dvc`` file."""
    if push:
        configure_remote(data, root)
    run_dvc(root, "add", data.validated_dir.rstrip("/"))
    pointer = dvc_file(data, root)
    if push:
        run_dvc(root, "push", "--remote", REMOTE_NAME, str(pointer.relative_to(root)))
        publish_pointer(data, root, pointer)
    return pointer


def accepted_md5(pointer: Path) -> str:
    """The directory hash a ``.dvc`` file pins (DVC's ``md5`` of the folder listing)."""
    import yaml

    doc = yaml.safe_load(pointer.read_text(encoding="utf-8"))
    try:
        return str(doc["outs"][0]["md5"])
    except (KeyError, IndexError, TypeError):
        raise DataError(f"{str(pointer)!r} is not a DVC pointer file with outs[0].md5") from None


def check_pinned_data(data: DataConfig, root: str | Path, pinned: str) -> str:
    """Refuse unless the accepted area under ``root`` is exactly data version ``pinned``; returns the md5.

    Two checks: the area's ``.dvc`` pointer names ``pinned`` (what ``mlops data pull`` wrote from the pin), and
    ``dvc status`` finds the folder unchanged against it (no file added, edited or removed since the pull).

    Raises:
        DataError: no pointer, another version, or a folder that differs from its pointer, each naming the fix.
    """
    root = Path(root)
    pointer = dvc_file(data, root)
    rel = str(pointer.relative_to(root))
    if not pointer.is_file():
        raise DataError(f"the data-version pin names {pinned!r} but {rel!r} does not exist under {str(root)!r}: the "
                        "accepted area was not pulled; run `mlops data pull` (it takes the pin) before training")
    got = accepted_md5(pointer)
    if got != pinned:
        raise DataError(f"the data-version pin names {pinned!r} but the accepted area is version {got!r} ({rel}); "
                        "run `mlops data pull` (it takes the pin) so training reads the pinned version")
    status = json.loads(run_dvc(root, "status", "--json", rel) or "{}")
    if status:
        raise DataError(f"the accepted area differs from its pointer {rel!r} (version {pinned!r}): {status}; "
                        "run `mlops data pull --force` to restore exactly the pinned version")
    return got


def ensure_workspace(root: Path) -> None:
    """A DVC workspace at ``root`` where there is none (a pod): what ``dvc init --no-scm`` writes into ``.dvc/``.

    Written by hand because ``dvc init`` also puts ``.dvcignore`` into ``root``, which is read-only in the
    service image; only ``.dvc/`` and the data folders are writable volumes there.
    """
    config = root / ".dvc" / "config"
    if not config.is_file():
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("[core]\n    no_scm = True\n", encoding="utf-8")


def _remote_url(data: DataConfig, root: Path) -> str:
    if not data.dvc_remote:
        raise DataError("data.dvc_remote is not set: the accepted area has no remote to push to or pull from; "
                        "set it in the profile (e.g. s3://mlops-dvc/<model>)")
    url = data.dvc_remote
    return url if "://" in url else str((root / url).resolve())


def publish_pointer(data: DataConfig, root: Path, pointer: Path) -> str:
    """Write ``pointer`` to the remote as ``pointers/<md5>.dvc``, then ``pointers/latest.dvc``; returns the md5."""
    import fsspec

    md5 = accepted_md5(pointer)
    fs, base = fsspec.core.url_to_fs(_remote_url(data, root))
    text = pointer.read_bytes()
    fs.makedirs(f"{base}/{POINTERS}", exist_ok=True)
    fs.pipe_file(f"{base}/{POINTERS}/{md5.removesuffix('.dir')}.dvc", text)
    fs.pipe_file(f"{base}/{POINTERS}/{LATEST}.dvc", text)  # last: latest never names data not yet pushed
    return md5


def read_pointer(data: DataConfig, root: Path, version: str = LATEST) -> bytes | None:
    """The published pointer of ``version`` (an md5 or ``latest``); ``None`` when there is none."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(_remote_url(data, root))
    path = f"{base}/{POINTERS}/{version.removesuffix('.dir')}.dvc"
    return bytes(fs.cat_file(path)) if fs.exists(path) else None


def pull_accepted(data: DataConfig, root: str | Path, version: str = LATEST, *, force: bool = False) -> str:
    """Fetch the accepted area of data ``version`` (md5, or ``latest``) from ``data.dvc_remote``; returns its md5.

    ``force``: the accepted area becomes exactly that version, files in it that the version does not hold
    removed (``dvc pull --force``); without it DVC refuses to touch a folder that differs from the pointer.

    Raises:
        DataError: no remote, no such published version (nothing ingested yet), or DVC failed.
    """
    root = Path(root)
    ensure_workspace(root)
    text = read_pointer(data, root, version)
    if text is None:
        raise DataError(f"data version {version!r} is not published under {data.dvc_remote!r}/{POINTERS}/: nothing "
                        f"was ingested yet; land batches under data.landing_uri and run `mlops data ingest`")
    pointer = dvc_file(data, root)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_bytes(text)
    configure_remote(data, root)
    run_dvc(root, "pull", *(("--force",) if force else ()), "--remote", REMOTE_NAME, str(pointer.relative_to(root)))
    return accepted_md5(pointer)

