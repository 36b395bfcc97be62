"""Reproducibility smoke for CI: a tiny FSDP run twice (same seed, same data) must export identical weights.

Runs ``mlops train run --model llm-tiny --no-track --json`` (a LLaMA-architecture LM on the standard
library's bytes, FSDP2 over 2 CPU processes: needs no prepared data) twice and compares the exported
weights' SHA-256. Exit 1 when they differ. Prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys

MLOPS = [sys.executable, "-m", "mlops_cli"]
TINY = ["--model", "llm-tiny", "--set", "training.max_steps=3", "--set", "training.nproc=2"]


def weights_hash() -> str:
    proc = subprocess.run([*MLOPS, "train", "run", "--no-track", "--json", *TINY], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"repro-smoke: `mlops train run` failed with exit code {proc.returncode}")
    return str(json.loads(proc.stdout)["weights_sha256"])


def main() -> int:
    first, second = weights_hash(), weights_hash()
    sys.stdout.write(json.dumps({"first": first, "second": second, "identical": first == second}) + "\n")
    return 0 if first == second else 1


if __name__ == "__main__":
    sys.exit(main())
