"""CPU a process pays to import feast and define the repository's features, with typeguard's checks instrumented at
feast's import (eager, feast as installed) and on each method's first call (mlops_features.lazy_typecheck).

Each run is a fresh interpreter (``--runs`` of each, alternated, so load drifts alike on both); it imports feast
(lazy: ``mlops_features`` first), then loads ``feature_repo/`` the way ``feast apply`` does (every Entity,
FeatureView, FeatureService constructed: their checked ``__init__``\\s run) and reports its own user+system CPU
seconds (``resource.getrusage``), so other processes' load does not count. Baseline: eager, same run.

Prints one JSON object on its last line: medians, ``cpu_ratio`` (lazy / eager) and ``target_met`` (ratio <= 0.6).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import resource, sys
{head}import feast
from feast.repo_operations import parse_repo
repo = parse_repo(__import__("pathlib").Path({repo!r}))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(ru.ru_utime + ru.ru_stime, len(repo.feature_views) + len(repo.entities) + len(repo.feature_services))
"""


def one(lazy: bool) -> tuple[float, int]:
    code = SCRIPT.format(head="import mlops_features\n" if lazy else "", repo=str(REPO / "feature_repo"))
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO / "feature_repo", capture_output=True, text=True,
                         check=True)
    cpu, objects = res.stdout.split()[-2:]
    return float(cpu), int(objects)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="interpreters of each kind (default 5)")
    args = parser.parse_args()
    eager: list[float] = []
    lazy: list[float] = []
    objects = set()
    for _ in range(args.runs):
        for flag, out in ((False, eager), (True, lazy)):
            cpu, n = one(flag)
            out.append(cpu)
            objects.add(n)
    if len(objects) != 1:
        raise SystemExit(f"the two imports defined different repositories: {sorted(objects)} objects")
    ratio = statistics.median(lazy) / statistics.median(eager)
    print(json.dumps({"benchmark": "feast_import", "runs": args.runs, "objects_defined": objects.pop(),
                      "eager_cpu_s_median": round(statistics.median(eager), 3),
                      "lazy_cpu_s_median": round(statistics.median(lazy), 3),
                      "cpu_ratio": round(ratio, 3), "target_met": ratio <= 0.6}))


if __name__ == "__main__":
    main()
