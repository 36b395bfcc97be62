"""Whether a config's state outlives the machine it runs on: the guard of the cluster workflows.

A training workflow on a CI runner must register into the shared registry and train on the versioned data
of the profile; on the ``local`` profile (the default when ``MLOPS_PROFILE`` is unset) it would train on
generated data into an SQLite registry that is deleted with the runner, and report success. The check is on
what the config *says* (where the registry and the data live), not on the profile's name.
"""

from __future__ import annotations

from mlops_config import DataConfig, TrackingConfig
from mlops_core.errors import PlatformError


class LocalStateError(PlatformError):
    """The config keeps the registry or the data on this machine where shared state is required."""


def _local(uri: str) -> bool:
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def shared_state_problems(tracking: TrackingConfig, data: DataConfig) -> list[str]:
    """What in ``tracking`` / ``data`` would live and die with this machine (empty: all shared)."""
    problems = []
    if _local(tracking.uri):
        problems.append(f"tracking.uri = {tracking.uri!r} is a file on this machine: a version registered there is "
                        f"lost with it")
    if tracking.registry_uri and _local(tracking.registry_uri):
        problems.append(f"tracking.registry_uri = {tracking.registry_uri!r} is a file on this machine")
    if not data.dvc_remote:
        problems.append("data.dvc_remote is not set: there is no versioned data to train on, only the generator")
    return problems


def require_shared_state(tracking: TrackingConfig, data: DataConfig, *, profile: str) -> None:
    """Refuse a config whose registry or data is local to this machine.

    Raises:
        LocalStateError: naming the profile, each problem, and what to set.
    """
    problems = shared_state_problems(tracking, data)
    if problems:
        raise LocalStateError(
            f"profile {profile!r} keeps state on this machine ({'; '.join(problems)}); this job needs a shared "
            f"registry and versioned data: set MLOPS_PROFILE (e.g. the repository variable) to staging or production"
        )
