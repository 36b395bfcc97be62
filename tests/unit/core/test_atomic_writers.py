"""Every writer a reader trusts, failed mid-write for real: the previous file stays, nothing torn appears.

The fault is a full disk, made real with ``RLIMIT_FSIZE`` in a child process: the kernel lets the writer
write up to the limit and then fails its next ``write`` with ``EFBIG``, in the middle of the serializer
(pyarrow, safetensors, a plain text write). A writer that writes in place leaves a truncated file under
the final name; an atomic one leaves the previous version.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_CHILD = """
import resource, signal, sys
{setup}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write() instead of a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
{action}
except Exception as exc:
    print(f"failed mid-write: {{type(exc).__name__}}: {{exc}}")
    sys.exit(3)
sys.exit(0)
"""


def run_with_disk_limit(setup: str, action: str, limit: int, cwd: Path) -> str:
    """Run ``setup`` then ``action`` in a child whose files may not grow past ``limit`` bytes."""
    code = _CHILD.format(setup=textwrap.dedent(setup), limit=limit,
                         action=textwrap.indent(textwrap.dedent(action), "    "))
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, f"the write was expected to fail mid-way:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def no_temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_exported_model_survives_a_failed_re_export(tmp_path: Path) -> None:
    import torch

    from mlops_model import load_exported, save_exported

    folder = tmp_path / "model"
    old = {"w": torch.arange(16, dtype=torch.float32)}
    meta = {"kind": "tabular_mlp", "architecture": {"input_dim": 4, "hidden_sizes": [2]}}
    save_exported(folder, old, meta)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    out = run_with_disk_limit(
        f"""
        import torch
        from mlops_model import save_exported
        state = {{"w": torch.ones(20_000)}}  # 80 kB of weights fit under the limit,
        meta = {{**{meta!r}, "lineage": {{"notes": "x" * 300_000}}}}  # 300 kB of model.json do not
        """,
        f"save_exported({str(folder)!r}, state, meta)", limit=150_000, cwd=tmp_path)
    assert "failed mid-write" in out
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    tensors, _ = load_exported(folder)  # weights still match their meta's hash
    assert torch.equal(tensors["w"], old["w"])
    assert no_temporaries(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_evaluation_report_survives_a_failed_rewrite(tmp_path: Path) -> None:
    from mlops_evaluation import EvaluationReport, GateResult
    from mlops_evaluation.report import write_report

    report = EvaluationReport(model="fraud", registered_model="fraud", candidate={"version": "3", "run_id": None},
                              champion=None, holdout={"rows": 1}, gates=[GateResult("g", True, "ok", {})],
                              created="2026-11-30T00:00:00+00:00")
    paths = write_report(report, tmp_path / "reports")
    before = Path(paths["json"]).read_bytes()
    out = run_with_disk_limit(
        """
        from mlops_evaluation import EvaluationReport, GateResult
        from mlops_evaluation.report import write_report
        big = {f"k{i}": "x" * 100 for i in range(2000)}  # ~220 kB of evidence against a 50 kB limit
        report = EvaluationReport(model="fraud", registered_model="fraud", candidate={"version": "4"},
                                  champion=None, holdout={"rows": 1}, gates=[GateResult("g", False, "no", big)],
                                  created="2026-11-30T01:00:00+00:00")
        """,
        f"write_report(report, __import__('pathlib').Path({str(tmp_path / 'reports')!r}))", limit=50_000,
        cwd=tmp_path)
    assert "failed mid-write" in out
    assert Path(paths["json"]).read_bytes() == before
    assert json.loads(before)["candidate"]["version"] == "3"
    assert no_temporaries(tmp_path / "reports") == []


def test_gitops_manifest_edit_survives_a_failed_write(tmp_path: Path, repo_root: Path) -> None:
    shutil.copytree(repo_root / "infra", tmp_path / "infra")
    manifest = tmp_path / "infra" / "overlays" / "staging" / "model-fraud.yaml"
    before = manifest.read_bytes()
    out = run_with_disk_limit(
        f"""
        from pathlib import Path
        from mlops_config import DeliveryConfig
        from mlops_delivery import plan_promotion
        from mlops_delivery.promotion import apply_change
        cfg, root = DeliveryConfig(), Path({str(tmp_path)!r})
        change = plan_promotion(cfg, root, "fraud", 7, "staging")
        assert change.changed
        """,
        "apply_change(change, cfg, root)", limit=len(before) // 2, cwd=tmp_path)
    assert "failed mid-write" in out
    assert manifest.read_bytes() == before
    assert no_temporaries(manifest.parent) == []


def test_generated_sample_batch_survives_a_failed_regeneration(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from mlops_features.sample import generate_transactions

    out_dir = tmp_path / "raw"
    [path] = generate_transactions(out_dir, rows=3000, days=1, seed=1)
    before = path.read_bytes()
    out = run_with_disk_limit(
        "from mlops_features.sample import generate_transactions",
        f"generate_transactions({str(out_dir)!r}, rows=20000, days=1, seed=2)", limit=len(before) // 2,
        cwd=tmp_path)
    assert "failed mid-write" in out
    assert path.read_bytes() == before and pq.read_table(path).num_rows == 3000
    assert sorted(p.name for p in out_dir.iterdir()) == [path.name]


@pytest.mark.parametrize("limit", [0])
def test_the_fault_is_real_a_plain_write_is_torn(tmp_path: Path, limit: int) -> None:
    # The injected fault does what the tests above rely on: an in-place write leaves a torn file.
    target = tmp_path / "plain.txt"
    target.write_text("previous")
    run_with_disk_limit("from pathlib import Path", f"Path({str(target)!r}).write_text('new' * 1000)", limit=limit,
                        cwd=tmp_path)
    assert target.read_text() == ""
