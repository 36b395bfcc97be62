"""Staging and production share the platform's servers but not its state: read off the rendered manifests and the
profiles. Each environment has its own Redis db, ACL users (a reader for the transformer, a writer for
materialization, the stream updater and the Spark workers) allowed only its own Feast project's keys and stream, a
Feast project, and a registry database owned by its own role; the platform's NetworkPolicies admit each workload on
the one port it uses, never every port to both namespaces. The real servers are exercised by
tests/integration/features/test_environments_apart.py."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

import pytest

from mlops_config import load_config

ENVS = {"staging": "mlops-staging", "production": "mlops-production"}
# who uses which platform port, written down independently of the manifests (the list)
USES: dict[str, set[tuple[str, int]]] = {
    "transformer": {("redis", 6379), ("postgres", 5432)},
    "fraud-materialize": {("redis", 6379), ("postgres", 5432)},
    "fraud-feature-stream": {("redis", 6379), ("postgres", 5432)},
    "fraud-spark-worker": {("redis", 6379)},
    "fraud-train": {("postgres", 5432), ("mlflow", 5000)},
    "fraud-drift": {("mlflow", 5000)},
    "mlflow-roles": {("mlflow", 5000)},
    "llm-sft-mlflow-roles": {("mlflow", 5000)},
    "llm-sft-finetune": {("mlflow", 5000)},
    "llm-sft-drift": {("mlflow", 5000)},
    "fraud-ingest": set(),
    "fraud-labels": set(),
    "fraud-spark-master": set(),
    "predictor": set(),
}
PORTS = {("redis", 6379), ("postgres", 5432), ("mlflow", 5000)}
WRITERS = {"fraud-materialize", "fraud-feature-stream", "fraud-spark-worker"}


def _labels(caller: str) -> dict[str, str]:
    if caller in ("transformer", "predictor"):
        return {"serving.kserve.io/inferenceservice": "fraud", "component": caller}
    return {"app.kubernetes.io/name": caller}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op = labels.get(expr["key"]), expr["operator"]
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and value in expr["values"]:
            return False
        if op == "Exists" and value is None:
            return False
    return True


def admitted(policies: list[dict[str, Any]], target: str, port: int, namespace: str, labels: dict[str, str]) -> bool:
    """Kubernetes' rule: a pod selected by some ingress policy admits a peer that any of them allows on the port."""
    pod = {"app.kubernetes.io/name": target}
    selecting = [p for p in policies if _selects(p["spec"]["podSelector"], pod)]
    assert selecting, f"no NetworkPolicy selects {target}"
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports is not None and not any(p.get("port") == port for p in ports):
                continue
            for peer in rule.get("from") or [{}]:
                ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
                same_ns = namespace == "mlops-platform"
                if ns_sel is None and not same_ns:
                    continue
                if ns_sel is not None and not _selects(ns_sel, ns_labels):
                    continue
                if pod_sel is not None and not _selects(pod_sel, labels):
                    continue
                return True
    return False


@pytest.fixture(scope="module")
def platform(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["platform"]


def _policies(platform: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in platform if d["kind"] == "NetworkPolicy"]


def test_every_platform_port_admits_only_the_workloads_that_use_it(platform: list[dict[str, Any]]) -> None:
    policies = _policies(platform)
    wrong = []
    for namespace in (*ENVS.values(), "monitoring", "default"):
        for caller, uses in USES.items():
            for target, port in PORTS:
                expected = namespace in ENVS.values() and (target, port) in uses
                if admitted(policies, target, port, namespace, _labels(caller)) != expected:
                    wrong.append(f"{namespace}/{caller} -> {target}:{port}: expected {expected}")
        assert not admitted(policies, "postgres", 5432, namespace, {"app.kubernetes.io/name": "anything"})
    # inside the platform namespace only MLflow reaches PostgreSQL
    assert admitted(policies, "postgres", 5432, "mlops-platform", {"app.kubernetes.io/name": "mlflow"})
    assert not admitted(policies, "redis", 6379, "mlops-platform", {"app.kubernetes.io/name": "mlflow"})
    assert not wrong, "\n".join(wrong)
    for policy in policies:
        for rule in policy["spec"].get("ingress") or []:
            assert rule.get("ports"), f"{policy['metadata']['name']} opens every port"


def _acl_users(platform: list[dict[str, Any]]) -> dict[str, str]:
    acl = next(d for d in platform if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "redis-acl")
    lines = [line.split() for line in acl["data"]["users.acl"].splitlines() if line.strip()]
    return {words[1]: " ".join(words[2:]) for words in lines if words[0] == "user"}


def _workload_usernames(rendered: dict[str, list[dict[str, Any]]], env: str) -> dict[str, str]:
    """Per workload, the Redis user its container gets (``$(POD_NAMESPACE)`` expanded as the kubelet does)."""
    from tests.gitops.test_secret_access import pod_specs  # the one walk over rendered pods

    out = {}
    for doc in rendered[env]:
        for where, pod in pod_specs(doc):
            for container in pod.get("containers") or []:
                out.update(_username(doc, f"{where}:{container['name']}", container))
    return out


def _username(doc: dict[str, Any], where: str, container: dict[str, Any]) -> dict[str, str]:
    env_vars = {e["name"]: e for e in container.get("env") or []}
    if "REDIS_USERNAME" not in env_vars:
        assert "REDIS_PASSWORD" not in env_vars, f"{where} has a Redis password but no Redis user"
        return {}
    assert env_vars["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    namespace = doc["metadata"].get("namespace")
    return {where: env_vars["REDIS_USERNAME"]["value"].replace("$(POD_NAMESPACE)", namespace)}


@pytest.mark.parametrize("env", ENVS)
def test_each_environment_has_its_own_redis_users_project_stream_and_registry(
    env: str, rendered: dict[str, list[dict[str, Any]]], platform: list[dict[str, Any]]
) -> None:
    features, other = (
        load_config(profile=e, environ={}, check_secrets=False).config.features
        for e in (env, next(e for e in ENVS if e != env))
    )
    assert features.feast_project != other.feast_project
    assert features.stream_key != other.stream_key
    assert urlparse(features.redis_url).path != urlparse(other.redis_url).path  # its own db as well
    assert features.redis_username_env == "REDIS_USERNAME"
    users = _acl_users(platform)
    assert users["default"].startswith("off")
    namespace = ENVS[env]
    for role in ("reader", "writer"):
        rules = users[f"{namespace}.fraud-{role}"]
        patterns = set(re.findall(r"~(\S+)", rules))
        expected = {f"*{features.feast_project}"} | ({features.stream_key} if role == "writer" else set())
        assert patterns == expected, (role, patterns)
        assert "+@all" not in rules and "-@dangerous" in rules if role == "writer" else "+@write" not in rules
    # every workload with a Redis password uses its environment's user of its role
    names = _workload_usernames(rendered, env)
    assert names, "no workload names a Redis user"
    for where, user in names.items():
        role = "writer" if any(w in where for w in WRITERS) else "reader"
        assert user == f"{namespace}.fraud-{role}", where
        assert "transformer" in where or role == "writer", where
    # the registry: this environment's database, opened as this environment's role, created and closed to others
    registry = urlparse(features.registry)
    database, role = registry.path.strip("/"), registry.username
    assert (database, role) != (urlparse(other.registry).path.strip("/"), urlparse(other.registry).username)
    init = next(d for d in platform if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "postgres-initdb")
    sql = init["data"]["10-databases.sql"]
    assert f"CREATE ROLE {role} LOGIN" in sql
    assert f"CREATE DATABASE {database} OWNER {role};" in sql
    assert f"REVOKE ALL ON DATABASE {database} FROM PUBLIC;" in sql
