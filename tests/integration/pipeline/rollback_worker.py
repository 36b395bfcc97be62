"""One monitor's rollback in a process of its own (for the two-monitors race in test_rollback.py).

Usage: rollback_worker.py ROOT REMOTE BARRIER_DIR OUT_JSON — waits until the test releases both workers
(``tests.support.barrier``) so they start together, carries out the rollback v2 -> v1 and writes its outcome (or
error) as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlops_config import DeliveryConfig, TrackingConfig
from mlops_monitoring import RollbackDecision
from mlops_pipeline import roll_back_to_fallback

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root: tests.support
from tests.support.barrier import wait_for_go


def main() -> None:
    root, remote, barrier, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    delivery = DeliveryConfig(gitops_repo=remote, git_branch="main")
    tracking = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts")
    decision = RollbackDecision("fraud", "2", "1", "drift monitor CRITICAL: amount PSI 0.9", "CRITICAL")
    wait_for_go(barrier, out.stem)
    try:
        done = roll_back_to_fallback(decision, delivery, tracking, root)
        out.write_text(json.dumps({"ok": True, **done.to_dict()}))
    except Exception as exc:  # reported to the test, which fails on it
        out.write_text(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    main()
