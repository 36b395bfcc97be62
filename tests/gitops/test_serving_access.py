"""Serving is closed, read off the rendered manifests: every InferenceService is cluster-local; its pods sit
under a RequestAuthentication and an ALLOW AuthorizationPolicy that lets predict through only with a JWT of the
model's audience, the predictor only from the transformer, and /status, /metrics, /mlops/* only from
monitoring (and the transformer); every serving pod has a NetworkPolicy."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest
import yaml

TARGETS = {"staging": "infra/overlays/staging", "production": "infra/overlays/production",
           "serving-llm": "infra/base/serving-llm"}
AUDIENCE = {"fraud": "fraud-scoring", "llm-sft": "llm-sft"}


@pytest.fixture(scope="module")
def docs(kit: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: [d for d in yaml.safe_load_all(kit.render(path)) if d] for name, path in TARGETS.items()}


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = policy["spec"].get("selector", {}).get("matchLabels", {})
    return all(labels.get(k) == v for k, v in wanted.items())


def allowed(docs: list[dict[str, Any]], labels: dict[str, str], *, method: str, path: str,
            principal: str | None = None, namespace: str | None = None, audience: str | None = None) -> bool:
    """Istio's ALLOW semantics for the policies selecting a pod (no policy: all allowed; any ALLOW: a match needed).
    ``audience`` is a valid JWT's ``aud``; ``principal`` the peer's SPIFFE id; ``namespace`` the peer's."""
    policies = [d for d in docs if d["kind"] == "AuthorizationPolicy" and _selects(d, labels)]
    if not policies:
        return True
    assert all(p["spec"]["action"] == "ALLOW" for p in policies)

    def match(patterns: list[str] | None, value: str | None) -> bool:
        return patterns is None or (value is not None and any(fnmatchcase(value, p) for p in patterns))

    for policy in policies:
        for rule in policy["spec"].get("rules", []):
            sources = [f.get("source", {}) for f in rule.get("from", [])] or [{}]
            ops = [t.get("operation", {}) for t in rule.get("to", [])] or [{}]
            src_ok = any(match(s.get("principals"), principal) and match(s.get("namespaces"), namespace)
                         and match(s.get("requestPrincipals"), "https://auth.mlops-platform.example/u" if audience
                                   else None) for s in sources)
            op_ok = any(match(o.get("methods"), method) and match(o.get("paths"), path) for o in ops)
            when_ok = all(c["key"] != "request.auth.audiences" or audience in c["values"] for c in rule.get("when", []))
            if src_ok and op_ok and when_ok:
                return True
    return False


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each InferenceService component's pod labels, as KServe sets them."""
    out = {}
    for d in docs:
        if d["kind"] == "InferenceService":
            for comp in ("predictor", "transformer"):
                if comp in d["spec"]:
                    out[f"{d['metadata']['name']}/{comp}"] = {
                        "serving.kserve.io/inferenceservice": d["metadata"]["name"], "component": comp}
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_inference_service_is_cluster_local_with_a_network_policy(docs: dict[str, Any], target: str) -> None:
    isvcs = [d for d in docs[target] if d["kind"] == "InferenceService"]
    assert isvcs
    for isvc in isvcs:
        name = isvc["metadata"]["name"]
        assert isvc["metadata"].get("labels", {}).get("networking.kserve.io/visibility") == "cluster-local", name
        nps = [n for n in docs[target] if n["kind"] == "NetworkPolicy"
               and n["spec"]["podSelector"].get("matchLabels", {}).get("serving.kserve.io/inferenceservice") == name]
        assert nps, f"{target}: no NetworkPolicy selects {name}'s pods"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_only_the_right_callers_reach_each_route(docs: dict[str, Any], target: str) -> None:
    found = pods(docs[target])
    assert found
    for pod, labels in found.items():
        isvc, component = pod.split("/")
        model = "fraud" if isvc.startswith("fraud") else isvc
        served = isvc if component == "predictor" else model
        predict = f"/v2/models/{served}/infer" if model == "fraud" else "/openai/v1/chat/completions"
        d = docs[target]
        anon = dict(method="POST", path=predict, namespace="mlops-x")
        assert not allowed(d, labels, **anon), f"{target}: {pod} answers predict without a token"
        assert not allowed(d, labels, **anon, audience="some-other-audience"), f"{target}: {pod}: wrong audience"
        for path in ("/status", "/metrics", f"/mlops/models/{served}/meta", "/openapi.json"):
            assert not allowed(d, labels, method="GET", path=path, namespace="mlops-x",
                               principal="cluster.local/ns/mlops-x/sa/default"), f"{target}: {pod} {path} is open"
        assert allowed(d, labels, method="GET", path="/metrics", namespace="monitoring")
        assert allowed(d, labels, method="GET", path="/v2/health/ready")
        if component == "transformer" or model != "fraud":
            assert allowed(d, labels, **anon, audience=AUDIENCE[model]), f"{target}: {pod} refuses a valid token"
        else:  # a fraud predictor: only the transformer
            assert not allowed(d, labels, **anon, audience=AUDIENCE[model]), f"{target}: {pod} takes callers directly"
            transformer = "cluster.local/ns/mlops-x/sa/fraud-transformer"
            assert allowed(d, labels, method="POST", path=predict, principal=transformer)
            assert allowed(d, labels, method="GET", path=f"/mlops/models/{served}/meta", principal=transformer)


def test_the_policy_model_denies_when_an_allow_policy_does_not_match() -> None:
    # hand-built: one ALLOW policy for GET /metrics from monitoring; everything else on the pod is denied
    policy = {"kind": "AuthorizationPolicy", "spec": {"selector": {"matchLabels": {"app": "a"}}, "action": "ALLOW",
              "rules": [{"from": [{"source": {"namespaces": ["monitoring"]}}],
                         "to": [{"operation": {"methods": ["GET"], "paths": ["/metrics"]}}]}]}}
    assert allowed([policy], {"app": "a"}, method="GET", path="/metrics", namespace="monitoring")
    assert not allowed([policy], {"app": "a"}, method="GET", path="/metrics", namespace="default")
    assert allowed([policy], {"app": "b"}, method="POST", path="/x")  # not selected: no policy applies
