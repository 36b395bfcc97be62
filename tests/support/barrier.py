"""Start racing worker processes together once every one has imported, not at a guessed wall-clock instant.

A fixed head start ("start at now + 6 s") is a bet on how long interpreter start-up and imports take; on a loaded
2-core runner they took longer, the workers ran one after another, and a race test saw no race. Here each worker
says it is ready (:func:`wait_for_go` writes ``ready-NAME`` in the barrier folder, then waits for ``go``) and the
test releases them all when the last one is ready (:func:`release_when_ready`).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

WAIT_S = 300.0


def wait_for_go(barrier: Path, name: str) -> None:
    """In a worker: announce readiness, then block until the test writes ``go`` (exits after ``WAIT_S``)."""
    (barrier / f"ready-{name}").write_text("")
    deadline = time.monotonic() + WAIT_S
    while not (barrier / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"worker {name}: no go in {barrier} after {WAIT_S:.0f} s")
        time.sleep(0.002)


def release_when_ready(barrier: Path, procs: Sequence[subprocess.Popen]) -> None:
    """In the test: wait until every worker wrote its ``ready-*`` file, then write ``go``."""
    deadline = time.monotonic() + WAIT_S
    while len(list(barrier.glob("ready-*"))) < len(procs):
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"a worker exited before the race started: {dead}"
        assert time.monotonic() < deadline, f"only {len(list(barrier.glob('ready-*')))} of {len(procs)} ready"
        time.sleep(0.01)
    (barrier / "go").write_text("")
