"""MLflow users per role and environment: one table of grants, applied by the admin, idempotently.

The tracking server runs ``--app-name basic-auth``. As its admin, :func:`apply_roles` makes one environment's
experiment and registered model exist and gives each role of :data:`GRANTS` a user ``<namespace>.<model>-<role>``
(:func:`user_name`) with exactly these grants:

=========  ===================  ==============================  ==========================================
role       experiment           registered model (+ its lock)   who runs with it
=========  ===================  ==============================  ==========================================
trainer    EDIT                 MANAGE                          training, registration, the gates
delivery   READ                 MANAGE                          publish, staging / canary / production
monitor    READ                 MANAGE                          the drift job (rollback: alias moves)
reader     READ                 READ                            checks and reports; nothing writes
=========  ===================  ==============================  ==========================================

Nothing is granted on any other experiment or model. The same function runs in the cluster (``mlops registry
roles apply``, the Argo CD PreSync Job ``mlflow-roles`` of each environment) and in the rehearsal
(``mlops_pipeline.rehearsal.mlflow_roles``). Re-running it changes nothing; a user whose password no longer
authenticates gets the given one. What MLflow's grants cannot separate is in ``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlops_core.errors import TrackingError
from mlops_core.registry_lock import LOCK_SUFFIX

GRANTS: dict[str, tuple[str, str]] = {"trainer": ("EDIT", "MANAGE"), "delivery": ("READ", "MANAGE"),
                                      "monitor": ("READ", "MANAGE"), "reader": ("READ", "READ")}
"""role → (permission on its environment's experiment, on its environment's registered model)."""
API, API3 = "/api/2.0/mlflow", "/api/3.0/mlflow"


def user_name(namespace: str, model: str, role: str) -> str:
    """The MLflow user of ``role`` in an environment: ``mlops-staging.fraud-trainer``."""
    return f"{namespace}.{model}-{role}"


@dataclass(frozen=True)
class AppliedRoles:
    """What :func:`apply_roles` left on the server, and what it had to change (empty on a re-run)."""

    namespace: str
    experiment: str
    experiment_id: str
    registered_model: str
    users: dict[str, str]
    """role → user name."""
    grants: dict[str, dict[str, str]]
    """user → ``{"experiment": permission, "registered_model": permission}``."""
    changes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "experiment": self.experiment, "experiment_id": self.experiment_id,
                "registered_model": self.registered_model, "users": self.users, "grants": self.grants,
                "changes": self.changes}


class _Admin:
    """REST calls as the admin (credentials given, never read from the environment)."""

    def __init__(self, url: str, admin: tuple[str, str]) -> None:
        self.url, self.admin = url.rstrip("/"), admin

    def call(self, method: str, path: str, body: Mapping[str, Any], *, ok: tuple[int, ...] = (200,),
             auth: tuple[str, str] | None = None) -> httpx.Response:
        kwargs: dict[str, Any] = {"params": dict(body)} if method == "GET" else {"json": dict(body)}
        try:
            resp = httpx.request(method, f"{self.url}{path}", auth=auth or self.admin, timeout=30, **kwargs)
        except httpx.HTTPError as exc:
            raise TrackingError(f"cannot reach the tracking server {self.url!r} ({path}): {exc}") from exc
        if resp.status_code not in ok:
            raise TrackingError(f"the tracking server refused {method} {path} {sorted(body)} as "
                                f"{(auth or self.admin)[0]!r}: {resp.status_code} {resp.text[:300]}")
        return resp

    def exists(self, path: str, body: Mapping[str, Any]) -> httpx.Response | None:
        resp = self.call("GET", path, body, ok=(200, 404))
        return resp if resp.status_code == 200 else None


def _ensure_user(admin: _Admin, user: str, password: str, changes: list[str]) -> None:
    if admin.exists(f"{API}/users/get", {"username": user}) is None:
        admin.call("POST", f"{API}/users/create", {"username": user, "password": password})
        changes.append(f"created user {user}")
        return
    # a password cannot be read back: it is set again only when it no longer authenticates
    probe = admin.call("GET", f"{API}/experiments/search", {"max_results": 1}, ok=(200, 401), auth=(user, password))
    if probe.status_code == 401:
        admin.call("PATCH", f"{API}/users/update-password", {"username": user, "password": password})
        changes.append(f"set the password of {user}")


def _ensure_grant(admin: _Admin, user: str, kind: str, resource: str, permission: str, changes: list[str]) -> None:
    body = {"username": user, "resource_type": kind, "resource_id": resource}
    created = admin.call("POST", f"{API3}/users/permissions/grant", {**body, "permission": permission},
                         ok=(200, 400))
    if created.status_code == 200:
        changes.append(f"granted {user} {permission} on {kind} {resource}")
        return
    if "RESOURCE_ALREADY_EXISTS" not in created.text:
        raise TrackingError(f"the tracking server refused to grant {user!r} {permission} on {kind} {resource!r}: "
                            f"{created.text[:300]}")
    held = admin.call("GET", f"{API3}/users/permissions/get", body).json()["permission"]
    if held != permission:  # a grant exists with another permission: replace it
        admin.call("POST", f"{API3}/users/permissions/revoke", body)
        admin.call("POST", f"{API3}/users/permissions/grant", {**body, "permission": permission})
        changes.append(f"changed {user} on {kind} {resource}: {held} -> {permission}")


def apply_roles(url: str, admin: tuple[str, str], *, namespace: str, experiment: str, registered_model: str,
                model: str, passwords: Mapping[str, str], artifact_location: str | None = None,
                grants: Mapping[str, tuple[str, str]] = GRANTS) -> AppliedRoles:
    """As the admin, make ``experiment``, ``registered_model`` and one user per role of ``grants`` exist with
    exactly those grants (and MANAGE on the model's lifecycle lock for each role managing the model).

    Args:
        url: The tracking server.
        admin: The admin's name and password.
        namespace: The environment (``mlops-staging``); it prefixes the user names (:func:`user_name`).
        experiment: The environment's experiment (``tracking.experiment``).
        registered_model: The environment's registered model (``tracking.registered_model_prefix`` + model).
        model: The model config's name (``fraud``), the users' suffix.
        passwords: role → password, one for each role of ``grants``.
        artifact_location: Where a new experiment stores artifacts; ``None``: the server's default (with
            ``--serve-artifacts``, ``mlflow-artifacts:/<id>``, which the artifact proxy authorizes by experiment).
        grants: role → (experiment permission, model permission); :data:`GRANTS` everywhere but in tests.

    Raises:
        TrackingError: a role without a password, or a request the server refused.
    """
    missing = sorted(set(grants) - set(passwords))
    if missing:
        raise TrackingError(f"no password for the MLflow role(s) {missing} of {namespace!r}; each of "
                            f"{sorted(grants)} needs one")
    api, changes = _Admin(url, admin), []
    found = api.exists(f"{API}/experiments/get-by-name", {"experiment_name": experiment})
    if found is not None:
        exp_id = str(found.json()["experiment"]["experiment_id"])
    else:
        body = {"name": experiment, **({"artifact_location": artifact_location} if artifact_location else {})}
        exp_id = str(api.call("POST", f"{API}/experiments/create", body).json()["experiment_id"])
        changes.append(f"created experiment {experiment}")
    if api.exists(f"{API}/registered-models/get", {"name": registered_model}) is None:
        api.call("POST", f"{API}/registered-models/create", {"name": registered_model})
        changes.append(f"created registered model {registered_model}")
    users, granted = {}, {}
    for role, (on_experiment, on_model) in grants.items():
        user = user_name(namespace, model, role)
        _ensure_user(api, user, passwords[role], changes)
        _ensure_grant(api, user, "experiment", exp_id, on_experiment, changes)
        _ensure_grant(api, user, "registered_model", registered_model, on_model, changes)
        if on_model == "MANAGE":  # the lifecycle lock: a registered model the writers create and delete
            _ensure_grant(api, user, "registered_model", registered_model + LOCK_SUFFIX, "MANAGE", changes)
        users[role], granted[user] = user, {"experiment": on_experiment, "registered_model": on_model}
    return AppliedRoles(namespace, experiment, exp_id, registered_model, users, granted, changes)


def role_passwords(env: Mapping[str, str], roles: Mapping[str, Any] = GRANTS, *, namespace: str,
                   model: str) -> dict[str, str]:
    """role → password from ``MLFLOW_ROLE_<ROLE>_PASSWORD`` in ``env`` (a pod's env from the workloads' Secrets).

    Where ``MLFLOW_ROLE_<ROLE>_USERNAME`` is set too (the workload Secret's ``MLFLOW_TRACKING_USERNAME``), it must
    name that role's user: a Secret naming another user would leave its workload refused (401) at run time.
    """
    out, wrong = {}, []
    for role in roles:
        key = f"MLFLOW_ROLE_{role.upper()}"
        if env.get(f"{key}_PASSWORD"):
            out[role] = env[f"{key}_PASSWORD"]
        named, want = env.get(f"{key}_USERNAME"), user_name(namespace, model, role)
        if named is not None and named != want:
            wrong.append(f"{key}_USERNAME={named!r} (expected {want!r})")
    if wrong:
        raise TrackingError(f"the workloads' Secrets name other MLflow users than their roles': {', '.join(wrong)}")
    return out


__all__ = ["GRANTS", "AppliedRoles", "apply_roles", "role_passwords", "user_name"]
