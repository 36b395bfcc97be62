"""What KServe and Argo CD do with the overlay, done with local processes: the rehearsal's serving plane.

:func:`reconcile` reads the overlay rendered at the GitOps remote's HEAD and makes the running processes match
it: one predictor + transformer pair per ``storageUri`` named there (the stable revision, and the canary's while
one runs), each predictor loading exactly the folder that URI names (fetched by :func:`fetch_model`, KServe's
storage initializer), each started from ``services/<role>/entrypoint.sh`` with the arguments KServe injects.
:func:`send_split` stands in for the ingress's traffic split between the two revisions.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import Endpoint, send_traffic
from mlops_pipeline.rehearsal.gitops import GitOpsRepo, Served, served_at_head
from mlops_pipeline.rehearsal.topology import Platform, write_scrape_targets
from mlops_pipeline.servers import ProcessHarness, ServerSpec, free_port, http_ready

log = logging.getLogger(__name__)

PRIVATE_SIGNING_ENV = ("MLOPS_SIGNING_KEY", "MLOPS_SIGNING_KEY_PASSWORD")
"""The signing key's private half (``provenance.private_key_var`` / ``private_key_password_var`` of the staging
profile): the trainer's alone, never a serving process's."""


@dataclass
class Revision:
    """One InferenceService revision: a predictor + transformer pair serving one immutable storageUri."""

    uri: str
    version: int
    name: str
    predictor_url: str
    transformer_url: str
    model_dir: Path

    def endpoint(self, model: str, log_path: Path) -> Endpoint:
        return Endpoint(self.transformer_url, model, log_path)


@dataclass
class ServingPlane:
    """The running revisions, keyed by storageUri (a revision lives as long as the overlay names its URI)."""

    harness: ProcessHarness
    platform: Platform
    gitops: GitOpsRepo
    repo_root: Path
    root: Path
    """The runner's checkout the serving processes read their config (and feature_repo/) from."""
    model: str
    env: str
    storage_uri_template: str
    child_env: dict[str, str]
    revisions: dict[str, Revision] = field(default_factory=dict)
    served: Served | None = None

    def stable(self) -> Revision:
        assert self.served is not None
        return self.revisions[self.served.stable_uri]

    def canary(self) -> Revision | None:
        if self.served is None or self.served.canary_uri is None:
            return None
        return self.revisions[self.served.canary_uri]


def uri_path(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem and path of a storage URI (``file://`` here, ``s3://`` in a cluster)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def fetch_model(uri: str, dest: Path) -> Path:
    """KServe's storage initializer: copy the folder at ``uri`` to ``dest`` (a fresh folder); refuse an empty one."""
    fs, path = uri_path(uri)
    if not fs.exists(f"{path}/model.json"):
        raise PipelineError(f"nothing is published at {uri!r} (no model.json): the overlay names a model that "
                            "no promotion step wrote")
    if dest.exists():
        shutil.rmtree(dest)
    for remote in fs.find(path):
        target = dest / remote[len(path):].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(remote, str(target))
    return dest


def workload_env(plane: ServingPlane, workload: str) -> dict[str, str]:
    """The credentials env of a serving container, from its manifest (:func:`workloads.container_env`): the
    transformer reads the online store as the environment's reader user and the registry with its password."""
    from mlops_pipeline.rehearsal.topology import FEAST_REGISTRY_PASSWORD_ENV
    from mlops_pipeline.rehearsal.workloads import container_env

    platform = plane.platform
    reader = platform.redis_users.get(f"{platform.namespace}.fraud-reader")
    store = {"FEAST_REGISTRY_PASSWORD": platform.secrets[FEAST_REGISTRY_PASSWORD_ENV],
             **({"REDIS_PASSWORD": reader} if reader is not None else {})}
    return container_env(plane.repo_root, workload, platform.namespace, store)


def start_revision(plane: ServingPlane, uri: str, version: int) -> Revision:
    """Fetch ``uri`` and start its predictor and transformer (both started, then both awaited)."""
    name = f"v{version}-{len(plane.harness.stopped) + len(plane.harness.servers)}"
    model_dir = fetch_model(uri, plane.platform.run_dir / "serving" / name / "mnt-models")
    p_port, t_port = free_port(), free_port()
    services = plane.repo_root / "services"
    # the entrypoints exec `mlops` from PATH, as in the images (/opt/venv/bin first)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # no secret of the loop's own: each container gets what its manifest gives its pod (rehearsal.workloads)
    # nor what the loop holds (the Redis writer, the MLflow user of the step that reconciles), in its config env or
    # its own: the serving manifests give their pods no MLflow credential, and only the signing key's public half
    # (the ServingRuntime mounts MLOPS_SIGNING_PUBLIC_KEY; the private key is the trainer's)
    held = (*plane.platform.secrets, "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", *PRIVATE_SIGNING_ENV)
    env = {**{k: v for k, v in plane.child_env.items() if k not in held},
           "MODEL_DIR": str(model_dir), "MLOPS_CONFIG_DIR": str(plane.root / "configs"), "PATH": path}
    predictor = ServerSpec(
        f"predictor-{name}",
        ["sh", str(services / "predictor" / "entrypoint.sh"), "--model_name", plane.model,
         "--http_port", str(p_port), "--model-version", str(version)],
        ready=http_ready(f"http://127.0.0.1:{p_port}/v2/health/ready"), env={**env, **workload_env(plane, "predictor")},
        cwd=plane.root, ready_timeout_s=180, unset=held)
    transformer = ServerSpec(
        f"transformer-{name}",
        ["sh", str(services / "transformer" / "entrypoint.sh"), "--model_name", plane.model,
         "--predictor_host", f"127.0.0.1:{p_port}", "--http_port", str(t_port), "--predictor_protocol", "v2"],
        ready=http_ready(f"http://127.0.0.1:{t_port}/v2/health/ready"),
        env={**env, **workload_env(plane, "transformer")}, cwd=plane.root, ready_timeout_s=180, unset=held)
    plane.harness.launch(predictor)
    plane.harness.launch(transformer)
    plane.harness.wait_ready(predictor.name)
    plane.harness.wait_ready(transformer.name)
    return Revision(uri, version, name, f"http://127.0.0.1:{p_port}", f"http://127.0.0.1:{t_port}", model_dir)


def stop_revision(plane: ServingPlane, revision: Revision) -> None:
    for role in ("transformer", "predictor"):  # SIGTERM: the transformer flushes its prediction log
        plane.harness.stop(f"{role}-{revision.name}")


def reconcile(plane: ServingPlane) -> Served:
    """Make the running revisions match the overlay at HEAD (Argo CD sync + KServe rollout, in one call)."""
    served = served_at_head(plane.gitops, plane.env, plane.model, plane.storage_uri_template)
    wanted = {served.stable_uri: served.stable_version}
    if served.canary_uri is not None and served.canary_version is not None:
        wanted[served.canary_uri] = served.canary_version
    for uri in [u for u in plane.revisions if u not in wanted]:
        stop_revision(plane, plane.revisions.pop(uri))
    for uri, version in wanted.items():
        if uri not in plane.revisions:
            plane.revisions[uri] = start_revision(plane, uri, version)
    plane.served = served
    targets: dict[str, dict[str, str]] = {}
    for rev in plane.revisions.values():
        role = "canary" if rev.uri == served.canary_uri else "stable"
        for kind, url in (("predictor", rev.predictor_url), ("transformer", rev.transformer_url)):
            targets[url.removeprefix("http://")] = {"revision": role, "component": kind, "pod": rev.name}
    write_scrape_targets(plane.platform, targets)
    check_loaded(plane)
    return served


def check_loaded(plane: ServingPlane) -> None:
    """Each predictor loaded exactly the version and weights its storageUri holds (not just some model)."""
    for rev in plane.revisions.values():
        meta = httpx.get(f"{rev.predictor_url}/mlops/models/{plane.model}/meta", timeout=10).json()
        published = json.loads((rev.model_dir / "model.json").read_text())
        if str(meta.get("served_version")) != str(rev.version):
            raise PipelineError(f"predictor {rev.name} serves v{meta.get('served_version')}, the overlay names "
                                f"v{rev.version} ({rev.uri})")
        want = published.get("weights_sha256")
        got = meta.get("weights_sha256") or (meta.get("lineage") or {}).get("weights_sha256")
        if want and got and want != got:
            raise PipelineError(f"predictor {rev.name} loaded weights {got[:12]}, {rev.uri} holds {want[:12]}")


def send_split(plane: ServingPlane, rows: list[dict[str, Any]], seed: int, *, batch: int = 1) -> dict[str, Any]:
    """Send ``rows`` the way the ingress splits traffic: each request to the canary with its percent's odds."""
    served = plane.served
    assert served is not None
    canary = plane.canary()
    rng = random.Random(seed)
    chunks = [rows[i: i + batch] for i in range(0, len(rows), batch)]
    to_canary = [c for c in chunks if canary is not None and rng.random() * 100 < served.canary_percent]
    to_stable = [c for c in chunks if not any(c is k for k in to_canary)]
    logs = Path(tempfile.gettempdir())
    out: dict[str, Any] = {}
    for label, revision, part in (("stable", plane.stable(), to_stable), ("canary", canary, to_canary)):
        if revision is None or not part:
            continue
        flat = [row for chunk in part for row in chunk]
        tally = send_traffic(revision.endpoint(plane.model, logs), flat, batch=batch)
        out[label] = {"version": revision.version, "requests": tally["requests"], "instances": tally["instances"],
                      "statuses": tally["statuses"], "degraded": tally["degraded"]}
    return out
