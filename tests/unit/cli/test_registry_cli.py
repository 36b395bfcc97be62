"""``mlops registry``: promote (gated), history --at, rollback and list, on a real MLflow (SQLite) registry."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops_cli.app import app
from mlops_core.ledger import now_iso


@pytest.fixture
def registry(config_dir: Path) -> dict[str, str]:
    """Model ``fraud`` with two versions in the temp repo's local (SQLite) registry; returns the CLI env."""
    from mlops_config import load_config
    from mlops_core import mlflow_client

    loaded = load_config(config_dir=config_dir, environ={})
    client = mlflow_client(loaded.config.tracking, loaded.root)
    client.create_registered_model("fraud")
    for _ in range(2):
        client.create_model_version("fraud", source=str(loaded.root))
    return {"MLOPS_CONFIG_DIR": str(config_dir), "GITHUB_ACTOR": "ci-bot"}


def _report(tmp_path: Path, version: str) -> str:
    gates = [{"name": g, "passed": True, "reason": "ok", "evidence": {}}
             for g in ("quality", "reproducibility", "latency", "contract", "calibration")]
    path = tmp_path / f"eval-{version}.json"
    path.write_text(json.dumps({"model": "fraud", "candidate": {"version": version}, "passed": True, "gates": gates}))
    return str(path)


def test_promote_history_rollback(registry: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()

    def mlops(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, list(args), env=registry)
        return result.exit_code, result.stdout, result.stderr

    def walk(version: str) -> None:
        assert mlops("registry", "promote", "-v", version, "--to", "candidate", "-r", "new")[0] == 0
        assert mlops("registry", "promote", "-v", version, "--to", "staging", "-r", "gated",
                     "--gate-report", _report(tmp_path, version))[0] == 0
        assert mlops("registry", "promote", "-v", version, "--to", "canary", "-r", "10%")[0] == 0
        assert mlops("registry", "promote", "-v", version, "--to", "champion", "-r", "canary ok")[0] == 0

    assert mlops("registry", "promote", "-v", "1", "--to", "candidate", "-r", "new")[0] == 0
    code, _, err = mlops("registry", "promote", "-v", "1", "--to", "staging", "-r", "no gates")
    assert code == 1 and "no gate report for 'fraud' version '1'" in err
    assert mlops("registry", "promote", "-v", "1", "--to", "staging", "-r", "gated",
                 "--gate-report", _report(tmp_path, "1"))[0] == 0
    for to in ("canary", "champion"):
        assert mlops("registry", "promote", "-v", "1", "--to", to, "-r", "step")[0] == 0
    time.sleep(0.05)
    between = now_iso()
    time.sleep(0.05)
    walk("2")

    code, out, _ = mlops("registry", "history", "--at", between, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["aliases_at"] == {"champion": "1"} and len(doc["entries"]) == 4
    assert {e["actor"] for e in doc["entries"]} == {"ci-bot"}

    code, out, _ = mlops("registry", "rollback", "-r", "drift CRITICAL", "--json")
    assert code == 0 and json.loads(out)["version"] == "1" and json.loads(out)["extra"]["replaced"] == "2"
    code, out, _ = mlops("registry", "list", "--json")
    listing = json.loads(out)
    assert listing["aliases"] == {"champion": "1"}
    assert [v["aliases"] for v in listing["versions"]] == [[], ["champion"]]
    code, out, _ = mlops("registry", "history", "--json")
    assert [e["action"] for e in json.loads(out)["entries"]][-1] == "rollback" and len(json.loads(out)["entries"]) == 9

    code, _, err = mlops("registry", "promote", "-v", "2", "--to", "fallback", "-r", "x")
    assert code == 2 and err.startswith("error: cannot promote to 'fallback'")
    code, _, err = mlops("registry", "history", "--at", "yesterday")
    assert code == 2 and "'yesterday' is not ISO 8601" in err
    code, _, err = mlops("registry", "rollback", "-r", "again")
    assert code == 2 and "no 'fallback' version" in err
