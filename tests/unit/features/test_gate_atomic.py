"""The validation gate's outputs are written atomically: a write that fails half-way (a full disk, made real with
``RLIMIT_FSIZE`` in a child process, right before the gate writes its report) leaves the previous report and
the quarantined batch copy whole, never a torn file under the name readers open."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    import mlops_features.gate as gate
    from mlops_config import DataConfig
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    root, limit = Path(sys.argv[1]), int(sys.argv[2])
    real_asdict = gate.asdict

    def asdict_then_fill_the_disk(result):  # the gate calls it on the report it is about to write
        out = real_asdict(result)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write() instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return out

    gate.asdict = asdict_then_fill_the_disk
    data = DataConfig(validated_dir="data/validated", quarantine_dir="data/quarantine")
    try:
        gate.validate_batches([root / "raw" / sys.argv[3]], data, root, contract=FRAUD_CONTRACT)
    except OSError as exc:
        print(f"failed mid-write: {exc}")
        sys.exit(3)
    """
)


def test_a_report_write_that_fails_half_way_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    from mlops_config import DataConfig
    from mlops_features.gate import validate_batches
    from mlops_features.sample import generate_transactions
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    [batch] = generate_transactions(tmp_path / "raw", rows=300, days=1, seed=3)
    data = DataConfig(validated_dir="data/validated", quarantine_dir="data/quarantine")
    validate_batches([batch], data, tmp_path, contract=FRAUD_CONTRACT)
    report = tmp_path / "data/quarantine" / f"{batch.stem}.report.json"
    before = report.read_bytes()
    assert json.loads(before)["input_rows"] == 300
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), "16", batch.name], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 3, f"the report write was expected to fail:\n{proc.stdout}\n{proc.stderr}"
    assert report.read_bytes() == before  # not 16 bytes of a new report
    visible = [p.name for p in (tmp_path / "data/quarantine").iterdir() if not p.name.startswith(".")]
    assert visible == [report.name]
