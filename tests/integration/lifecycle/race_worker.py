"""One racing process: walks its own version through the lifecycle (and sometimes rolls back), many times.

Run as a script by the concurrency tests: ``python race_worker.py URI ROOT VERSION ROUNDS BARRIER_DIR``; it
starts when the test releases every worker (``tests.support.barrier``).
Prints one JSON line: the ledger seqs this process wrote and the refusals it got.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from mlops_config import TrackingConfig
from mlops_core.lifecycle import LIFECYCLE, LifecycleError, promote, restore_champion

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root: tests.support
from tests.support.barrier import wait_for_go


def main(uri: str, root: str, version: str, rounds: int, barrier: Path) -> None:
    tracking = TrackingConfig(uri=uri, artifact_location=str(Path(root) / "artifacts"))
    rng = random.Random(int(version))
    written: list[int] = []
    refused: list[str] = []
    wait_for_go(barrier, version)  # every worker starts at the same instant, once all have imported
    for _ in range(rounds):
        for to in LIFECYCLE:
            try:
                entry = promote(tracking, Path(root), "fraud", version, to, reason=f"race {version}",
                                actor=f"worker-{version}", required_gates={}, lock_timeout_s=120)
                written.append(entry.seq)
            except LifecycleError as exc:
                refused.append(str(exc)[:60])
                break
        if rng.random() < 0.3:
            try:
                written.append(restore_champion(tracking, Path(root), "fraud", reason="race rollback",
                                        actor=f"worker-{version}", lock_timeout_s=120).seq)
            except LifecycleError as exc:
                refused.append(str(exc)[:60])
    print(json.dumps({"version": version, "written": written, "refused": len(refused)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
