"""The first steps of `mlops pipeline run`, for an end-to-end test whose proof ends before the rest.

``python -m tests.support.pipeline_steps --fast --until shadow`` in a repository runs the pipeline's own
steps (``mlops_pipeline.STEPS``, the same bodies, config loaded as the CLI loads it) up to and including the
named one and prints one JSON document shaped like ``mlops pipeline run --json``'s (without the report,
which needs every step). It exits 1 when a step failed. The steps after ``--until`` are asserted on the demo's
own run (tests/e2e/test_pipeline.py); this only saves running them twice.

``--serve ALIAS`` then serves that alias with `mlops serve` (transformer and predictor, as the demo's steps
start it) and sends ``--requests`` rows of the validated data; the document gains ``served``: the version, the
tallies of :func:`mlops_pipeline.local_server.send_traffic`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    from mlops_config import load_config
    from mlops_core import setup_logging
    from mlops_pipeline import STEPS
    from mlops_pipeline.context import PipelineContext
    from mlops_pipeline.runner import run_steps

    names = [s.name for s in STEPS]
    parser = argparse.ArgumentParser(prog="python -m tests.support.pipeline_steps")
    parser.add_argument("--until", required=True, choices=names, help="the last step to run")
    parser.add_argument("--fast", action="store_true", help="as `mlops pipeline run --fast`")
    parser.add_argument("--serve", metavar="ALIAS", help="after the steps, serve this alias and send it traffic")
    parser.add_argument("--requests", type=int, default=200, help="rows sent to the --serve alias")
    args = parser.parse_args(argv)
    setup_logging("WARNING")  # as the CLI's default
    steps = STEPS[: names.index(args.until) + 1]
    started = time.perf_counter()
    ctx = PipelineContext(loaded=load_config(), fast=args.fast)
    results = run_steps(steps, ctx)
    ok = all(s.status == "ok" for s in results)
    doc: dict[str, Any] = {
        "ok": ok, "seconds": round(time.perf_counter() - started, 2),
        "steps": [{"name": s.name, "title": s.title, "status": s.status, "seconds": round(s.seconds, 2),
                   "outputs": s.outputs, "error": s.error} for s in results]}
    if ok and args.serve:
        doc["served"] = served(ctx, args.serve, args.requests)
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    return 0 if ok else 1


def served(ctx: Any, alias: str, n: int) -> dict[str, Any]:
    """Serve ``alias`` (`mlops serve`, one process) and send it ``n`` rows of the validated data."""
    from mlops_core import aliases
    from mlops_pipeline.local_server import request_rows, run_server, send_traffic

    rows = request_rows(ctx.validated(), n, ctx.cfg.project.seed + 3, ctx.cfg.declared_contract("the test's traffic"))
    with run_server(ctx.root, ctx.model, ctx.work_dir / f"serve-{alias}.log", ["--alias", alias]) as server:
        traffic = send_traffic(server, rows)
    return {"alias": alias, "version": aliases(ctx.cfg.tracking, ctx.root, ctx.model)[alias], "traffic": traffic}


if __name__ == "__main__":
    sys.exit(main())
