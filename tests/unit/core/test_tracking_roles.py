"""The role table's names and where the cluster's Job takes the passwords from (``mlops_core.tracking_roles``); the
server side is tests/integration/pipeline/test_mlflow_roles_apply.py."""

from __future__ import annotations

import pytest

from mlops_core import TrackingError
from mlops_core.tracking_roles import GRANTS, role_passwords, user_name


def test_the_table_has_the_four_roles_and_only_the_trainer_writes_runs() -> None:
    assert sorted(GRANTS) == ["delivery", "monitor", "reader", "trainer"]
    assert [r for r, (on_exp, _) in GRANTS.items() if on_exp != "READ"] == ["trainer"]
    assert GRANTS["reader"] == ("READ", "READ")
    assert user_name("mlops-staging", "fraud", "monitor") == "mlops-staging.fraud-monitor"


def test_passwords_come_from_the_role_env_vars_and_a_secret_naming_another_user_is_refused() -> None:
    env = {"MLFLOW_ROLE_TRAINER_PASSWORD": "t" * 12, "MLFLOW_ROLE_TRAINER_USERNAME": "mlops-staging.fraud-trainer",
           "MLFLOW_ROLE_READER_PASSWORD": "r" * 12, "MLFLOW_ROLE_MONITOR_PASSWORD": ""}
    assert role_passwords(env, namespace="mlops-staging", model="fraud") == {"trainer": "t" * 12, "reader": "r" * 12}
    # production's trainer login in staging's Secret: refused, it would be 401 at run time
    with pytest.raises(TrackingError, match=r"MLFLOW_ROLE_TRAINER_USERNAME='mlops-production.fraud-trainer' "
                                            r"\(expected 'mlops-staging.fraud-trainer'\)"):
        role_passwords({**env, "MLFLOW_ROLE_TRAINER_USERNAME": "mlops-production.fraud-trainer"},
                       namespace="mlops-staging", model="fraud")


def test_reading_the_role_table_does_not_import_mlflows_server() -> None:
    """The demo's process imports the rehearsal's modules, which read GRANTS and user_name: importing
    ``mlflow.server`` there printed Starlette's deprecation warning on the demo's console (the e2e console test)."""
    import subprocess
    import sys

    code = "import sys, mlops_pipeline; from mlops_core import GRANTS, user_name; print('mlflow.server' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
    assert "Warning" not in done.stderr, done.stderr[-2000:]
