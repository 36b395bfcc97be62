"""`mlops pipeline run --fast --until features` in a copy of the repo, as a person runs it (no --json): the console
holds the step lines and the summary, no library's warning and no JSON; the run's folder holds each step's log with
what DVC, the stage commands and Feast wrote."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import copy_repo

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

# What the same command printed before the console kept it in the step logs (Feast, ibis and Python's warning format)
THIRD_PARTY = re.compile(r"Warning:|warnings\.warn|site-packages|experimental feature|Running stage|Created feature")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    repo = copy_repo(repo_root, tmp_path_factory.mktemp("console") / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    res = subprocess.run([sys.executable, "-m", "mlops_cli", "pipeline", "run", "--fast", "--until", "features"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=540, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return repo, res


def test_console_tells_the_steps_and_nothing_else(run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, res = run
    console = res.stdout + res.stderr
    assert not THIRD_PARTY.search(console), console
    for line in console.splitlines():
        text = line.strip()
        if text.startswith(("{", "[")) and text.endswith(("}", "]")):
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)  # a step line starts with "[1/2]", which is not JSON
    lines = res.stderr.splitlines()
    assert re.fullmatch(r"\[1/2\] data: .* ok in \d+\.\ds: \d+ rows in 5 batches: \d+ accepted, 160 quarantined; "
                        r"rejected whole: truncated_batch", lines[2]), lines[2]
    assert re.fullmatch(r"\[2/2\] features: .* ok in \d+\.\ds: fraud_v1: \d+ features, online store built",
                        lines[4]), lines[4]
    assert len(lines) < 40, console  # the same two steps printed ~200 lines before


def test_run_folder_holds_each_steps_log(run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    repo, res = run
    (run_dir,) = (repo / ".mlops" / "runs").iterdir()
    assert f"each step's output: {run_dir}/<step>.log" in res.stderr
    assert {p.name for p in run_dir.iterdir()} >= {"data.log", "features.log"}
    data_log = (run_dir / "data.log").read_text()
    assert "Running stage 'validate'" in data_log, "DVC's own output, from the stage it ran"
    features_log = (run_dir / "features.log").read_text()
    assert "> .venv/bin/mlops features build" in features_log
    assert "Created feature service fraud_v1" in features_log, "the stage command's (a child process's) output"
