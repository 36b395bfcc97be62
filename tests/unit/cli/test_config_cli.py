"""The `mlops` command as a user runs it: a real subprocess, real exit codes, real stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MLOPS = [sys.executable, "-m", "mlops_cli"]


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    return subprocess.run([*MLOPS, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=120, check=False)


def test_show_json_has_every_section_and_sources(config_dir: Path) -> None:
    res = run(["config", "show", "--json", "--set", "training.max_steps=7"], cwd=config_dir.parent)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc["config"]) == {"project", "tracking", "data", "features", "training", "evaluation", "serving",
                                  "monitoring", "delivery", "provenance", "contract"}
    assert doc["config"]["training"]["max_steps"] == 7
    assert doc["sources"]["training.max_steps"] == "--set"
    assert doc["sources"]["training.model"] == "configs/models/fraud.yaml"
    assert doc["profile"] == "local"


def test_show_table_for_people(config_dir: Path) -> None:
    res = run(["config", "show", "--section", "features"], cwd=config_dir.parent,
              env={"MLOPS__FEATURES__REDIS_TIMEOUT_S": "3", "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "features.redis_timeout_s" in res.stdout
    assert "env:MLOPS__FEATURES__REDIS_TIMEOUT_S" in res.stdout


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--set", "training.lr=-1"], {}, "--set: training.lr = -1; expected: Input should be greater than 0"),
        (["--set", "training.fsdp.sharding_stratgy=X"], {}, "did you mean 'training.fsdp.sharding_strategy'?"),
        (["--profile", "production"], {}, "names env var 'MLFLOW_TRACKING_USERNAME', which is not set"),
        ([], {"MLOPS__SERVING__PORT": "http"}, "env:MLOPS__SERVING__PORT: serving.port = 'http'"),
    ],
)
def test_bad_input_exits_2_with_one_line(config_dir: Path, args: list[str], env: dict[str, str], expected: str) -> None:
    res = run(["config", "show", *args], cwd=config_dir.parent, env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert "Traceback" not in res.stderr


def test_debug_adds_traceback(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text("project: {name: 'Bad Name', model: fraud}\n")
    res = run(["--debug", "config", "show"], cwd=config_dir.parent)
    assert res.returncode == 2
    assert "Traceback" in res.stderr
    assert "error: configs/base.yaml: project.name = 'Bad Name'" in res.stderr


def test_outside_a_repo_says_where_it_looked(tmp_path: Path) -> None:
    res = run(["config", "show"], cwd=tmp_path)
    assert res.returncode == 2
    assert "no configs/base.yaml" in res.stderr


def test_schema_written_validates_the_real_files(config_dir: Path, tmp_path: Path) -> None:
    import jsonschema
    import yaml

    out = tmp_path / "schema.json"
    res = run(["config", "schema", "--out", str(out)], cwd=config_dir.parent)
    assert res.returncode == 0, res.stderr
    schema = json.loads(out.read_text())
    for path in sorted(config_dir.rglob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()) or {}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"training": {"max_steps": "many"}}, schema)


def test_committed_schema_is_fresh(repo_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    res = run(["config", "schema", "--out", str(out)], cwd=repo_root)
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text()) == json.loads((repo_root / "configs" / "schema.json").read_text()), (
        "configs/schema.json is stale: run `.venv/bin/mlops config schema`"
    )


def test_help_lists_only_working_groups(repo_root: Path) -> None:
    res = run(["--help"], cwd=repo_root)
    assert res.returncode == 0
    assert "config" in res.stdout
    res = run(["config", "show", "--help"], cwd=repo_root)
    assert res.returncode == 0
    assert "--profile" in res.stdout and "--set" in res.stdout and "--json" in res.stdout


def test_family_names_each_models_kind_and_sets_the_step_output(tmp_path: Path) -> None:
    """What the workflows condition their family steps on: the model config's training section decides (tabular for
    fraud; a causal LM with an instruction dataset is a fine-tuned Hugging Face LM), read here off the YAML."""
    import yaml

    repo = Path(__file__).resolve().parents[3]
    for model, expected in (("fraud", "tabular_mlp"), ("llm-sft", "hf_causal_lm")):
        training = yaml.safe_load((repo / "configs" / "models" / f"{model}.yaml").read_text())["training"]
        assert (training["model"], bool(training.get("causal_lm", {}).get("dataset"))) == (
            {"tabular_mlp": "tabular", "hf_causal_lm": "causal_lm"}[expected], expected == "hf_causal_lm")
        out = tmp_path / f"{model}.out"
        res = run(["config", "family", "--model", model, "--output", "family"], cwd=repo,
                  env={"GITHUB_OUTPUT": str(out)})
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == expected and out.read_text() == f"family={expected}\n"
    bad = run(["config", "family", "--model", "frod"], cwd=repo)
    assert bad.returncode != 0
    assert "unknown model 'frod'" in bad.stderr and "'fraud', 'llm-sft'" in bad.stderr and "did you mean 'fraud'" \
        in bad.stderr
