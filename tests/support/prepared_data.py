"""The fraud sample data prepared once per test run (``prepare_local_data`` of the repo's configs at 20,000 rows:
generated, validated, the Feast repo applied, backfilled, materialized), for the tests that train on it.

Three test modules (the evaluation world, test_calibration, test_lineage) each prepared this same data: ~20 s
alone and about a minute under a second worker, for identical bytes. Each now gets a copy of the one prepared
world, checked first to be what it would have prepared itself: its ``data`` and ``features`` sections and seed
must equal the world's, or the test fails naming the difference.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

ROWS_SET = "data.rows=20000"
_RECORD = "sections.json"
# What prepare_local_data writes under the repo root (the data areas and the Feast registry + online store).
_PRODUCED = ("data", ".mlops/feast")


def _sections(cfg: Any) -> dict[str, Any]:
    return {
        "data": cfg.data.model_dump(mode="json"),
        "features": cfg.features.model_dump(mode="json"),
        "seed": cfg.project.seed,
    }


def build_prepared_fraud_data(folder: Path, repo_root: Path) -> None:
    """The world: ``repo/`` as prepare_local_data leaves it, and the sections it was prepared with."""
    from mlops_config import load_config
    from mlops_features import prepare_local_data

    root = folder / "repo"
    shutil.copytree(repo_root / "configs", root / "configs")
    shutil.copytree(repo_root / "feature_repo", root / "feature_repo")
    cfg = load_config(model="fraud", config_dir=root / "configs", overrides=[ROWS_SET], environ={}).config
    prepare_local_data(cfg.data, cfg.features, root, contract=cfg.declared_contract("the prepared world"),
                       seed=cfg.project.seed)
    (folder / _RECORD).write_text(json.dumps(_sections(cfg), indent=2, sort_keys=True))


def copy_prepared_fraud_data(world: Path, cfg: Any, root: Path) -> None:
    """Put the prepared data under ``root`` (with the feature repo when ``root`` has none), for a test whose
    ``cfg`` would have prepared exactly it; a different ``data``/``features`` section or seed fails here."""
    recorded = json.loads((world / _RECORD).read_text())
    mine = json.loads(json.dumps(_sections(cfg)))
    if mine != recorded:
        changed = sorted(
            f"{s}.{k}"
            for s in ("data", "features")
            for k in set(recorded[s]) | set(mine[s])
            if recorded[s].get(k) != mine[s].get(k)
        )
        raise AssertionError(
            f"this test's config differs from the prepared world's at {changed or ['seed']}: "
            f"prepare its own data instead (mlops_features.prepare_local_data)"
        )
    for rel in ("feature_repo", *_PRODUCED):
        if not (root / rel).exists():
            shutil.copytree(world / "repo" / rel, root / rel)
        elif rel != "feature_repo":
            raise AssertionError(f"{root / rel} exists already: the prepared data goes into a fresh root")
