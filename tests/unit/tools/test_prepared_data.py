"""tests/support/prepared_data: a test gets the run's prepared data only when its own config would have prepared
exactly it; a different data section or seed fails naming the key, and a root that has data already is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops_config import load_config
from tests.support.prepared_data import ROWS_SET, copy_prepared_fraud_data

REPO = Path(__file__).resolve().parents[3]


def _fake_world(tmp_path: Path) -> Path:
    """A world as build_prepared_fraud_data leaves it, with its record written from the repo's config by hand."""
    cfg = load_config(model="fraud", config_dir=REPO / "configs", overrides=[ROWS_SET], environ={}).config
    world = tmp_path / "world"
    for rel in ("repo/feature_repo", "repo/data/validated", "repo/.mlops/feast"):
        (world / rel).mkdir(parents=True)
    (world / "repo/data/validated/day.parquet").write_bytes(b"rows")
    (world / "repo/.mlops/feast/registry.db").write_bytes(b"registry")
    record = {
        "data": cfg.data.model_dump(mode="json"),
        "features": cfg.features.model_dump(mode="json"),
        "seed": cfg.project.seed,
    }
    (world / "sections.json").write_text(json.dumps(record))
    return world


def test_the_same_sections_get_a_copy(tmp_path: Path) -> None:
    world = _fake_world(tmp_path)
    cfg = load_config(
        model="fraud", config_dir=REPO / "configs", overrides=[ROWS_SET, "training.max_steps=60"], environ={}
    ).config  # training keys are not the data's
    copy_prepared_fraud_data(world, cfg, tmp_path / "mine")
    assert (tmp_path / "mine/data/validated/day.parquet").read_bytes() == b"rows"
    assert (tmp_path / "mine/.mlops/feast/registry.db").read_bytes() == b"registry"
    with pytest.raises(AssertionError, match="exists already"):
        copy_prepared_fraud_data(world, cfg, tmp_path / "mine")


@pytest.mark.parametrize(("sets", "named"), [(["data.rows=4000"], "data.rows"), (["project.seed=7"], "seed")])
def test_another_config_is_refused_naming_the_difference(tmp_path: Path, sets: list[str], named: str) -> None:
    world = _fake_world(tmp_path)
    cfg = load_config(model="fraud", config_dir=REPO / "configs", overrides=[ROWS_SET, *sets], environ={}).config
    with pytest.raises(AssertionError, match=named):
        copy_prepared_fraud_data(world, cfg, tmp_path / "mine")
    assert not (tmp_path / "mine").exists()
