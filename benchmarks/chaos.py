"""Chaos benchmark: every fault scenario of tests/chaos/harness.py over several seeds, real processes throughout.

Faults: SIGKILL of a promotion and of a rollback after each registry write (MLflow on SQLite), of the validation
gate and of the prediction-log writer in the middle of a file write, of the online store (a redis-server of its
own) under serving load, of a training rank / the launcher / its process group (``--training``), and serving
overload (512 clients against a server whose capacity is measured first). Seeds pick the kill points.

Prints one JSON line: ``{"faults": [{"fault", "injected", "survived", "lost_rows", "lost_versions",
"recovery_s"}], "lost_total"}`` (``injected``/``survived``: counts over the seeds; ``recovery_s``: the worst).
Target: every injected fault survived, ``lost_total`` 0. Details per run go to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _harness() -> object:
    spec = importlib.util.spec_from_file_location("chaos_harness", REPO / "tests/chaos/harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos_harness"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per scenario (kill points drawn from each)")
    parser.add_argument("--overload-s", type=float, default=20.0, help="seconds of overload (half each mode)")
    parser.add_argument("--training", action="store_true", help="also the training faults (minutes per seed)")
    parser.add_argument("--training-seeds", type=int, default=1, help="seeds for the training faults (3 kills each)")
    args = parser.parse_args()
    h: object = _harness()
    seeds = list(range(1, args.seeds + 1))
    with tempfile.TemporaryDirectory(prefix="mlops-chaos-") as tmp:
        work = Path(tmp)
        records = h.run_all(seeds, work)  # type: ignore[attr-defined]
        records.append(h.overload_fault(1, work, seconds=args.overload_s))  # type: ignore[attr-defined]
        if args.training:
            records += h.run_training(list(range(1, args.training_seeds + 1)), work)  # type: ignore[attr-defined]
    for r in records:
        sys.stderr.write(json.dumps(r) + "\n")
    out = h.summary(records)  # type: ignore[attr-defined]
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
