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

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mlops_core.errors import TrackingError
from mlops_core.registry_lock import LOCK_SUFFIX

if TYPE_CHECKING:
    from mlflow.utils.rest_utils import MlflowHostCreds

GRANTS: dict[str, tuple[str, str]] = {"trainer": ("EDIT", "MANAGE"), "delivery": ("READ", "MANAGE"),
                                      "monitor": ("READ", "MANAGE"), "reader": ("READ", "READ")}
"""role → (permission on its environment's experiment, on its environment's registered model)."""
T = TypeVar("T")


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


def _auth_client(creds: MlflowHostCreds) -> Any:
    """MLflow's client of the basic-auth admin API with the credentials given: ``AuthServiceClient`` reads
    ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` from the environment, where the cluster's Job and every workload hold
    a role's user, never the admin's. Requests, retries of transient answers and errors are MLflow's.

    MLflow is imported here, not with the module: ``GRANTS`` and ``user_name`` are read by processes (the demo's,
    through the rehearsal's modules) that never call the server, and importing ``mlflow.server`` warns that
    Starlette's WSGI middleware, which MLflow's server uses, is deprecated: MLflow's to change, not a user's, and
    not for their console."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="starlette.middleware.wsgi is deprecated")
        from mlflow.server.auth.client import AuthServiceClient
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    class AuthClient(AuthServiceClient):
        def _request(self, endpoint: str, method: str, *, expected_status: int = 200, **kwargs: Any) -> Any:
            resp = verify_rest_response(http_request(creds, endpoint, method, **kwargs), endpoint,
                                        expected_status=expected_status)
            return {} if resp.status_code == 204 or not resp.content else resp.json()

    return AuthClient(creds.host)


class _Admin:
    """The tracking server as its admin, through MLflow's own clients: the auth API (:func:`_auth_client`) and the
    tracking and registry REST stores, each with the given credentials (never the environment's)."""

    def __init__(self, url: str, admin: tuple[str, str]) -> None:
        from mlflow.store.model_registry.rest_store import RestStore as RegistryRestStore
        from mlflow.store.tracking.rest_store import RestStore as TrackingRestStore
        from mlflow.utils.rest_utils import MlflowHostCreds

        self.url, self.name = url.rstrip("/"), admin[0]
        creds = MlflowHostCreds(self.url, username=admin[0], password=admin[1])
        self.auth = _auth_client(creds)
        self.tracking = TrackingRestStore(lambda: creds)
        self.registry = RegistryRestStore(lambda: creds)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; a refusal, or no answer after MLflow's retries, a :class:`TrackingError` naming ``what`` and
        the user it was asked as."""
        from mlflow.exceptions import MlflowException

        try:
            return fn()
        except MlflowException as exc:
            raise TrackingError(f"the tracking server {self.url!r} refused to {what} (asked as {self.name!r}): "
                                f"{exc.get_http_status_code()} {exc.error_code}: {str(exc)[:300]}") from exc
        except OSError as exc:  # requests' ConnectionError after MLflow's retries
            raise TrackingError(f"cannot reach the tracking server {self.url!r} to {what}: {exc}") from exc

    def answered(self, code: str, what: str, fn: Callable[[], object]) -> bool:
        """Whether :meth:`call` of ``fn`` was refused with the error code ``code`` (``RESOURCE_DOES_NOT_EXIST``,
        say); any other refusal raises."""
        from mlflow.exceptions import MlflowException

        try:
            self.call(what, fn)
        except TrackingError as exc:
            if isinstance(exc.__cause__, MlflowException) and exc.__cause__.error_code == code:
                return True
            raise
        return False

    def authenticates(self, user: str, password: str) -> bool:
        """Whether ``user`` logs in with ``password`` (a search of one experiment as that user: 401 or not)."""
        from mlflow.exceptions import MlflowException
        from mlflow.store.tracking.rest_store import RestStore as TrackingRestStore
        from mlflow.utils.rest_utils import MlflowHostCreds

        store = TrackingRestStore(lambda: MlflowHostCreds(self.url, username=user, password=password))
        try:
            self.call(f"search experiments as {user!r}", lambda: store.search_experiments(max_results=1))
        except TrackingError as exc:
            cause = exc.__cause__
            if isinstance(cause, MlflowException) and cause.get_http_status_code() == 401:
                return False
            raise
        return True


def _ensure_user(admin: _Admin, user: str, password: str, changes: list[str]) -> None:
    if admin.answered("RESOURCE_DOES_NOT_EXIST", f"get user {user!r}", lambda: admin.auth.get_user(user)):
        admin.call(f"create user {user!r}", lambda: admin.auth.create_user(user, password))
        changes.append(f"created user {user}")
        return
    # a password cannot be read back: it is set again only when it no longer authenticates
    if not admin.authenticates(user, password):
        admin.call(f"set the password of {user!r}", lambda: admin.auth.update_user_password(user, password))
        changes.append(f"set the password of {user}")


def _ensure_grant(admin: _Admin, user: str, kind: str, resource: str, permission: str, changes: list[str]) -> None:
    what = f"grant {user!r} {permission} on {kind} {resource!r}"
    grant = admin.auth.grant_user_permission
    if not admin.answered("RESOURCE_ALREADY_EXISTS", what, lambda: grant(user, kind, resource, permission)):
        changes.append(f"granted {user} {permission} on {kind} {resource}")
        return
    held = admin.call(f"read {user!r}'s permission on {kind} {resource!r}",
                      lambda: admin.auth.get_user_permission(user, kind, resource))
    if held.permission != permission:  # a grant exists with another permission: replace it
        admin.call(f"revoke {user!r} on {kind} {resource!r}",
                   lambda: admin.auth.revoke_user_permission(user, kind, resource))
        admin.call(what, lambda: grant(user, kind, resource, permission))
        changes.append(f"changed {user} on {kind} {resource}: {held.permission} -> {permission}")


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
    found = api.call(f"read experiment {experiment!r}", lambda: api.tracking.get_experiment_by_name(experiment))
    if found is not None:
        exp_id = str(found.experiment_id)
    else:
        exp_id = str(api.call(f"create experiment {experiment!r}",
                              lambda: api.tracking.create_experiment(experiment, artifact_location)))
        changes.append(f"created experiment {experiment}")
    if api.answered("RESOURCE_DOES_NOT_EXIST", f"read registered model {registered_model!r}",
                    lambda: api.registry.get_registered_model(registered_model)):
        api.call(f"create registered model {registered_model!r}",
                 lambda: api.registry.create_registered_model(registered_model))
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
