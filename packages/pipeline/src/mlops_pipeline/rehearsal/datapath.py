"""The data path of staging, on one machine, through the same functions the cluster's jobs run.

- The ingestion CronJob (``mlops data ingest``, :func:`mlops_features.ingest_landed`) works in its own folder
  (``ingest/``, what the service image gives a pod: the configs and the Feast repository): it validates the
  batches new under ``data.landing_uri`` (a folder standing in for the bucket's landing prefix), versions the
  accepted area with DVC and pushes it to ``data.dvc_remote`` with its pointer.
- The training job (``train.yml``: ``mlops data pull``, :func:`mlops_features.pull_accepted`) starts from a
  fresh checkout (``runner/``) and gets its data from the remote only, so training never sees a file the
  remote does not hold.
"""

from __future__ import annotations

import shutil
from pathlib import Path

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
