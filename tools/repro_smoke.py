"""Reproducibility smoke for CI: a tiny FSDP run twice (same seed, same data) must export identical weights.

Runs ``mlops train run --no-track --json`` twice, each with its own state folder, and compares the
exported weights' SHA-256. Exit 1 with both hashes when they differ.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

MLOPS = [sys.executable, "-m", "mlops_cli"]
TINY = ["--set", "training.max_steps=5", "--set", "training.nproc=2"]


def weights_hash(state_dir: Path) -> str:
    proc = subprocess.run([*MLOPS, "train", "run", "--no-track", "--json", *TINY,
                           "--set", f"project.state_dir={state_dir}"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"repro-smoke: `mlops train run` failed with exit code {proc.returncode}")
    return str(json.loads(proc.stdout)["weights_sha256"])


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="repro-smoke-") as tmp:
        first, second = weights_hash(Path(tmp) / "a"), weights_hash(Path(tmp) / "b")
    sys.stdout.write(json.dumps({"first": first, "second": second, "identical": first == second}) + "\n")
    return 0 if first == second else 1


if __name__ == "__main__":
    sys.exit(main())
