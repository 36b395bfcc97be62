"""tools/check_dvc_lock.py: the committed dvc.lock is what the stages write from the committed code.

The committed repository must pass; a copy of the pipeline's committed inputs (dvc.yaml, dvc.lock, configs/, the
code the stages depend on) passes too, and each way a lock goes stale, made in that copy, fails naming the stage
and the record. The expected md5 of an edited file comes from hashlib, not from DVC.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "check_dvc_lock.py"
# What the root dvc.yaml's stages read from the checkout (their source deps and the config stage's input).
INPUTS = ["dvc.yaml", "dvc.lock", ".dvcignore", ".dvc/config", "configs", "feature_repo",
          "packages/features/src/mlops_features", "packages/training/src/mlops_training",
          "packages/model/src/mlops_model"]
# The lock committed before the check existed: two stages, and a resolved config an older schema wrote.
STALE_LOCK_COMMIT = "f79940d"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dvc_lock", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building the class
    spec.loader.exec_module(module)
    return module


tool = _tool()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of what the pipeline's stages read, as a clean clone has it (a git repo, no data/)."""
    for rel in INPUTS:
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def _stale(root: Path) -> list[str]:
    return tool.check(root).stale


def test_the_committed_lock_is_current_and_the_checked_records_are_named() -> None:
    report = tool.check(ROOT)
    assert report.stale == []
    # It did check: every source dep of every stage, each param, and the resolved config's md5 and size.
    assert "config: out data/resolved/fraud.json" in " ".join(report.ok)
    for dep in ("generate: dep packages/features/src/mlops_features/sample.py", "features: dep feature_repo",
                "train: dep packages/training/src/mlops_training", "train: param config.training"):
        assert dep in report.ok
    # And says what it could not: the data and the run-specific train output.
    assert "train: out reports/train.json (made by running the stage)" in report.unchecked
    assert any(u.startswith("validate: dep data/raw") for u in report.unchecked)


def test_a_copy_of_the_committed_inputs_passes(project: Path) -> None:
    assert _stale(project) == []
    assert tool.main(["--root", str(project)]) == 0


def test_the_lock_committed_before_this_check_is_stale(project: Path) -> None:
    old = subprocess.run(["git", "show", f"{STALE_LOCK_COMMIT}:dvc.lock"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    (project / "dvc.lock").write_text(old)
    stale = _stale(project)
    for stage in ("validate", "features", "train"):
        assert f"{stage}: in dvc.yaml, no record in dvc.lock" in stale
    assert any(s.startswith("config: out data/resolved/fraud.json") and "081488fd4a9f4a62da5f5ce546b866c4" in s
               for s in stale), stale
    assert tool.main(["--root", str(project)]) == 1


def test_a_changed_source_dep_is_stale_with_its_new_md5(project: Path) -> None:
    gate = project / "packages/features/src/mlops_features/gate.py"
    gate.write_text(gate.read_text() + "# one more line\n")
    stale = _stale(project)
    assert len(stale) == 1 and stale[0].startswith("validate: dep packages/features/src/mlops_features/gate.py")
    assert hashlib.md5(gate.read_bytes()).hexdigest() not in stale[0]  # it names the lock's md5 …
    locked = yaml.safe_load((project / "dvc.lock").read_text())["stages"]["validate"]["deps"]
    assert next(d["md5"] for d in locked if d["path"].endswith("gate.py")) in stale[0]  # … which is the old one


def test_a_changed_config_value_is_stale_in_the_param_and_the_resolved_config(project: Path) -> None:
    fraud = project / "configs/models/fraud.yaml"
    fraud.write_text(fraud.read_text().replace("max_steps: 600", "max_steps: 601", 1))
    stale = _stale(project)
    assert any(s.startswith("train: param config.training is") for s in stale), stale
    assert any(s.startswith("config: out data/resolved/fraud.json is md5") for s in stale), stale
    assert not any(s.startswith(("generate:", "validate:", "features:")) for s in stale), stale


def test_an_edited_lock_record_is_stale(project: Path) -> None:
    lock = project / "dvc.lock"
    doc = yaml.safe_load(lock.read_text())
    doc["stages"]["generate"]["cmd"] = ".venv/bin/mlops data generate --rows 5"
    doc["stages"]["generate"]["params"]["data/resolved/fraud.json"]["config.data.rows"] = 59999
    doc["stages"]["removed"] = {"cmd": "true"}
    lock.write_text(yaml.safe_dump(doc, sort_keys=False))
    stale = _stale(project)
    assert "generate: param config.data.rows is 60000, the lock has 59999" in stale
    assert any(s.startswith("generate: cmd is '.venv/bin/mlops data generate'") for s in stale), stale
    assert "removed: recorded in dvc.lock, no such stage in dvc.yaml" in stale


def test_bytecode_and_env_overrides_do_not_make_the_lock_stale(project: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Python writes __pycache__ into the code folders the stages depend on (feature_repo, mlops_training):
    the lock must not depend on it. And the check is about the committed config, not this shell's."""
    for folder in ("feature_repo", "packages/training/src/mlops_training"):
        cache = project / folder / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "x.cpython-311.pyc").write_bytes(b"\x00 bytecode with an mtime in it")
    monkeypatch.setenv("MLOPS__TRAINING__MAX_STEPS", "7")
    assert _stale(project) == []


def test_a_folder_that_is_no_dvc_project_is_refused_by_name(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "--root", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"--root {tmp_path}: no dvc.yaml there" in proc.stderr


def test_the_validate_stages_reports_are_the_same_bytes_from_any_checkout(tmp_path: Path) -> None:
    """The gate's reports are DVC outputs (data/quarantine) the lock records: a clone elsewhere must write the same
    bytes, so their paths are relative to the checkout (they were absolute: another md5 in every other folder)."""
    from mlops_config import DataConfig
    from mlops_features import validate_batches
    from mlops_features.sample import generate_transactions
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    data = DataConfig(validated_dir="data/validated", quarantine_dir="data/quarantine")
    written = []
    for root in (tmp_path / "a", tmp_path / "checkout-somewhere-else"):
        [batch] = generate_transactions(root / "raw", rows=300, days=1, seed=3)
        result = validate_batches([batch], data, root, contract=FRAUD_CONTRACT).batches[0]
        assert result.validated_path == str(root / "data/validated" / f"{batch.stem}.parquet")  # callers: full
        report = root / "data/quarantine" / f"{batch.stem}.report.json"
        written.append(report.read_bytes())
    assert written[0] == written[1]
    doc = yaml.safe_load(written[0])
    assert doc["validated_path"] == f"data/validated/{batch.stem}.parquet"
    assert doc["report_path"] == f"data/quarantine/{batch.stem}.report.json"
