"""Each workload of the rehearsal gets the credentials its manifest gives its pod, not one env for all.

- **Redis** starts from the platform's own ACL (``infra/platform/redis.yaml``: the ``redis-acl`` ConfigMap, each
  ``@..._SHA256@`` placeholder replaced by the SHA-256 of a password generated here, as the StatefulSet's start
  script puts in the Secret's hashes): the default user is off, and each environment has a reader and a writer
  limited to its own keys.
- **Serving** processes get the env entries of their containers in ``infra/base/serving``: the transformer its
  ``$(POD_NAMESPACE).fraud-reader`` user and the ``fraud-transformer-secrets`` keys, the predictor no credential at
  all; the profile's secret names a workload does not hold are unset (``MLOPS__...__ENV: "null"``) as there.

The rehearsal runs the ``staging`` profile (its Feast project and Redis keys), so ``$(POD_NAMESPACE)`` is the staging
overlay's namespace. The loop itself, the Spark worker and the stream updater write the online store: they get the
writer, as the materialize CronJob, the Spark cluster and the stream Deployment do.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlops_pipeline.errors import PipelineError

REDIS_MANIFEST = Path("infra/platform/redis.yaml")
SERVING = {"transformer": (Path("infra/base/serving/inferenceservice.yaml"), "InferenceService"),
           "predictor": (Path("infra/base/serving/servingruntime.yaml"), "ServingRuntime")}
STAGING_KUSTOMIZATION = Path("infra/overlays/staging/kustomization.yaml")
_PLACEHOLDER = re.compile(r"@(\w+)_SHA256@")


def _docs(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise PipelineError(f"cannot read the manifest {str(path)!r}: {exc}") from None


def namespace(repo_root: Path, env: str = "staging") -> str:
    """An overlay's namespace (default: staging's, the environment the rehearsal's profile is)."""
    path = STAGING_KUSTOMIZATION.parent.parent / env / STAGING_KUSTOMIZATION.name
    doc = _docs(repo_root / path)[0]
    if not isinstance(doc.get("namespace"), str):
        raise PipelineError(f"{path} sets no namespace; expected `namespace: mlops-{env}`")
    return str(doc["namespace"])


def redis_acl(repo_root: Path) -> tuple[str, dict[str, str]]:
    """The platform's ACL file with every user's password hash put in, and ``{user: password}`` for each user.

    Raises:
        PipelineError: the manifest has no ``redis-acl`` ConfigMap, or a user line without its placeholder.
    """
    acl = next((d for d in _docs(repo_root / REDIS_MANIFEST)
                if d.get("kind") == "ConfigMap" and d.get("metadata", {}).get("name") == "redis-acl"), None)
    if acl is None or "users.acl" not in acl.get("data", {}):
        raise PipelineError(f"{REDIS_MANIFEST} holds no ConfigMap redis-acl with users.acl")
    lines, passwords = [], {}
    for line in str(acl["data"]["users.acl"]).splitlines():
        words = line.split()
        placeholder = _PLACEHOLDER.search(line)
        if len(words) > 1 and words[0] == "user" and placeholder:
            password = secrets.token_urlsafe(16)
            passwords[words[1]] = password
            line = line.replace(placeholder.group(0), hashlib.sha256(password.encode()).hexdigest())
        elif len(words) > 2 and words[0] == "user" and words[2] == "on":
            raise PipelineError(f"{REDIS_MANIFEST}: user {words[1]!r} is on without a password placeholder")
        lines.append(line)
    return "\n".join(lines) + "\n", passwords


def container_env(repo_root: Path, workload: str, ns: str, secret_values: Mapping[str, str]) -> dict[str, str]:
    """The env a serving container's manifest gives it: ``$(POD_NAMESPACE)`` expanded to ``ns``, each
    ``secretKeyRef`` resolved by its key in ``secret_values`` (a key this machine has no use for, e.g. the bucket's
    AWS keys where the bucket is a folder, is left out), plain values kept only where they unset a profile's secret
    name (``"null"``) or name a user (paths and URLs are the cluster's, the rehearsal has its own)."""
    path, kind = SERVING[workload]
    doc = next((d for d in _docs(repo_root / path) if d.get("kind") == kind), None)
    if doc is None:
        raise PipelineError(f"{path} holds no {kind}")
    spec = doc["spec"]
    container = (spec["transformer"]["containers"][0] if kind == "InferenceService" else spec["containers"][0])
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        name, source = entry["name"], entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            key = source["secretKeyRef"]["key"]
            if key in secret_values:
                env[name] = secret_values[key]
        elif "value" in entry and (entry["value"] == "null" or name.endswith("USERNAME")):
            env[name] = str(entry["value"]).replace("$(POD_NAMESPACE)", ns)
    return env


def acl_probe(redis_url: str, users: Mapping[str, str], ns: str, project: str) -> dict[str, Any]:
    """What the running Redis lets each kind of client do, asked with redis-py (``True``: refused, as it must be):
    no user at all, the environment's reader writing, the other environment's reader reading this one's keys."""
    import redis

    other = next(u for u in users if u.endswith(".fraud-reader") and not u.startswith(f"{ns}."))
    key = f"probe{project}"  # a Feast key ends in its project's name: inside the reader's ~*<project> pattern

    def refused(call: Any) -> bool:
        try:
            call()
        except (redis.exceptions.AuthenticationError, redis.exceptions.NoPermissionError,
                redis.exceptions.ResponseError):
            return True
        return False

    def as_user(user: str | None) -> Any:
        kwargs = {"username": user, "password": users[user]} if user else {}
        return redis.Redis.from_url(redis_url, socket_timeout=10, **kwargs)

    reader = as_user(f"{ns}.fraud-reader")
    probe = {"users": sorted(users),
             "anonymous_refused": refused(lambda: as_user(None).hgetall(key)),
             "reader_reads": not refused(lambda: reader.hgetall(key)),
             "reader_write_refused": refused(lambda: reader.hset(key, "f", "v")),
             "other_env_read_refused": refused(lambda: as_user(other).hgetall(key))}
    if not (probe["anonymous_refused"] and probe["reader_reads"] and probe["reader_write_refused"]
            and probe["other_env_read_refused"]):
        raise PipelineError(f"the online store's ACL does not hold as infra/platform/redis.yaml means it: {probe}")
    return probe


__all__ = ["acl_probe", "container_env", "namespace", "redis_acl"]
