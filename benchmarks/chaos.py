"""Chaos benchmark: every fault scenario of tests/chaos/ over several seeds, real processes and servers throughout.

Faults: SIGKILL of a promotion and of a rollback after each registry write (MLflow on SQLite); PostgreSQL crashed
and ``mlflow server`` SIGKILLed in the middle of a promotion and of a rollback through a real server on PostgreSQL
(``--server-seeds``); SIGKILL of the validation gate and of the prediction-log writer in the middle of a file
write, of the ingestion (validate, ``dvc add``, ``dvc push``, publish) and of the Feast materialization; the
online store (a redis-server of its own) killed under serving load; a training rank / the launcher / its process
group (``--training``); and serving overload (512 clients against a server whose capacity is measured first).
Seeds pick the kill points.

Prints one JSON line: ``{"faults": [{"fault", "injected", "survived", "lost_rows", "lost_versions",
"recovery_s"}], "lost_total"}`` (``injected``/``survived``: counts over the seeds; ``recovery_s``: the worst).
Target: every injected fault survived, ``lost_total`` 0. Details per run go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GROUPS = ("promote", "rollback", "validation", "prediction_log", "redis", "ingestion", "materialization",
          "server", "overload", "training")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per scenario (kill points drawn from each)")
    parser.add_argument("--server-seeds", type=int, default=1,
                        help="seeds for the PostgreSQL / mlflow server restarts (4 scenarios each, minutes)")
    parser.add_argument("--overload-s", type=float, default=20.0, help="seconds of overload (half each mode)")
    parser.add_argument("--training", action="store_true", help="also the training faults (minutes per seed)")
    parser.add_argument("--training-seeds", type=int, default=1, help="seeds for the training faults (3 kills each)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(GROUPS)}")
    args = parser.parse_args()
    only = {g.strip() for g in args.only.split(",") if g.strip()} or set(GROUPS) - {"training"}
    if args.training:
        only.add("training")
    unknown = only - set(GROUPS)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; expected some of {', '.join(GROUPS)}")
    from tests.chaos import data_faults, harness, registry_server

    seeds = list(range(1, args.seeds + 1))
    records = []
    with tempfile.TemporaryDirectory(prefix="mlops-chaos-") as tmp:
        work = Path(tmp)
        records += harness.run_all(seeds, work, only=only & {"promote", "rollback", "validation", "prediction_log",
                                                             "redis"})
        for seed in seeds:
            if "ingestion" in only:
                records.append(data_faults.ingest_fault(seed, work))
            if "materialization" in only:
                records.append(data_faults.materialize_fault(seed, work))
        if "server" in only:
            records += registry_server.run_server_faults(list(range(1, args.server_seeds + 1)), work)
        if "overload" in only:
            records.append(harness.overload_fault(1, work, seconds=args.overload_s))
        if "training" in only:
            records += harness.run_training(list(range(1, args.training_seeds + 1)), work)
    for r in records:
        sys.stderr.write(json.dumps(r) + "\n")
    print(json.dumps(harness.summary(records), separators=(",", ":")))


if __name__ == "__main__":
    main()
