"""Retraining requests: bad input is refused before anything is cloned, and the body carries the evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops_config import DataConfig
from mlops_delivery.errors import DeliveryError
from mlops_delivery.retrain import RetrainTrigger, load_evidence, render_body, resolve_data_version

V1 = "1" * 31 + "b.dir"


def test_an_unknown_reason_is_named_with_the_known_ones() -> None:
    with pytest.raises(DeliveryError, match=r"reason 'boredom' is not known; expected one of "
                                            r"\['drift', 'performance', 'data'\]"):
        RetrainTrigger(model="fraud", reason="boredom", evidence={})


def test_evidence_must_be_an_existing_json_object(tmp_path: Path) -> None:
    with pytest.raises(DeliveryError, match=r"evidence file '.*missing.json' does not exist"):
        load_evidence(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(DeliveryError, match=r"holds a JSON list; expected an object"):
        load_evidence(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DeliveryError, match=r"is not readable JSON"):
        load_evidence(tmp_path / "bad.json")


def test_a_data_version_must_look_like_what_ingestion_publishes(tmp_path: Path) -> None:
    with pytest.raises(DeliveryError, match=r"data version 'v3' is not an accepted data version; expected DVC's md5"):
        resolve_data_version(DataConfig(), tmp_path, "v3")
    assert resolve_data_version(DataConfig(), tmp_path, V1) == V1  # no DVC remote (local): taken as given
    with pytest.raises(DeliveryError, match=r"no --data-version given and data.dvc_remote is not set"):
        resolve_data_version(DataConfig(), tmp_path, None)
    remote = DataConfig(dvc_remote=str(tmp_path / "dvc"))
    with pytest.raises(DeliveryError, match=rf"data version '{V1}' is not published under"):
        resolve_data_version(remote, tmp_path, V1)
    with pytest.raises(DeliveryError, match=r"nothing is published under .*pointers/latest.dvc"):
        resolve_data_version(remote, tmp_path, "latest")


def test_the_body_carries_the_trigger_the_pin_change_figures_and_links() -> None:
    evidence = {"summary": "F1 fell", "realized_f1": 0.31, "figures": {"drop": 0.07, "ignored": [1]},
                "links": {"run": "https://ci.example/run/9"}}
    body = render_body(RetrainTrigger("fraud", "performance", evidence), V1, None, "2026-03-02T09:00:00Z")
    assert "performance drop beyond the policy" in body
    assert f"`(none pinned)` → `{V1}`" in body and "`performance` at 2026-03-02T09:00:00Z" in body
    assert "| realized_f1 | 0.31 |" in body and "| drop | 0.07 |" in body and "| ignored |" not in body
    assert "- [run](https://ci.example/run/9)" in body
    assert json.loads(body.split("```json\n", 1)[1].split("\n```", 1)[0]) == evidence


def test_cli_names_bad_input(config_dir: Path, tmp_path: Path) -> None:
    from mlops_cli.app import app

    evidence = tmp_path / "ev.json"
    evidence.write_text("{}")
    env = {"MLOPS_CONFIG_DIR": str(config_dir), "MLOPS_PROFILE": "local"}

    def mlops(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["retrain", *args], env=env)
        return result.exit_code, result.stderr

    code, err = mlops("request", "--model", "fraud", "--reason", "boredom", "--evidence", str(evidence))
    assert code == 2 and "retrain reason 'boredom' is not known" in err
    code, err = mlops("request", "--model", "fraud", "--reason", "drift", "--evidence", str(tmp_path / "nope.json"))
    assert code == 2 and "nope.json' does not exist" in err
    code, err = mlops("request", "--model", "frued", "--reason", "drift", "--evidence", str(evidence))
    assert code == 2 and "unknown model 'frued'" in err and "did you mean 'fraud'" in err
    code, err = mlops("request", "--model", "fraud", "--reason", "drift", "--evidence", str(evidence),
                      "--data-version", V1)
    assert code == 2 and "neither delivery.retrain.repo nor delivery.gitops_repo is set" in err
