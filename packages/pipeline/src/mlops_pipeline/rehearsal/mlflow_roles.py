"""MLflow users per workload and environment: the admin creates them, each workload runs with its own.

The tracking server (``--app-name basic-auth``, ``default_permission = NO_PERMISSIONS``) starts with one admin.
Once it is ready, :func:`provision` (as that admin) applies, for each environment's namespace ``ns``, the
platform's one role table (:data:`mlops_core.tracking_roles.GRANTS`, through
:func:`mlops_core.tracking_roles.apply_roles`: the function ``mlops registry roles apply`` runs in the cluster's
``mlflow-roles`` Job): the experiment ``<ns>.<experiment>`` and the registered model ``<ns>.<model>`` (the
rehearsal's ``tracking.experiment`` and ``tracking.registered_model_prefix`` name them so), and one user
``<ns>.<model>-<role>`` per role (trainer, delivery, monitor, reader) with its grants only.

Nothing is granted on another environment's experiment or model, nor on any other model: with
``NO_PERMISSIONS`` as the default, those answer 403. The admin's password stays in :class:`~.topology.Platform`
(``mlflow_admin``): no workload's env, and not ``os.environ``, ever holds it.

What MLflow 3.17's permissions cannot separate (checked in ``mlflow/server/auth/__init__.py``; tested in
``tests/integration/pipeline/test_rehearsal_mlflow_roles.py``):

- **Alias moves imply version creation.** ``SetRegisteredModelAlias`` needs *update* on the model and *read* on the
  version tier; ``CreateModelVersion`` needs *update* on the model and only *not denied* on the version tier. A
  ``DENY`` on the version tier (wildcard-only in 3.17) would refuse alias moves too. So the monitor and delivery
  can register a version of their own model. What holds instead: they cannot create a run or write an artifact
  (``READ`` on the experiment), so a version they register points at a run training wrote, or at nothing; a
  version without a training run, its weights tag and the signed export is refused by ``publish_model`` (and an
  unsigned folder by the predictor's load), so it never reaches a storageUri.
- **Removing an alias needs MANAGE**, which also allows deleting the model and granting others on it (the
  rollback removes the ``fallback`` alias: ``DeleteRegisteredModelAlias`` needs *delete* on the model). Limiting
  the version tier (``READ``) would refuse that deletion, but also the deletion of the lifecycle lock (itself a
  registered model, ``<model>.lifecycle-lock``), which every writer creates and deletes. Serving never reads the
  registry (it loads the immutable published storageUri), so a deleted model stops promotions, not predictions.
- **Creating a registered model** is open to every authenticated user while workspaces are off (only a ``DENY``
  on the name refuses it, and a wildcard ``DENY`` would also deny the user's own model). The lock needs exactly
  that. A model created so is nobody's served model: delivery promotes only ``<ns>.<model>``.
- **The lock's grants do not outlive it.** MLflow deletes every grant on a registered model when the model is
  deleted, so after the first release only the next creator holds the lock model (MANAGE, granted on create).
  A waiter in another role cannot read the holder (403): ``registry_lock`` takes that as a busy backend and keeps
  retrying the create until its timeout, but it cannot break an expired lock of another role; the admin deletes
  it. The rehearsal never contends: its steps run in order.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from mlops_core import GRANTS, apply_roles, user_name
from mlops_pipeline.errors import PipelineError

USER_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
API = "/api/2.0/mlflow"


@dataclass(frozen=True)
class Environment:
    """One environment's MLflow resources and its users' passwords."""

    namespace: str
    experiment: str
    experiment_id: str
    model: str
    users: Mapping[str, str]
    """``<ns>.<model>-<role>`` → password."""

    def user(self, role: str) -> str:
        return next(u for u in self.users if u.endswith(f"-{role}"))


def prefix(namespace: str) -> str:
    """``tracking.registered_model_prefix`` of an environment: ``mlops-staging.`` (the Redis users' form)."""
    return f"{namespace}."


def naming_env(namespace: str, experiment: str) -> dict[str, str]:
    """The config overrides naming an environment's experiment and registered model on the shared server."""
    return {"MLOPS__TRACKING__EXPERIMENT": f"{prefix(namespace)}{experiment}",
            "MLOPS__TRACKING__REGISTERED_MODEL_PREFIX": prefix(namespace)}


def passwords(namespaces: list[str], model: str, roles: Mapping[str, Any] = GRANTS) -> dict[str, str]:
    """``<ns>.<model>-<role>`` → a generated password, for each environment and role (before the server is up:
    the config the rehearsal loads checks that its secrets are set)."""
    return {user_name(ns, model, role): secrets.token_urlsafe(16) for ns in namespaces for role in roles}


def provision(url: str, admin: tuple[str, str], users: Mapping[str, str], namespaces: list[str], experiment: str,
              model: str, grants: Mapping[str, tuple[str, str]] = GRANTS) -> dict[str, Environment]:
    """Apply the role table to each environment (``users``: the passwords from :func:`passwords`), as the admin.

    The experiment gets the server's default artifact location (``mlflow-artifacts:/<experiment id>``): the
    artifact proxy authorizes a path by the experiment id it starts with, and a path that names none falls back
    to ``default_permission`` (nothing), which would refuse the trainer's uploads.
    """
    out = {}
    for ns in namespaces:
        names = {role: user_name(ns, model, role) for role in grants}
        missing = sorted(u for u in names.values() if u not in users)
        if missing:
            raise PipelineError(f"no password generated for the MLflow user(s) {missing}; have {sorted(users)}")
        applied = apply_roles(url, admin, namespace=ns, experiment=f"{prefix(ns)}{experiment}",
                              registered_model=f"{prefix(ns)}{model}", model=model,
                              passwords={role: users[u] for role, u in names.items()}, grants=grants)
        out[ns] = Environment(ns, applied.experiment, applied.experiment_id, applied.registered_model,
                              {u: users[u] for u in applied.users.values()})
    return out


def role_env(env: Environment, role: str) -> dict[str, str]:
    """The MLflow credentials a workload of ``role`` gets (the env var names the profiles read)."""
    user = env.user(role)
    return {USER_ENV: user, PASSWORD_ENV: env.users[user]}


@contextmanager
def acting_as(env: Environment, role: str) -> Iterator[None]:
    """This process (and what it starts) talks to MLflow as ``role`` for the block; the previous values after."""
    creds = role_env(env, role)
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def permission_probe(url: str, envs: Mapping[str, Environment], ns: str) -> dict[str, Any]:
    """What the live server lets each role of ``ns`` do, asked over REST (``True``: as it must be).

    Calls whose authorized outcome would change state name no real target: an alias on version 999999 (the
    server answers 404 once authorized, 403 when not), a run in an experiment the caller may not write (refused
    before anything is created). Raises :class:`PipelineError` when any answer is not what :data:`GRANTS` means.
    """
    env = envs[ns]
    other = next(e for n, e in envs.items() if n != ns)

    def status(method: str, path: str, role: str | None, body: dict[str, Any] | None = None,
               password: str | None = None) -> int:
        auth = None
        if role is not None:
            user = env.user(role)
            auth = (user, password if password is not None else env.users[user])
        kwargs: dict[str, Any] = {"json": body} if method == "POST" else {"params": body}
        return httpx.request(method, f"{url}{API}/{path}", auth=auth, timeout=30, **kwargs).status_code

    def alias(role: str, model: str) -> int:
        return status("POST", "registered-models/alias", role, {"name": model, "alias": "probe", "version": "999999"})

    def authorized(code: int) -> bool:
        return code not in (401, 403)

    get_model = {"name": env.model}
    probe = {
        "users": sorted(env.users),
        "anonymous_refused": status("GET", "registered-models/get", None, get_model) == 401,
        "wrong_password_refused": status("GET", "registered-models/get", "reader", get_model, password="x") == 401,
        "reader_reads": status("GET", "registered-models/get", "reader", get_model) == 200,
        "reader_alias_refused": alias("reader", env.model) == 403,
        "reader_version_refused": status("POST", "model-versions/create", "reader",
                                         {"name": env.model, "source": "mlflow-artifacts:/probe"}) == 403,
        "monitor_alias_allowed": authorized(alias("monitor", env.model)),
        "monitor_run_refused": status("POST", "runs/create", "monitor", {"experiment_id": env.experiment_id}) == 403,
        "monitor_other_model_refused": alias("monitor", other.model) == 403,
        "monitor_other_env_read_refused": status("GET", "experiments/get", "monitor",
                                                 {"experiment_id": other.experiment_id}) == 403,
        "trainer_other_env_run_refused": status("POST", "runs/create", "trainer",
                                                {"experiment_id": other.experiment_id}) == 403,
        "trainer_other_env_version_refused": status("POST", "model-versions/create", "trainer",
                                                    {"name": other.model, "source": "mlflow-artifacts:/probe"}) == 403,
        "delivery_run_refused": status("POST", "runs/create", "delivery", {"experiment_id": env.experiment_id}) == 403,
    }
    if not all(v for k, v in probe.items() if k != "users"):
        raise PipelineError(f"the registry's permissions do not hold as rehearsal.mlflow_roles.GRANTS means them: "
                            f"{ {k: v for k, v in probe.items() if v is False} }")
    return probe


__all__ = ["GRANTS", "Environment", "acting_as", "naming_env", "passwords", "permission_probe", "prefix", "provision",
           "role_env"]
