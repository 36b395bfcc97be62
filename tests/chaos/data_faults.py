"""Data-path faults: the ingestion (``mlops data ingest``: validate, ``dvc add``, ``dvc push``, publish the pointer)
and the Feast materialization SIGKILLed at a point drawn from a seed, then run again.

Ingestion: a first ingestion publishes version A; more batches land (some rows broken); the second ingestion's
process group (the worker and its ``dvc`` children, as a pod killed) is SIGKILLed in the middle of one of its four
steps. Survived: right after the kill, the published ``latest`` pointer pulls whole into a fresh workspace (the
training runner's view: A or a complete new version, never a torn one); the rerun in the same workspace succeeds;
and the version it publishes, pulled fresh, holds every accepted row, so that accepted + quarantined = input.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.support import sample_as_of

from .harness import REPO, record

INGEST_STEPS = ("validate", "dvc_add", "dvc_push", "publish")

INGEST_WORKER = textwrap.dedent(
    """
    import os, random, signal, subprocess, sys, time
    from pathlib import Path
    import fsspec.implementations.local as local
    import pyarrow.parquet as pq
    import mlops_features.landing as landing
    from mlops_config import DataConfig
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    root, landing_dir, remote, point, seed = sys.argv[1:6]
    rng = random.Random(int(seed))

    def die():
        print("killing", flush=True)
        os.killpg(0, signal.SIGKILL)  # the whole pod: this process and its dvc children

    if point == "validate":  # in the middle of the gate's first parquet write, half of the file on disk
        original = pq.write_table
        def dying_write(table, where, *args, **kwargs):
            original(table, where, *args, **kwargs)
            with open(where, "r+b") as f:
                f.truncate(os.path.getsize(where) // 2)
            die()
        pq.write_table = dying_write
    elif point in ("dvc_add", "dvc_push"):  # while dvc runs: a drawn moment into the command
        run_dvc, command = landing.run_dvc, point.split("_")[1]
        def dying_dvc(where, *args, **kwargs):
            if args[0] != command:
                return run_dvc(where, *args, **kwargs)
            proc = subprocess.Popen([landing._dvc_bin(), *args], cwd=where, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
            try:
                proc.wait(rng.uniform(0.2, 2.5))
            except subprocess.TimeoutExpired:
                pass
            die()
        landing.run_dvc = dying_dvc
    else:  # publish: the md5-named pointer is written, latest.dvc not yet
        pipe = local.LocalFileSystem.pipe_file
        def dying_pipe(self, path, *args, **kwargs):
            if str(path).endswith("latest.dvc"):
                die()
            return pipe(self, path, *args, **kwargs)
        local.LocalFileSystem.pipe_file = dying_pipe
    data = DataConfig(raw_dir="data/landed", validated_dir="data/accepted", quarantine_dir="data/quarantine",
                      landing_uri=Path(landing_dir).as_uri(), dvc_remote=remote)
    landing.ingest_landed(data, root, contract=FRAUD_CONTRACT)
    print("done", flush=True)
    """
)


def _config(workdir: Path) -> Any:
    from mlops_config import DataConfig

    return DataConfig(raw_dir="data/landed", validated_dir="data/accepted", quarantine_dir="data/quarantine",
                      landing_uri=(workdir / "landing").as_uri(), dvc_remote=str(workdir / "dvc-remote"))


def _land(workdir: Path, seed: int) -> tuple[list[Path], list[Path], int]:
    """Two batches for the first ingestion, two more (a few rows broken) for the one killed; total input rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlops_features import generate_transactions

    days = generate_transactions(workdir / "gen", rows=800, days=4, seed=seed, users=60, merchants=20)
    rng = random.Random(seed)
    table = pq.read_table(days[3])
    amounts = table.column("amount").to_pylist()
    for i in rng.sample(range(len(amounts)), 7):
        amounts[i] = -1.0
    table = table.set_column(table.schema.get_field_index("amount"), "amount",
                             pa.array(amounts, table.schema.field("amount").type))
    pq.write_table(table, days[3])
    return days[:2], days[2:], sum(pq.read_metadata(p).num_rows for p in days)


def _pulled_rows(data: Any, workdir: Path, name: str) -> tuple[int, str]:
    """Rows of the published ``latest`` version, pulled into a fresh workspace (every file opened whole)."""
    import pyarrow.parquet as pq

    from mlops_features.landing import pull_accepted

    runner = workdir / name
    runner.mkdir()
    md5 = pull_accepted(data, runner)
    return sum(pq.read_table(p).num_rows for p in (runner / data.validated_dir).glob("*.parquet")), md5


def ingest_fault(seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL the second ingestion's process group in a drawn step, then rerun it; see the module docstring."""
    import pyarrow.parquet as pq

    from mlops_features.landing import ingest_landed
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    point = INGEST_STEPS[(seed - 1) % len(INGEST_STEPS)]  # seeds 1..4 take every step once
    work = workdir / f"ingest-{seed}"
    (work / "landing").mkdir(parents=True)
    first, later, expected = _land(work, seed)
    data = _config(work)
    pod = work / "pod"
    pod.mkdir()
    for p in first:
        shutil.copy(p, work / "landing" / p.name)
    version_a = ingest_landed(data, pod, contract=FRAUD_CONTRACT).data_md5
    for p in later:
        shutil.copy(p, work / "landing" / p.name)
    proc = subprocess.run([sys.executable, "-c", INGEST_WORKER, str(pod), str(work / "landing"),
                           str(work / "dvc-remote"), point, str(seed)],
                          capture_output=True, text=True, timeout=900, start_new_session=True)
    killed = proc.returncode == -signal.SIGKILL and "killing" in proc.stdout
    t0 = time.monotonic()
    problems = []
    try:  # what a training run would see right now
        _, md5 = _pulled_rows(data, work, "runner-after-kill")
        if md5 != version_a and point != "publish":
            problems.append(f"latest moved to {md5} although the kill came before the publication")
    except Exception as exc:  # a torn or unpushed published version is the failure looked for
        problems.append(f"the published version does not pull whole after the kill: {exc}")
    try:
        ingest_landed(data, pod, contract=FRAUD_CONTRACT)
    except Exception as exc:
        problems.append(f"the rerun failed: {exc}")
    accepted, md5 = _pulled_rows(data, work, "runner-after-rerun")
    quarantined = sum(pq.read_metadata(p).num_rows for p in (pod / data.quarantine_dir).glob("*.rows.parquet"))
    lost = expected - (accepted + quarantined)
    if lost:
        problems.append(f"accepted {accepted} + quarantined {quarantined} != input {expected}")
    return record("sigkill_ingestion", injected=killed, survived=not problems, lost_rows=abs(lost),
                  recovery_s=time.monotonic() - t0, detail=f"killed in {point}; " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------- materialization
# The worker materializes; it is SIGKILLed after its first online-store write batch, or in the middle of its
# first or second registry write (half of the file being written on disk when it dies: the registry itself
# with a writer in place, its temporary sibling with an atomic one).
MATERIALIZE_POINTS = ("registry_write_1", "online_write", "registry_write_2")

MATERIALIZE_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import datetime
    from pathlib import Path
    from feast.infra.online_stores.sqlite import SqliteOnlineStore
    from mlops_config import FeaturesConfig
    from mlops_features import materialize

    root, project, point, end = Path(sys.argv[1]), sys.argv[2], sys.argv[3], datetime.fromisoformat(sys.argv[4])
    if point == "online_write":
        write = SqliteOnlineStore.online_write_batch
        def dying_write(self, *args, **kwargs):
            write(self, *args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        SqliteOnlineStore.online_write_batch = dying_write
    else:
        fsync, target, seen = os.fsync, int(point.rsplit("_", 1)[1]), 0
        def dying_fsync(fd):
            global seen
            where = os.readlink(f"/proc/self/fd/{fd}")
            if "registry.db" in os.path.basename(where):
                seen += 1
                if seen == target:
                    os.truncate(where, os.path.getsize(where) // 2)
                    os.kill(os.getpid(), signal.SIGKILL)
            return fsync(fd)
        os.fsync = dying_fsync
    materialize(FeaturesConfig(feature_service="fraud_v1", feast_project=project), root, incremental=True, end=end)
    print("done", flush=True)
    """
)


def _feature_root(workdir: Path, seed: int) -> tuple[Path, Any, Any]:
    """A repository folder with validated transactions ingested and the Feast repo applied (not materialized)."""
    from mlops_config import DataConfig, FeaturesConfig
    from mlops_features import apply_repo, generate_transactions, ingest, validate_batches
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    root = workdir / f"materialize-{seed}"
    shutil.copytree(REPO / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    data = DataConfig()
    features = FeaturesConfig(feature_service="fraud_v1",
                              feast_project=f"chaos_{seed}", online_ttl_as_of=sample_as_of())
    raw = generate_transactions(root / data.raw_dir, rows=600, days=2, seed=seed, users=40, merchants=15)
    validate_batches(raw, data, root, contract=FRAUD_CONTRACT)
    ingest(root / data.validated_dir, root / features.source_dir, record_id=FRAUD_CONTRACT.record_id)
    apply_repo(features, root)
    return root, features, data


def _online_values(features: Any, root: Path, rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    from mlops_features import OnlineFeatures
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    return OnlineFeatures(features, root, contract=FRAUD_CONTRACT).get(rows)


def materialize_fault(seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL a materialization at a drawn point, then run it again.

    Survived: right after the kill the store still opens and answers (its registry parses and lists both
    views: what a serving process refreshing its registry sees); after the rerun the online values of every
    user and merchant equal those of an uninterrupted materialization of a copy of the same repository.
    """
    import pandas as pd

    point = MATERIALIZE_POINTS[(seed - 1) % len(MATERIALIZE_POINTS)]  # seeds 1..3 take every point once
    root, features, _ = _feature_root(workdir, seed)
    reference = root.with_name(root.name + "-reference")
    shutil.copytree(root, reference, symlinks=True)
    tx = pd.read_parquet(root / features.source_dir / "transactions.parquet")
    end = (pd.Timestamp(tx["event_timestamp"].max()).tz_convert("UTC") + pd.Timedelta(hours=1)).to_pydatetime()
    rows = [{"user_id": u, "merchant_id": m} for u, m in
            zip(sorted(tx["user_id"].unique()), sorted(tx["merchant_id"].unique()) * 10, strict=False)]
    proc = subprocess.run([sys.executable, "-c", MATERIALIZE_WORKER, str(root), features.feast_project, point,
                           end.isoformat()], capture_output=True, text=True, timeout=900)
    killed = proc.returncode == -signal.SIGKILL
    t0 = time.monotonic()
    problems = []
    try:  # a reader right after the kill: a server's registry refresh, the next CLI call
        _online_values(features, root, rows[:3])
    except Exception as exc:
        problems.append(f"the store is unusable after the kill: {type(exc).__name__}: {str(exc)[:200]}")
    from mlops_features import materialize

    try:
        materialize(features, root, incremental=True, end=end)
    except Exception as exc:
        problems.append(f"the rerun failed: {type(exc).__name__}: {str(exc)[:200]}")
    recovery_s = time.monotonic() - t0
    materialize(features, reference, incremental=True, end=end)
    want = _online_values(features, reference, rows)
    try:
        got = _online_values(features, root, rows)
    except Exception as exc:
        got = []
        problems.append(f"the store is unusable after the rerun: {type(exc).__name__}")
    lost = sum(1 for a, b in zip(want, got, strict=False) if a != b) + max(0, len(want) - len(got))
    if lost:
        problems.append(f"{lost} of {len(want)} entity rows differ from the uninterrupted materialization")
    return record("sigkill_materialization", injected=killed, survived=not problems, lost_rows=lost,
                  recovery_s=recovery_s, detail=f"killed at {point}; " + "; ".join(problems))
