"""The data path of staging, on one machine, through the same functions the cluster's jobs run.

- The ingestion CronJob (``mlops data ingest``, :func:`mlops_features.ingest_landed`) works in its own folder
  (``ingest/``, what the service image gives a pod: the configs and the Feast repository): it validates the
  batches new under ``data.landing_uri`` (a folder standing in for the bucket's landing prefix), versions the
  accepted area with DVC and pushes it to ``data.dvc_remote`` with its pointer.
- The training job (``train.yml``: ``mlops data pull``, :func:`mlops_features.pull_accepted`) starts from a
  fresh checkout (``runner/``) of ``main``, which carries the model's data-version pin, and gets exactly that
  version from the remote only, so training never sees a file the remote does not hold.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mlops_config import parse_data_pin
from mlops_pipeline.errors import PipelineError

# What a checkout of the platform repo (or the service image) gives a job: the config layer and the Feast repo.
CHECKOUT = ("configs", "feature_repo")


def checkout(repo_root: Path, dest: Path) -> Path:
    """A job's working folder: ``configs/`` and ``feature_repo/`` of ``repo_root``, nothing else."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in CHECKOUT:
        shutil.copytree(repo_root / name, dest / name)
    return dest


def checkout_with_pin(repo_root: Path, dest: Path, remote: Path, rel_pin: str) -> tuple[Path, str]:
    """:func:`checkout` plus the data-version pin ``rel_pin`` as ``main`` of the git ``remote`` holds it (where the
    retraining pull requests are merged); returns the folder and the pinned version."""
    folder = checkout(repo_root, dest)
    shown = subprocess.run(["git", "show", f"main:{rel_pin}"], cwd=remote, capture_output=True, text=True,
                           check=False, timeout=60)
    if shown.returncode != 0:
        raise PipelineError(f"main of {str(remote)!r} holds no data-version pin {rel_pin!r} (no retraining pull "
                            f"request merged yet): {shown.stderr.strip()}")
    (folder / rel_pin).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel_pin).write_text(shown.stdout, encoding="utf-8")
    return folder, parse_data_pin(shown.stdout, f"{rel_pin} on main")
