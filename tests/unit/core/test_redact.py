"""A URL's password never reaches MLflow params, the run's config.json or an error message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import TrackingError, redact_credentials
from mlops_core.tracking import mlflow_client, start_run, tracking_uris

SECRET = "s3cr%40t-pw"  # percent-encoded, as a URL carries it


@pytest.mark.parametrize(("text", "want"), [
    (f"postgresql+psycopg2://feast:{SECRET}@db:5432/reg", "postgresql+psycopg2://feast:***@db:5432/reg"),
    (f"redis://:{SECRET}@redis:6379/0", "redis://:***@redis:6379/0"),
    ("https://ghp_token@github.com/o/r.git", "https://***@github.com/o/r.git"),
    (f"two: http://a:{SECRET}@h/x and s3://b/k@v1", "two: http://a:***@h/x and s3://b/k@v1"),
    ("http://mlflow:5000/path?x=a@b", "http://mlflow:5000/path?x=a@b"),
    # a bare user name of a database URL is no secret (trust auth: postgresql://postgres@host/db); it stays
    ("postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    ("redis://app@r:6379/0", "redis://app@r:6379/0"),
])
def test_passwords_are_replaced_and_everything_else_kept(text: str, want: str) -> None:
    assert redact_credentials(text) == want


def test_a_run_records_no_password_of_the_config(tmp_path: Path) -> None:
    section = TrackingConfig(uri="sqlite:///state/mlflow.db", artifact_location="state/artifacts", experiment="t")
    config = {"features": {"registry": f"postgresql+psycopg2://feast:{SECRET}@db:5432/reg"}, "seed": 1}
    with start_run(section, tmp_path, run_name="r", seed=1, config=config) as run:
        run_id = run.info.run_id
    client = mlflow_client(section, tmp_path)
    got = client.get_run(run_id)
    assert got.data.params["features.registry"] == "postgresql+psycopg2://feast:***@db:5432/reg"
    recorded = json.loads(Path(client.download_artifacts(run_id, "config.json", str(tmp_path))).read_text())
    assert SECRET not in json.dumps(recorded)
    assert config["features"]["registry"].endswith(f"{SECRET}@db:5432/reg")  # the caller's config is untouched


def test_an_error_about_a_tracking_uri_carries_no_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    section = TrackingConfig(uri=f"http://admin:{SECRET}@mlflow:5000", password_env="MLFLOW_TRACKING_PASSWORD")
    with pytest.raises(TrackingError) as err:
        tracking_uris(section, tmp_path)
    assert SECRET not in str(err.value) and "admin:***@mlflow" in str(err.value)


def test_restore_gives_back_exactly_what_redaction_took() -> None:
    from mlops_core import redact_tree, restore_credentials

    live = {"features": {"registry": f"postgresql+psycopg2://feast:{SECRET}@db:5432/reg",
                         "redis_url": f"redis://:{SECRET}@redis:6379/0", "project": "fraud"},
            "data": {"paths": ["s3://b/k@v1", f"https://tok{SECRET}@h/x"]}, "seed": 3}
    recorded = json.loads(json.dumps(redact_tree(live)))
    assert SECRET not in json.dumps(recorded)
    assert restore_credentials(recorded, live) == live
    # a place the live config does not hold stays as recorded
    assert restore_credentials(recorded, {"seed": 3}) == recorded


def test_restore_refuses_another_url_under_the_same_key() -> None:
    from mlops_core import redact_tree, restore_credentials

    recorded = redact_tree({"features": {"registry": f"postgresql://feast:{SECRET}@db-a:5432/reg"}})
    with pytest.raises(ValueError, match=r"features\.registry.*db-a.*db-b"):
        restore_credentials(recorded, {"features": {"registry": f"postgresql://feast:{SECRET}@db-b:5432/reg"}})


def test_a_logged_url_and_a_traceback_carry_no_password(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from mlops_core import setup_logging

    setup_logging("INFO", rich=False)
    log = logging.getLogger("mlops.test.redact")
    url = f"postgresql+psycopg2://feast:{SECRET}@db:5432/reg"
    log.info("connecting to %s", url)
    try:
        raise ConnectionError(f"could not reach {url}")
    except ConnectionError:
        log.exception("registry down")
    err = capsys.readouterr().err
    assert SECRET not in err
    assert err.count("feast:***@db:5432/reg") == 2 and "registry down" in err and "ConnectionError" in err
