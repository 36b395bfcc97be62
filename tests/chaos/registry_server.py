"""Registry moves against a real ``mlflow server`` on PostgreSQL, with the server's database or the server itself
restarted in the middle of the move.

A worker process promotes (v2 canary → champion) or rolls back (champion v2 → v1) through the server. Right
after its ``k``-th registry write (``k`` drawn from the seed, as in ``harness.registry_fault``) it pauses while
this process stops PostgreSQL (``pg_ctl stop -m immediate``: the database crashes) or SIGKILLs the
``mlflow server``, and goes on while the dependency is still down; the dependency comes back after a drawn
outage. The worker either rides the outage out (the MLflow client retries transient failures) or fails with an
error, and then the operator's retry of the same command finishes the move. Survived: exactly the intended
champion, no pending ledger entry, the ledger's replay equals the live aliases, both versions still registered.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from .harness import LOCK_TTL_S, REGISTRY_STEPS, kill_point, record
from .servers import OwnMlflow, OwnPostgres

WORKER = textwrap.dedent(
    """
    import functools, sys, time
    from pathlib import Path
    from mlflow.tracking import MlflowClient
    import mlops_core.lifecycle as lc
    from mlops_config import TrackingConfig
    from mlops_core.ledger import TAG_PREFIX
    from mlops_core.registry_lock import registry_lock

    root, url, model, op, pause_after, ttl = sys.argv[1:7]
    root, pause_after = Path(root), int(pause_after)
    lc.registry_lock = functools.partial(registry_lock, ttl_s=float(ttl))
    steps = 0

    def step(fn, counts):
        def wrapped(self, *args, **kwargs):
            global steps
            out = fn(self, *args, **kwargs)
            if counts(args):
                steps += 1
                print(f"step {steps}", flush=True)
                if steps == pause_after:  # the parent takes the dependency down, then lets us go on
                    while not (root / "down").exists():
                        time.sleep(0.01)
            return out
        return wrapped

    MlflowClient.set_registered_model_tag = step(MlflowClient.set_registered_model_tag,
                                                 lambda a: a[0] == model and str(a[1]).startswith(TAG_PREFIX))
    MlflowClient.set_registered_model_alias = step(MlflowClient.set_registered_model_alias, lambda a: a[0] == model)
    MlflowClient.delete_registered_model_alias = step(MlflowClient.delete_registered_model_alias,
                                                      lambda a: a[0] == model)
    tracking = TrackingConfig(uri=url, artifact_location=(root / "artifacts").as_uri())
    if op == "promote":
        lc.promote(tracking, root, model, "2", "champion", reason="chaos", actor="chaos", required_gates={})
    else:
        lc.restore_champion(tracking, root, model, reason="chaos", actor="chaos", replacing="2", to_version="1")
    print("done", flush=True)
    """
)


class RegistryBackend:
    """One private PostgreSQL cluster and one ``mlflow server`` on it, shared by the scenarios of a run (each
    scenario has a model of its own)."""

    def __init__(self, workdir: Path) -> None:
        self.pg = OwnPostgres()
        try:
            self.mlflow = OwnMlflow(self.pg, workdir / "mlflow-server", "mlflow_chaos")
            self.mlflow.start()
        except BaseException:
            self.pg.close()
            raise
        self.url = self.mlflow.url

    def close(self) -> None:
        self.mlflow.close()
        self.pg.close()


def _tracking(url: str, root: Path) -> Any:
    from mlops_config import TrackingConfig

    return TrackingConfig(uri=url, artifact_location=(root / "artifacts").as_uri())


def _seed(tracking: Any, root: Path, model: str, op: str) -> None:
    """v1 champion and v2 canary (promote), or v2 champion with v1 fallback (rollback), every move journalled."""
    from mlops_core import lifecycle as lc
    from mlops_core.tracking import mlflow_client

    client = mlflow_client(tracking, root)
    client.create_registered_model(model)
    experiment = client.create_experiment(f"{model}-runs")
    for _ in (1, 2):
        run = client.create_run(experiment)
        client.create_model_version(model, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    for to in ("candidate", "staging", "canary", "champion"):
        lc.promote(tracking, root, model, "1", to, reason="seed", actor="chaos", required_gates={})
    for to in ("candidate", "staging", "canary", *(("champion",) if op == "rollback" else ())):
        lc.promote(tracking, root, model, "2", to, reason="seed", actor="chaos", required_gates={})


def _retry(tracking: Any, root: Path, model: str, op: str) -> None:
    from mlops_core import lifecycle as lc

    try:
        if op == "promote":
            lc.promote(tracking, root, model, "2", "champion", reason="chaos retry", actor="chaos",
                       required_gates={})
        else:
            lc.restore_champion(tracking, root, model, reason="chaos retry", actor="chaos", replacing="2",
                                to_version="1")
    except lc.LifecycleError as exc:
        if "already is 'champion'" not in str(exc):
            raise


def _check(tracking: Any, root: Path, model: str, op: str) -> tuple[list[str], int]:
    """Problems with the registry's final state, and the number of versions lost."""
    from mlops_core.ledger import aliases_at, read_entries
    from mlops_core.tracking import mlflow_client

    client = mlflow_client(tracking, root)
    registered = client.get_registered_model(model)
    live = {a: str(v) for a, v in registered.aliases.items()}
    entries = read_entries(registered.tags)
    versions = {str(v.version) for v in client.search_model_versions(f"name = '{model}'")}
    want = {"champion": "2", "fallback": "1"} if op == "promote" else {"champion": "1"}
    problems = []
    if {a: live.get(a) for a in ("champion", "fallback")} != {a: want.get(a) for a in ("champion", "fallback")}:
        problems.append(f"aliases {live}, expected {want}")
    if any(e.status != "applied" for e in entries):
        problems.append("a ledger entry is still pending")
    if aliases_at(entries, None) != live:
        problems.append(f"ledger replay {aliases_at(entries, None)} != live {live}")
    return problems, len({"1", "2"} - versions)


def restart_fault(backend: RegistryBackend, dependency: str, op: str, seed: int, workdir: Path) -> dict[str, Any]:
    """Restart ``dependency`` (``postgres`` or ``mlflow``) after a drawn registry write of ``op``; see the
    module's docstring for what survives."""
    rng = random.Random(f"{dependency}-{op}-{seed}")
    pause_after = kill_point(f"server-{op}", seed, REGISTRY_STEPS[op])
    outage_s = rng.uniform(0.5, 2.0)
    model = f"fraud-{dependency}-{op}-{seed}"
    root = workdir / f"registry-server-{dependency}-{op}-{seed}"
    root.mkdir(parents=True)
    tracking = _tracking(backend.url, root)
    _seed(tracking, root, model, op)
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "6", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(root), backend.url, model, op, str(pause_after), str(LOCK_TTL_S)],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    injected = False
    for line in worker.stdout:
        if line.strip() == f"step {pause_after}":
            injected = True
            break
    t0 = time.monotonic()
    if injected:
        if dependency == "postgres":
            backend.pg.stop("immediate")
        else:
            backend.mlflow.kill()
        (root / "down").touch()
        time.sleep(outage_s)
        if dependency == "postgres":
            backend.pg.start()
        else:
            backend.mlflow.start()
    try:
        out, err = worker.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        worker.kill()
        out, err = worker.communicate()
    rode_out = worker.returncode == 0 and "done" in out
    if not rode_out:
        _retry(tracking, root, model, op)  # the operator runs the same command again
    recovery_s = time.monotonic() - t0
    problems, lost = _check(tracking, root, model, op)
    how = "the move rode the outage out" if rode_out else (
        f"the move failed ({(err.strip().splitlines() or ['?'])[-1][:160]}), the retry finished it")
    return record(f"{dependency}_restart_{op}", injected=injected, survived=not problems and not lost,
                  lost_versions=lost, recovery_s=recovery_s,
                  detail=f"{dependency} down {outage_s:.1f} s after write {pause_after}/{REGISTRY_STEPS[op]}; {how}; "
                         + "; ".join(problems))


SCENARIOS = (("postgres", "promote"), ("postgres", "rollback"), ("mlflow", "promote"), ("mlflow", "rollback"))


def run_server_faults(seeds: list[int], workdir: Path,
                      scenarios: tuple[tuple[str, str], ...] = SCENARIOS) -> list[dict[str, Any]]:
    """Every (dependency, move) scenario for every seed, on one private PostgreSQL + ``mlflow server``."""
    backend = RegistryBackend(workdir)
    try:
        return [restart_fault(backend, dep, op, seed, workdir) for seed in seeds for dep, op in scenarios]
    finally:
        backend.close()
